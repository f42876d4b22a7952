"""The sandbox interface every backend implements, and the pieces the backends share."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from pathlib import Path

from rl_engine.mcp_server.workspace import ANSWER_FILE, OUTPUT_DIR, SUBMITTED_MARKER, ServerSettings
from rl_engine.outcomes import HarnessCode, HarnessError
from rl_engine.sandbox.config import BundleLike, SandboxConfig, ToolResult, ToolSpec
from rl_engine.sandbox.connection import ToolServerConnection

PYTHON_CRITERION_EVALUATOR = """
import json
try:
    verdict = {"met": bool(eval(__expression__, {"answer": __answer__, "files": __files__}))}
except Exception as exc:
    verdict = {"met": False, "error": f"{type(exc).__name__}: {exc}"}
print("\\n" + json.dumps(verdict))
"""


class Sandbox(ABC):
    """One rollout's world: a work folder, a tool server over MCP, and jailed Python.

    Use as `async with create_sandbox(bundle, config) as sandbox:`; `start()` raises
    HarnessError(SANDBOX_START) and tool calls raise TOOL_SERVER_CRASH / TOOL_TIMEOUT / TOOL_EXCEPTION.
    """

    work_dir: Path
    output_dir: Path
    isolation: str
    ready_sec: float | None = None  # how long start() took, for traces and the benchmark

    def __init__(self, bundle: BundleLike, config: SandboxConfig) -> None:
        self.bundle = bundle
        self.config = config
        self._connection: ToolServerConnection | None = None
        self._tools: list[ToolSpec] = []
        self.last_evaluation_error: str | None = None

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the backend; a failed start cleans up after itself before the error propagates."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    @abstractmethod
    async def _start(self) -> None: ...

    async def run_solution(self, script: str, *, timeout_sec: float | None = None) -> tuple[str, str, int]:
        """Run the oracle's solve.py in the jail, current folder = work folder; may write output/."""
        stdout, stderr, returncode, limit_hit = await self._run_code(
            script, {}, timeout_sec or self.config.python_timeout_sec
        )
        if limit_hit:
            stderr += f"\n[solution stopped at its {limit_hit} limit]"
        return stdout, stderr, returncode

    @abstractmethod
    async def _run_code(
        self, code: str, globals_: dict, timeout_sec: float
    ) -> tuple[str, str, int, str | None]:
        """Run code in this backend's jail: stdout, stderr, exit code, limit hit."""

    @abstractmethod
    async def close(self) -> None: ...

    async def list_tools(self) -> list[ToolSpec]:
        return list(self._tools)

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        if self._connection is None:
            raise HarnessError(
                HarnessCode.TOOL_SERVER_CRASH, f"call to {name} on a sandbox that is not running"
            )
        return await self._connection.call(name, arguments, self.config.tool_timeout_sec)

    async def evaluate_python(self, expression: str, answer: str, files: dict[str, str]) -> bool:
        """A rubric `python` predicate over `answer` and `files`, evaluated in the jail.

        An expression that raises counts as not met (the reason is kept in `last_evaluation_error`);
        a jail that gives no verdict at all is the platform's fault.
        """
        globals_ = {"__expression__": expression, "__answer__": answer, "__files__": files}
        stdout, stderr, returncode, limit_hit = await self._run_code(
            PYTHON_CRITERION_EVALUATOR, globals_, self.config.python_timeout_sec
        )
        if limit_hit:
            raise HarnessError(
                HarnessCode.TOOL_TIMEOUT, f"python criterion stopped at its {limit_hit} limit", stderr
            )
        try:
            verdict = json.loads(stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise HarnessError(
                HarnessCode.TOOL_EXCEPTION,
                f"python criterion gave no verdict (exit code {returncode})",
                stderr,
            ) from None
        self.last_evaluation_error = verdict.get("error")
        return bool(verdict["met"])

    def submitted_answer(self) -> str | None:
        """The answer recorded by `submit_answer`, or None when the agent never submitted."""
        if not (self.output_dir / SUBMITTED_MARKER).exists():
            return None
        return (self.output_dir / ANSWER_FILE).read_text(encoding="utf-8")

    def _server_settings(self, isolation: str, bwrap_path: str | None) -> ServerSettings:
        return ServerSettings(
            max_result_chars=self.config.max_result_chars,
            python_timeout_sec=self.config.python_timeout_sec,
            memory_mb=self.config.memory_mb,
            max_output_bytes=self.config.max_output_bytes,
            isolation=isolation,
            bwrap_path=bwrap_path,
        )

    async def _open_connection(self, connection: ToolServerConnection, began: float) -> None:
        """List the server's tools; a tool the task enables but the server lacks is SANDBOX_START."""
        self._connection = connection
        self._tools = await connection.open(self.config.start_timeout_sec)
        offered = {tool.name for tool in self._tools}
        missing = [name for name in self.bundle.enabled_tools() if name not in offered]
        if missing:
            await connection.close()
            raise HarnessError(
                HarnessCode.SANDBOX_START,
                f"tool server does not offer enabled tool(s): {', '.join(missing)}",
                f"offered: {', '.join(sorted(offered))}\n{connection.stderr_text()}",
            )
        self.ready_sec = time.perf_counter() - began


def prepare_work_dir(bundle: BundleLike, root: Path) -> Path:
    """Copy the world into a fresh work folder with an empty output/; unreadable worlds are SANDBOX_START."""
    import shutil

    work_dir = root / "work"
    world = Path(bundle.world_dir)
    try:
        if not world.is_dir():
            raise FileNotFoundError(f"world folder {world} does not exist or is not a folder")
        shutil.copytree(world, work_dir, symlinks=False)
    except (OSError, shutil.Error) as exc:
        raise HarnessError(
            HarnessCode.SANDBOX_START, f"could not seed the work folder from {world}", str(exc)
        ) from exc
    (work_dir / OUTPUT_DIR).mkdir(exist_ok=True)
    return work_dir
