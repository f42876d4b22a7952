"""Health checks of every part Practicum depends on. A failing part reports why; it never raises."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

import httpx
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    message: str
    duration_ms: float

    def as_dict(self) -> dict:
        return asdict(self)


def _timed(name: str, check: Callable[[], str]) -> CheckResult:
    started = time.perf_counter()
    try:
        message = check()
        ok = True
    except Exception as exc:  # a health check reports every failure instead of raising it
        message = f"{type(exc).__name__}: {exc}".strip()
        ok = False
    return CheckResult(name, ok, message, round((time.perf_counter() - started) * 1000, 1))


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
        raise RuntimeError(f"{len(pending)} migration(s) not applied ({names}); run `manage.py migrate`")
    return f"{connection.vendor} reachable, all migrations applied"


def _broker_label() -> str:
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        return f"file-system broker in {settings.CELERY_BROKER_DIR}"
    # Hide any password in the URL.
    from kombu.utils.url import maybe_sanitize_url

    return maybe_sanitize_url(url)


def _check_broker() -> str:
    from webapp.celery import app

    with app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(
            max_retries=1, interval_start=0, interval_step=0, timeout=settings.HEALTH_TIMEOUT_SECONDS
        )
    return f"{_broker_label()} reachable"


# Every queue needs a consumer: "celery" runs extraction and exports, "runs" dispatches and reconciles runs.
REQUIRED_QUEUES = ("celery", "runs")


def _check_workers() -> str:
    from webapp.celery import app

    timeout = min(1.5, settings.HEALTH_TIMEOUT_SECONDS)
    replies = app.control.ping(timeout=timeout)
    if not replies:
        raise RuntimeError("no Celery worker answered a ping; start one with `celery -A webapp worker`")
    names = sorted(name for reply in replies for name in reply)
    served = {
        queue["name"]
        for queues in (app.control.inspect(timeout=timeout).active_queues() or {}).values()
        for queue in queues
    }
    missing = [queue for queue in REQUIRED_QUEUES if queue not in served]
    if missing:
        raise RuntimeError(
            f"no worker consumes the queue(s) {', '.join(missing)}; start one with "
            f"`celery -A webapp worker -Q {','.join(REQUIRED_QUEUES)}` ({len(names)} worker(s) answering)"
        )
    return f"{len(names)} worker(s) answering, queues {', '.join(sorted(served))}: {', '.join(names)}"


def _check_ray() -> str:
    address = settings.RAY_ADDRESS
    if not address:
        import importlib.metadata

        version = importlib.metadata.version("ray")
        return f"RAY_ADDRESS not set: a local Ray {version} starts on demand when a run launches"
    if address.startswith(("http://", "https://")):
        response = httpx.get(f"{address.rstrip('/')}/api/version", timeout=settings.HEALTH_TIMEOUT_SECONDS)
        response.raise_for_status()
        return f"Ray {response.json().get('ray_version', '?')} answering at {address}"
    host, _, port = address.removeprefix("ray://").rpartition(":")
    with socket.create_connection((host or "127.0.0.1", int(port)), timeout=settings.HEALTH_TIMEOUT_SECONDS):
        pass
    return f"Ray GCS reachable at {address}"


def _check_storage() -> str:
    probe_name = default_storage.save(f"health/{uuid.uuid4().hex}.txt", ContentFile(b"ok"))
    try:
        with default_storage.open(probe_name) as handle:
            if handle.read() != b"ok":
                raise RuntimeError("a file written to storage read back different bytes")
    finally:
        default_storage.delete(probe_name)
    return f"{type(default_storage).__name__} writable"


CHECKS: dict[str, Callable[[], str]] = {
    "database": _check_database,
    "broker": _check_broker,
    "workers": _check_workers,
    "ray": _check_ray,
    "storage": _check_storage,
}


def run_health_checks() -> list[CheckResult]:
    results = []
    broker_ok = True
    for name, check in CHECKS.items():
        if name == "workers" and not broker_ok:
            results.append(CheckResult(name, False, "not checked: the broker is unreachable", 0.0))
            continue
        result = _timed(name, check)
        broker_ok = broker_ok and (name != "broker" or result.ok)
        results.append(result)
    return results
