"""An MCP client session over the three pipes of a tool-server process, wherever that process came from.

The session lives in a background task so `start()` and `close()` may run in different tasks. A server
that dies shows up as end-of-file on its stdout; the caller turns that, a timeout, or a flagged
unexpected exception into the matching `HarnessError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess

import anyio
from mcp.client import ClientSession
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from rl_engine.mcp_server.server import TOOL_EXCEPTION_META
from rl_engine.outcomes import HarnessCode, HarnessError
from rl_engine.sandbox.config import ToolResult, ToolSpec

_LINE_LIMIT = 64 * 1024 * 1024
_STDERR_KEEP = 64 * 1024


class PopenHandle:
    """A server this process started itself (cold start, `docker exec`)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.pid = process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self.process.wait()


class PidfdHandle:
    """A server forked by the zygote: not our child, so it is tracked through a pidfd (no pid reuse)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self.pidfd = None

    def alive(self) -> bool:
        if self.pidfd is None:
            return False
        readable, _, _ = select.select([self.pidfd], [], [], 0)
        return not readable

    def kill(self) -> None:
        if self.pidfd is None:
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        os.close(self.pidfd)
        self.pidfd = None


class ToolServerConnection:
    def __init__(
        self, handle: PopenHandle | PidfdHandle, stdin_fd: int, stdout_fd: int, stderr_fd: int
    ) -> None:
        self.handle = handle
        self._fds = (stdin_fd, stdout_fd, stderr_fd)
        self._stderr = bytearray()
        self._stdout_closed = asyncio.Event()
        self._stderr_closed = asyncio.Event()
        self._closing = asyncio.Event()
        self._ready: asyncio.Future[list[ToolSpec]] = asyncio.get_running_loop().create_future()
        self._session: ClientSession | None = None
        self._task: asyncio.Task | None = None

    def stderr_text(self) -> str:
        return self._stderr.decode(errors="replace")

    async def open(self, timeout: float) -> list[ToolSpec]:
        """Initialise the session and list the tools; raises HarnessError(SANDBOX_START) on failure."""
        self._task = asyncio.ensure_future(self._run())
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            raise HarnessError(
                HarnessCode.SANDBOX_START, f"tool server not ready after {timeout:g} s", self.stderr_text()
            ) from None
        except Exception as exc:
            await self.close()
            await self._drain_stderr()
            message = f"tool server failed to start: {type(exc).__name__}: {exc}"
            raise HarnessError(HarnessCode.SANDBOX_START, message, self.stderr_text()) from exc

    async def call(self, name: str, arguments: dict, timeout: float) -> ToolResult:
        if self._session is None or self._stdout_closed.is_set():
            await self._raise_crash(name)
        try:
            async with asyncio.timeout(timeout):
                result = await self._session.call_tool(name, arguments)
        except TimeoutError:
            self.handle.kill()
            await self._drain_stderr()
            raise HarnessError(
                HarnessCode.TOOL_TIMEOUT,
                f"tool {name} gave no result within {timeout:g} s",
                self.stderr_text(),
            ) from None
        except Exception as exc:
            if self._stdout_closed.is_set() or not self.handle.alive():
                await self._raise_crash(name)
            raise HarnessError(
                HarnessCode.TOOL_EXCEPTION, f"calling {name} failed in the MCP client: {exc}", repr(exc)
            ) from exc
        text = "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")
        meta = result.meta or {}
        if result.is_error and TOOL_EXCEPTION_META in meta:
            raise HarnessError(HarnessCode.TOOL_EXCEPTION, text, str(meta[TOOL_EXCEPTION_META]))
        return ToolResult(text=text, is_error=bool(result.is_error))

    async def _raise_crash(self, name: str):
        await self._drain_stderr()
        raise HarnessError(
            HarnessCode.TOOL_SERVER_CRASH,
            f"the tool server exited during a call to {name}",
            self.stderr_text() or "(no stderr)",
        )

    async def _drain_stderr(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self._stderr_closed.wait()

    async def close(self) -> None:
        self._closing.set()
        self.handle.kill()
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        stdin_fd, stdout_fd, stderr_fd = self._fds
        reader = asyncio.StreamReader(limit=_LINE_LIMIT)
        err_reader = asyncio.StreamReader()
        out_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdout_fd, "rb", 0)
        )
        err_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(err_reader), os.fdopen(stderr_fd, "rb", 0)
        )
        in_transport, in_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(stdin_fd, "wb", 0)
        )
        writer = asyncio.StreamWriter(in_transport, in_protocol, None, loop)
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)

        async def pump_stdout() -> None:
            async with read_send:
                while line := await reader.readline():
                    try:
                        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                        await read_send.send(SessionMessage(message))
                    except ValueError as exc:
                        await read_send.send(exc)
            self._stdout_closed.set()

        async def pump_stderr() -> None:
            while chunk := await err_reader.read(65536):
                self._stderr += chunk
                del self._stderr[:-_STDERR_KEEP]
            self._stderr_closed.set()

        async def pump_stdin() -> None:
            async with write_receive:
                async for message in write_receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write(data.encode() + b"\n")
                    with contextlib.suppress(ConnectionError):
                        await writer.drain()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(pump_stdout)
                group.start_soon(pump_stderr)
                group.start_soon(pump_stdin)
                try:
                    async with ClientSession(read_receive, write_send) as session:
                        await session.initialize()
                        listed = await session.list_tools()
                        self._session = session
                        self._ready.set_result(
                            [
                                ToolSpec(
                                    name=t.name, description=t.description or "", input_schema=t.input_schema
                                )
                                for t in listed.tools
                            ]
                        )
                        await self._closing.wait()
                finally:
                    group.cancel_scope.cancel()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._stdout_closed.set()
            for transport in (out_transport, err_transport, in_transport):
                transport.close()
