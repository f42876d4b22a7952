"""The `local` backend: a temp work folder, a tool server process, bubblewrap for untrusted code."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from rl_engine.mcp_server.jail import IsolationUnavailable, JailLimits, resolve_isolation, run_jailed
from rl_engine.mcp_server.server import FAULTS_ENV
from rl_engine.mcp_server.workspace import OUTPUT_DIR
from rl_engine.outcomes import HarnessCode, HarnessError
from rl_engine.sandbox.base import Sandbox, prepare_work_dir
from rl_engine.sandbox.config import BundleLike, SandboxConfig
from rl_engine.sandbox.connection import ToolServerConnection
from rl_engine.sandbox.pool import (
    SandboxPool,
    ZygoteError,
    cold_server_command,
    default_pool,
    start_cold_server,
)


class LocalSandbox(Sandbox):
    def __init__(self, bundle: BundleLike, config: SandboxConfig, pool: SandboxPool | None = None) -> None:
        super().__init__(bundle, config)
        self.pool = pool if pool is not None else default_pool()
        self.isolation = "unknown"
        self._bwrap: str | None = None
        self._root: Path | None = None

    async def _start(self) -> None:
        began = time.perf_counter()
        try:
            self.isolation, self._bwrap = await asyncio.to_thread(
                resolve_isolation, self.config.isolation, self.config.bwrap_path
            )
        except IsolationUnavailable as exc:
            raise HarnessError(
                HarnessCode.SANDBOX_START, "the isolation tool does not work", str(exc)
            ) from exc
        self._root = Path(tempfile.mkdtemp(prefix="practicum-sandbox-", dir=self.config.root_dir))
        self.work_dir = prepare_work_dir(self.bundle, self._root)
        self.output_dir = self.work_dir / OUTPUT_DIR
        tools = list(self.bundle.enabled_tools())
        settings = self._server_settings(self.isolation, self._bwrap)
        faults = os.environ.get(FAULTS_ENV) or None
        try:
            if self.config.prewarmed:
                handle, *fds = await asyncio.to_thread(
                    self.pool.fork_server, self.work_dir, tools, settings, faults
                )
            else:
                handle, *fds = start_cold_server(cold_server_command(self.work_dir, tools, settings), faults)
        except (OSError, ZygoteError) as exc:
            raise HarnessError(
                HarnessCode.SANDBOX_START, "could not start the tool server", str(exc)
            ) from exc
        await self._open_connection(ToolServerConnection(handle, *fds), began)
        self.pool.record_ready("prewarmed" if self.config.prewarmed else "cold", self.ready_sec)

    async def _run_code(
        self, code: str, globals_: dict, timeout_sec: float
    ) -> tuple[str, str, int, str | None]:
        limits = JailLimits(
            cpu_sec=int(timeout_sec),
            memory_mb=self.config.memory_mb,
            file_bytes=self.config.max_output_bytes,
            wall_sec=timeout_sec,
        )
        result = await run_jailed(
            code, self.work_dir, isolation=self.isolation, bwrap=self._bwrap, limits=limits, globals_=globals_
        )
        return result.stdout, result.stderr, result.returncode, result.limit_hit

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
        if self._root is not None:
            await asyncio.to_thread(shutil.rmtree, self._root, True)
            self._root = None
