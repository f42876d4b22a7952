"""Starts and stops the local stack behind the README's first command: Ray head, judge, Celery worker + beat, web.

Each child runs in its own process group so that stopping it also stops everything it spawned
(Ray's head alone is a dozen processes); nothing is left running after Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

STOP_GRACE_SECONDS = 10


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path


@dataclass
class DevStack:
    base_dir: Path
    var_dir: Path
    host: str = "127.0.0.1"
    port: int = 8000
    ray_port: int = 6390
    ray_dashboard_port: int = 8265
    ray_cpus: int = 2
    start_ray: bool = True
    # The local llm_judge endpoint that the demo's run specs point at (rl_engine/judge_server.py).
    judge_port: int | None = 8790
    judge_model: str = "smollm2-135m-instruct"
    children: list[Child] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    @property
    def judge_url(self) -> str:
        return f"http://127.0.0.1:{self.judge_port}/v1"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("RAY_AUTH_MODE", "disabled")
        env["PRACTICUM_VAR_DIR"] = str(self.var_dir)
        env.setdefault("PRACTICUM_PUBLIC_URL", self.url.rstrip("/"))
        if self.judge_port:
            env.setdefault("PRACTICUM_JUDGE_URL", self.judge_url)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        log_dir = self.var_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - the child owns the handle for its whole life
        process = subprocess.Popen(
            argv, cwd=self.base_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def start(self, on_status=print) -> None:
        """Ray head, the judge (unless start_judge ran), Celery worker with beat, web; waits for each."""
        env = self._env()
        bin_dir = Path(sys.executable).parent
        if self.start_ray and not env.get("RAY_ADDRESS"):
            on_status(f"starting a local Ray head (dashboard port {self.ray_dashboard_port}) ...")
            ray_temp = tempfile.mkdtemp(prefix="practicum-ray-")
            self._spawn(
                "ray",
                [
                    str(bin_dir / "ray"),
                    "start",
                    "--head",
                    "--block",
                    f"--port={self.ray_port}",
                    f"--num-cpus={self.ray_cpus}",
                    "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={self.ray_dashboard_port}",
                    # A free agent port: the default (52365) may belong to another Ray head on this machine,
                    # and a head whose agent cannot bind refuses every job ("No available agent").
                    f"--dashboard-agent-listen-port={_free_port()}",
                    "--include-dashboard=true",
                    f"--temp-dir={ray_temp}",
                    "--disable-usage-stats",
                ],
                env,
            )
            env["RAY_ADDRESS"] = f"http://127.0.0.1:{self.ray_dashboard_port}"
            self._wait_for(f"{env['RAY_ADDRESS']}/api/version", "ray", timeout=90)
        self.start_judge(on_status)
        on_status("starting a Celery worker (with beat: the runs reconciler) ...")
        (self.var_dir / "celery").mkdir(parents=True, exist_ok=True)
        self._spawn(
            "celery",
            [
                str(bin_dir / "celery"),
                "-A",
                "webapp",
                "worker",
                "--loglevel=INFO",
                "--concurrency=2",
                "--queues=celery,runs",
                "--beat",
                f"--schedule={self.var_dir / 'celery' / 'beat-schedule'}",
                "--hostname=practicum@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            env,
        )
        on_status(f"starting the web server on {self.url} ...")
        self._spawn(
            "web",
            [sys.executable, "manage.py", "runserver", f"{self.host}:{self.port}", "--noreload"],
            env,
        )
        self._wait_for(f"{self.url}login/", "web", timeout=60)
        self._wait_for_worker(timeout=60)

    def start_judge(self, on_status=print) -> None:
        """The local judge alone, and waits until it answers; run_demo starts it before the demo's set-up
        so that the demo tasks' llm_judge criteria are validated for real. Nothing when there is no
        judge port or it already runs."""
        if not self.judge_port or any(c.name == "judge" for c in self.children):
            return
        on_status(f"starting the local judge ({self.judge_model}) on port {self.judge_port} ...")
        self._spawn(
            "judge",
            [
                sys.executable,
                "-m",
                "rl_engine.judge_server",
                "--model",
                self.judge_model,
                "--port",
                str(self.judge_port),
                "--threads",
                "1",
            ],
            self._env(),
        )
        self._wait_for(f"{self.judge_url}/models", "judge", timeout=180)

    def _wait_for(self, url: str, name: str, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        child = next(c for c in self.children if c.name == name)
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {child.process.returncode}; see {child.log_path}"
                )
            try:
                if httpx.get(url, timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{name} did not answer at {url} within {timeout:.0f} s; see {child.log_path}")

    def _wait_for_worker(self, *, timeout: float) -> None:
        from webapp.celery import app

        deadline = time.monotonic() + timeout
        child = next(c for c in self.children if c.name == "celery")
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise RuntimeError(
                    f"the Celery worker exited with code {child.process.returncode}; see {child.log_path}"
                )
            if app.control.ping(timeout=0.5):
                return
        raise RuntimeError(f"the Celery worker did not answer within {timeout:.0f} s; see {child.log_path}")

    def wait(self) -> Child:
        """Blocks until a child exits; returns it."""
        while True:
            for child in self.children:
                if child.process.poll() is not None:
                    return child
            time.sleep(0.5)

    def stop(self) -> None:
        for child in reversed(self.children):
            stop_process_group(child.process)
        self.children.clear()


def stop_process_group(process: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the child's whole group, then SIGKILL it: Ray's daemons can outlive their parent's exit."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        if sig is signal.SIGTERM:
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
    process.wait()


def judge_answers(base_url: str, *, timeout: float = 3.0) -> bool:
    """Whether an OpenAI-compatible endpoint answers at `base_url` (its model list)."""
    try:
        return httpx.get(f"{base_url.rstrip('/')}/models", timeout=timeout).status_code < 400
    except httpx.HTTPError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
