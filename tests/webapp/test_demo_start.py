"""The README's first command starts everything, serves the login page with all-green health, and
Ctrl-C leaves no process behind."""

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from webapp.testing.services import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICE_VARIABLES = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "RAY_ADDRESS")


def _processes_with(marker: str) -> list[str]:
    """Every live process whose environment carries the marker (children inherit it, Ray's daemons too)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                state = (proc / "stat").read_text().split()[2]
                if state != "Z":
                    command = (proc / "cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()
                    found.append(f"{proc.name}: {command}")
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return found


@pytest.mark.timeout(400)
def test_the_first_command_serves_login_with_green_health_and_stops_cleanly(tmp_path):
    var_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env["PRACTICUM_VAR_DIR"] = str(var_dir)
    port = free_port()
    process = subprocess.Popen(
        [
            "scripts/start",
            f"--port={port}",
            f"--ray-port={free_port()}",
            f"--ray-dashboard-port={free_port()}",
            "--ray-cpus=1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
            if "Practicum is running at" in line:
                break
        transcript = "".join(output)
        assert f"Practicum is running at http://127.0.0.1:{port}/" in transcript, transcript
        assert "Demo users (shown once" in transcript
        for username in ("expert", "researcher", "reviewer", "admin"):
            assert f"  {username}" in transcript

        login = httpx.get(f"http://127.0.0.1:{port}/login/", timeout=10)
        assert login.status_code == 200
        assert "Log in to Practicum" in login.text
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()
        assert health["ok"] is True, health
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    assert "stopped." in rest
    assert process.returncode == 0
    time.sleep(1)
    assert _processes_with(f"PRACTICUM_VAR_DIR={var_dir}") == []
