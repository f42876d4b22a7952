"""Sandboxes for rollouts: a work folder seeded with the world, an MCP tool server, jailed Python.

Backends: `local` (subprocess + bubblewrap, tool servers forked by a warm zygote) and `docker`
(one container per rollout). See docs/harness.md, "Sandbox and tool server".
"""

from rl_engine.sandbox.base import Sandbox
from rl_engine.sandbox.config import BundleLike, SandboxConfig, ToolResult, ToolSpec
from rl_engine.sandbox.pool import PoolStats, SandboxPool, default_pool


def create_sandbox(bundle: BundleLike, config: SandboxConfig, *, pool: SandboxPool | None = None) -> Sandbox:
    """A sandbox for one rollout of `bundle`; start it with `async with` (or `await start()`)."""
    if config.backend == "docker":
        from rl_engine.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(bundle, config)
    from rl_engine.sandbox.local import LocalSandbox

    return LocalSandbox(bundle, config, pool)


__all__ = [
    "BundleLike",
    "PoolStats",
    "Sandbox",
    "SandboxConfig",
    "SandboxPool",
    "ToolResult",
    "ToolSpec",
    "create_sandbox",
    "default_pool",
]
