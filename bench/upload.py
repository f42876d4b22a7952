"""Peak memory growth of the web server process while a 200 MB file is uploaded through the world manager.

Starts a real server process (`manage.py runserver --noreload`, one process) on a throwaway var folder,
logs in as an expert, streams a multipart upload from another process, and reads the server's peak
resident memory (VmHWM in /proc) before and after. Target: growth < 50 MB.
Run: .venv/bin/python bench/upload.py [--megabytes 200]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETUP = """
from django.contrib.auth.models import Group, User
from tasks_authoring import services
user = User.objects.create_user("bench_expert", password="bench password 1")
user.groups.add(Group.objects.get(name="expert"))
print(services.task_create(owner=user, title="Upload bench", domain="finance").pk)
"""


def _peak_rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_file(path: Path, megabytes: int) -> None:
    block = os.urandom(1024 * 1024)
    with path.open("wb") as out:
        for _ in range(megabytes):
            out.write(block)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="practicum-bench-upload-") as temp:
        temp_dir = Path(temp)
        env = dict(os.environ, PRACTICUM_VAR_DIR=str(temp_dir / "var"), DEBUG="true")
        env.pop("DATABASE_URL", None)
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--verbosity=0"], env=env, check=True, cwd=ROOT)
        task_id = (
            subprocess.run(
                [*manage, "shell", "-c", SETUP], env=env, check=True, cwd=ROOT, capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        upload_path = temp_dir / "big.bin"
        _write_file(upload_path, args.megabytes)

        port = _free_port()
        server = subprocess.Popen(
            [*manage, "runserver", "--noreload", "--nothreading", f"127.0.0.1:{port}"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=600) as client:
                for _ in range(100):
                    try:
                        client.get("/login/")
                        break
                    except httpx.TransportError:
                        time.sleep(0.2)
                token = client.cookies["csrftoken"]
                client.post(
                    "/login/",
                    data={
                        "username": "bench_expert",
                        "password": "bench password 1",
                        "csrfmiddlewaretoken": token,
                    },
                )
                world_url = f"/tasks/{task_id}/world/"
                assert client.get(world_url).status_code == 200  # warms the server: imports, templates
                before = _peak_rss_kb(server.pid)
                started = time.perf_counter()
                with upload_path.open("rb") as handle:
                    response = client.post(
                        f"/tasks/{task_id}/world/upload/",
                        files={"files": ("big.bin", handle, "application/octet-stream")},
                        headers={
                            "X-CSRFToken": client.cookies["csrftoken"],
                            "X-Requested-With": "XMLHttpRequest",
                        },
                    )
                seconds = time.perf_counter() - started
                after = _peak_rss_kb(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=10)
        stored = "big.bin" in response.text and response.status_code == 200
        print(
            f"uploaded {args.megabytes} MB in {seconds:.1f} s: HTTP {response.status_code}, stored: {stored}"
        )
        print(
            f"server peak RSS before {before / 1024:.1f} MB, after {after / 1024:.1f} MB: "
            f"growth {(after - before) / 1024:.1f} MB (target < 50 MB)"
        )


if __name__ == "__main__":
    main()
