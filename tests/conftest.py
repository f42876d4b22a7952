"""Shared fixtures: named personas, and real services (Celery worker, Ray head) started per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webapp.testing.services import celery_worker, ray_head, service_missing


@pytest.fixture
def make_user(db):
    from django.contrib.auth.models import Group, User

    def make(username: str, *roles: str, password: str = "correct horse battery") -> User:
        user = User.objects.create_user(username=username, password=password, email=f"{username}@example.org")
        for role in roles:
            user.groups.add(Group.objects.get(name=role))
        if "admin" in roles:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        return user

    return make


@pytest.fixture
def expert(make_user):
    return make_user("erin_expert", "expert")


@pytest.fixture
def researcher(make_user):
    return make_user("rhea_researcher", "researcher")


@pytest.fixture
def reviewer(make_user):
    return make_user("remy_reviewer", "reviewer")


@pytest.fixture
def admin_user(make_user):
    return make_user("ada_admin", "admin")


@pytest.fixture
def outsider(make_user):
    return make_user("otto_outsider")


def _database_url(settings_dict: dict) -> str:
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    auth = settings_dict["USER"] or ""
    if settings_dict.get("PASSWORD"):
        auth += f":{settings_dict['PASSWORD']}"
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{settings_dict['NAME']}"


@pytest.fixture(scope="session")
def live_celery_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real worker process on the configured broker (Redis in CI, the file-system broker elsewhere)."""
    from django.conf import settings
    from django.db import connection

    from webapp.celery import app

    if os.environ.get("CI", "").lower() == "true" and not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.fail("CI must run the Celery tests on Redis; set REDIS_URL")
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
    except Exception as exc:  # the broker's own error says best what is wrong
        service_missing(f"Celery broker {settings.CELERY_BROKER_URL} unreachable: {exc}")
    env = dict(os.environ, DATABASE_URL=_database_url(connection.settings_dict))
    log_path = Path(tmp_path_factory.mktemp("celery")) / "worker.log"
    with celery_worker(env, log_path) as process:
        yield process


@pytest.fixture(scope="session")
def live_ray_cluster():
    """A real `ray start --head`; yields its RayHead (Jobs API and GCS addresses)."""
    with ray_head() as head:
        yield head


@pytest.fixture(scope="session")
def live_ray_head(live_ray_cluster):
    """The Jobs API address (http://127.0.0.1:PORT) of the session's Ray head."""
    return live_ray_cluster.jobs_address


@pytest.fixture
def page(monkeypatch):
    """A 1280-px page in Debian's Chromium driven by Playwright, headless; never a downloaded browser."""
    import shutil

    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(executable).exists():
        service_missing("Debian's chromium is not installed (scripts/install-test-tools installs it as root)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread for the whole test; the ORM
    # calls that the test and its fixtures make around it are ordinary synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-sync",
            ],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        yield context.new_page()
        context.close()
        browser.close()


@pytest.fixture(scope="session")
def live_runs_stack(django_db_setup, live_server, live_ray_cluster, tmp_path_factory):
    """Runs end to end: a Ray head, the web server (the engine posts events to it) and a `runs` worker with
    beat reconciling every second. Yields the RunsWorker (kill / start it again); the stack's addresses are
    in its `env`."""
    from django.db import connection

    from webapp.testing.services import RunsWorker

    env = dict(
        os.environ,
        DATABASE_URL=_database_url(connection.settings_dict),
        RAY_ADDRESS=live_ray_cluster.jobs_address,
        RAY_AUTH_MODE="disabled",
        PRACTICUM_PUBLIC_URL=live_server.url,
        RUN_RECONCILE_SECONDS="1",
    )
    from webapp.celery import app

    with app.connection_for_write() as conn:  # messages left by an earlier session are for runs gone since
        conn.default_channel.queue_purge("runs")
    worker = RunsWorker(env, Path(tmp_path_factory.mktemp("runs-worker")))
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
