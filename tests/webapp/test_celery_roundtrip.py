"""A task goes through the real broker to a real worker process and its result comes back."""

import pytest

from webapp.tasks import echo


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_task_round_trips_through_the_broker_and_a_worker(live_celery_worker, settings):
    payload = {"run": 7, "note": "héllo"}
    result = echo.delay(payload)
    assert result.get(timeout=60) == {"echo": payload}
    assert result.successful()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_ci_runs_it_on_redis(live_celery_worker, settings):
    import os

    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("outside CI the embedded file-system broker is used")
    assert settings.CELERY_BROKER_URL.startswith("redis://")
