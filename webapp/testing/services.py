"""Real services for tests: a Celery worker process and a Ray head, each started and stopped by a fixture.

With CI=true a missing service fails the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from webapp.devstack import stop_process_group


def service_missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"CI requires this service: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def celery_worker(
    env: dict[str, str],
    log_path: Path,
    *,
    ready_timeout: float = 60,
    name: str = "test",
    queues: str | None = None,
    beat_schedule: Path | None = None,
) -> Iterator[subprocess.Popen]:
    """A real `celery worker` process (on `queues`, with beat when `beat_schedule` is given); ready once it
    answers a ping addressed to it by name."""
    from webapp.celery import app

    bin_dir = Path(sys.executable).parent
    hostname = f"{name}-{os.getpid()}@{socket.gethostname()}"
    argv = [
        str(bin_dir / "celery"),
        "-A",
        "webapp",
        "worker",
        "--loglevel=INFO",
        "--concurrency=1",
        "--pool=prefork",
        f"--hostname={hostname}",
        "--without-mingle",
        "--without-gossip",
    ]
    if queues:
        argv.append(f"--queues={queues}")
    if beat_schedule is not None:
        argv += ["--beat", f"--schedule={beat_schedule}"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the Celery worker exited with {process.returncode}:\n{log_path.read_text()[-3000:]}"
                )
            if app.control.ping(destination=[hostname], timeout=0.5):
                break
        else:
            raise RuntimeError(
                f"the Celery worker did not answer within {ready_timeout} s:\n{log_path.read_text()[-3000:]}"
            )
        yield process
    finally:
        stop_process_group(process)


@dataclass(frozen=True)
class RayHead:
    jobs_address: str  # the Jobs API / dashboard, http://127.0.0.1:PORT
    gcs_address: str  # what `ray.init(address=...)` joins, 127.0.0.1:PORT


@contextmanager
def ray_head(*, num_cpus: int = 1, ready_timeout: float = 120) -> Iterator[RayHead]:
    """A real `ray start --head` process; yields its Jobs API and GCS addresses."""
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists() and not shutil.which("ray"):
        service_missing("the `ray` command is not installed")
    temp_dir = tempfile.mkdtemp(prefix="prt-ray-")
    dashboard_port = free_port()
    gcs_port = free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    log_path = Path(temp_dir) / "head.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(ray_bin),
                "start",
                "--head",
                "--block",
                f"--port={gcs_port}",
                f"--num-cpus={num_cpus}",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={dashboard_port}",
                # Its own agent port: the default (52365) is taken by any other head on this machine, and a
                # head whose agent cannot bind refuses every job ("No available agent to submit job").
                f"--dashboard-agent-listen-port={free_port()}",
                "--include-dashboard=true",
                f"--temp-dir={temp_dir}",
                "--disable-usage-stats",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                service_missing(
                    f"`ray start --head` exited with {process.returncode}: {log_path.read_text()[-2000:]}"
                )
            try:
                if httpx.get(f"{address}/api/version", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            service_missing(f"the Ray head did not answer within {ready_timeout} s")
        yield RayHead(jobs_address=address, gcs_address=f"127.0.0.1:{gcs_port}")
    finally:
        stop_process_group(process)
        shutil.rmtree(temp_dir, ignore_errors=True)


class RunsWorker:
    """The `runs` queue's Celery worker, with beat (the reconciler), that a test may kill and start again."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env, self.folder = env, folder
        self.starts = 0
        self._context = None
        self.process: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        self.starts += 1
        self._context = celery_worker(
            self.env,
            self.folder / f"runs-worker-{self.starts}.log",
            name="runs",
            queues="runs",
            beat_schedule=self.folder / "beat-schedule",
        )
        self.process = self._context.__enter__()
        return self.process

    def kill(self) -> None:
        """SIGKILL the worker's whole process group, as a crashed machine would."""
        assert self.process is not None
        os.killpg(self.process.pid, 9)
        self.process.wait()
        self.stop()

    def stop(self) -> None:
        if self._context is not None:
            self._context.__exit__(None, None, None)
        self._context = self.process = None

    def log(self) -> str:
        return (self.folder / f"runs-worker-{self.starts}.log").read_text(errors="replace")[-4000:]
