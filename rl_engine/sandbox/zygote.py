"""The warm parent that forks one MCP tool server per sandbox (`python -m rl_engine.sandbox.zygote`).

A cold tool server spends ~0.5 s importing mcp, pydantic, pypdf and openpyxl. The zygote does that
once, freezes its heap (so forked children share pages copy-on-write), then waits on a SOCK_SEQPACKET
control socket. Each request carries JSON (work folder, tools, settings, faults) and, as SCM_RIGHTS,
the three pipe ends that become the child's stdin, stdout and stderr. The zygote forks, replies with
the child's pid, and goes back to waiting; the child starts its own session and serves MCP on those
pipes. The zygote exits when the control socket closes, i.e. when the harness process is gone.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import sys
import traceback

from rl_engine.mcp_server.server import FAULTS_ENV, build_server, serve
from rl_engine.mcp_server.workspace import ServerSettings, Workspace

READY = b'{"ready": true}'
MAX_MESSAGE = 1 << 16


def _serve_child(request: dict, fds: list[int], prebuilt) -> None:
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.pop(FAULTS_ENV, None)
    if request.get("faults"):
        os.environ[FAULTS_ENV] = request["faults"]
    try:
        settings = ServerSettings(**request["settings"])
        serve(request["workdir"], request["tools"], settings, request.get("faults"), prebuilt)
    except SystemExit as exc:
        print(exc, file=sys.stderr, flush=True)
        os._exit(2)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def main(control_fd: int) -> None:
    control = socket.socket(fileno=control_fd)
    # Children are reaped by the kernel; the harness watches them through pidfds.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    workspace = Workspace()
    prebuilt = workspace, build_server(workspace)
    gc.collect()
    gc.freeze()
    control.send(READY)
    while True:
        message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
        if not message:
            return
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            control.close()
            _serve_child(request, fds, prebuilt)
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    main(int(sys.argv[1]))
