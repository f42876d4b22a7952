"""Helpers of the dispatch and lifecycle tests: toy task sets in the database, and bounded waits on runs."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User

from rl_engine.toy_tasks import write_toy_tasks
from runs.demo import bundles_task_set_create, toy_model_ensure
from runs.models import FINAL_STATUSES, Run, RunEvent
from tasks_authoring.models import Domain, TaskSet


def toy_task_set(users: dict, name: str, objects: list[str], *, judged: tuple[str, ...] = ()) -> TaskSet:
    """Approved toy tasks (one per object), half train, half eval; the `judged` ones gain an llm_judge
    criterion, which breaks them when the run has no judge (a JUDGE harness error, never a 0)."""
    Domain.objects.get_or_create(slug="toy", defaults={"name": "Toy"})
    with tempfile.TemporaryDirectory() as folder:
        for bundle in write_toy_tasks(Path(folder), "green", objects):
            if bundle.name.removeprefix("colour-of-") in judged:
                rubric = json.loads((bundle / "tests" / "rubric.json").read_text())
                rubric["criteria"].append(
                    {"id": "c2", "text": "The answer is polite", "kind": "llm_judge", "params": {}}
                )
                (bundle / "tests" / "rubric.json").write_text(json.dumps(rubric))
        broken = {}
        if judged:  # approved although its validation fails: what these tests are about
            admin, _ = User.objects.get_or_create(username="test_admin", defaults={"is_superuser": True})
            admin.groups.add(Group.objects.get(name="admin"))
            broken = {"admin": admin, "override_reason": "deliberately broken: no judge in this test"}
        return bundles_task_set_create(folder=Path(folder), name=name, eval_fraction=0.5, **users, **broken)


def train_spec(*, steps: int) -> dict:
    """A few steps of the toy model on one prompt: seconds per step on two cores."""
    return {
        "model": {"path": str(toy_model_ensure(hidden_size=32))},
        "sampling": {"max_new_tokens_per_turn": 1},
        "batch": {"prompts_per_step": 1, "samples_per_prompt": 2},
        "optimizer": {"lr": 5e-3},
        "evaluation": {"at_start": False},
        "resources": {"sandboxes_per_worker": 2},
        "max_steps": steps,
        "health_gate": {
            "max_eval_harness_error_rate": None
        },  # the toy sets have no finished evaluation; the gate has its own tests
    }


def wait_for(check: Callable[[], bool], *, timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting: {what()}")


def describe(run: Run) -> str:
    run.refresh_from_db()
    return f"run {run.uuid} is {run.status} ({run.status_reason!r}), {run.events_received} events"


def wait_for_status(run: Run, statuses, *, timeout: float) -> Run:
    def reached() -> bool:
        run.refresh_from_db()
        return run.status in statuses

    wait_for(reached, timeout=timeout, what=lambda: describe(run))
    return run


def wait_until_final(run: Run, *, timeout: float) -> Run:
    return wait_for_status(run, FINAL_STATUSES, timeout=timeout)


def engine_events(run: Run) -> list[dict]:
    """The events the engine wrote to its own file in the run's output folder."""
    path = Path(settings.RUNS_DIR) / str(run.uuid) / "output" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_every_event_stored_once(run: Run) -> None:
    written = sorted(event["seq"] for event in engine_events(run))
    stored = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert written == list(range(1, len(written) + 1))
    assert stored == written
    run.refresh_from_db()
    assert run.last_seq == len(written)
