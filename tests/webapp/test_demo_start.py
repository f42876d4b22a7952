"""The README's first command starts everything, serves the login page with all-green health, leaves a
finished evaluation run, a finished short training run and a finished fault drill (half its rollouts
harness errors) on the demo, and Ctrl-C leaves no process behind."""

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from runs.demo import DRILL_EVAL_RUN
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


def _demo_runs(var_dir: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(f"file:{var_dir / 'practicum.sqlite3'}?mode=ro", uri=True) as db:
        return {
            name: (status, reason)
            # The set-up validations of the demo tasks are runs too (kind validate); these are the launched ones.
            for name, status, reason in db.execute(
                "SELECT name, status, status_reason FROM runs_run WHERE kind != 'validate'"
            )
        }


def _harness_error_codes(var_dir: Path, run_name: str) -> dict[str, int]:
    with sqlite3.connect(f"file:{var_dir / 'practicum.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT r.outcome, r.error_code, COUNT(*) FROM runs_rollout r JOIN runs_run run ON run.id = r.run_id "
            "WHERE run.name = ? AND r.final GROUP BY r.outcome, r.error_code",
            (run_name,),
        )
        return {f"{outcome}:{code}".rstrip(":"): count for outcome, code, count in rows}


def _wait_for_finished_runs(var_dir: Path, timeout: float) -> dict[str, tuple[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        runs = _demo_runs(var_dir)
        done = runs and all(status in ("succeeded", "failed", "cancelled") for status, _ in runs.values())
        if done or time.monotonic() > deadline:
            return runs
        time.sleep(2)


@pytest.mark.timeout(600)
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
            f"--judge-port={free_port()}",
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

        assert "launched the demo run 'Demo: oracle on the knowledge-work tasks'" in transcript
        assert "launched the demo run 'Demo: GRPO on the toy colours'" in transcript
        assert f"launched the demo run '{DRILL_EVAL_RUN}'" in transcript
        runs = _wait_for_finished_runs(var_dir, timeout=300)
        assert runs == {
            "Demo: oracle on the knowledge-work tasks": ("succeeded", ""),
            "Demo: GRPO on the toy colours": ("succeeded", ""),
            DRILL_EVAL_RUN: ("succeeded", ""),
        }
        # The drill's knowledge-work tasks enable read_pdf, which it hides; its toy tasks do not.
        assert _harness_error_codes(var_dir, DRILL_EVAL_RUN) == {
            "harness_error:SANDBOX_START": 2,
            "graded": 2,
        }
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    assert "stopped." in rest
    assert process.returncode == 0
    time.sleep(1)
    assert _processes_with(f"PRACTICUM_VAR_DIR={var_dir}") == []
