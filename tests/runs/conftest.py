"""Fixtures of the runs tests: a task set of approved versions and runs launched on it."""

from __future__ import annotations

import pytest

from runs.services.launch import run_launch
from tests.runs.factories import build_two_task_set


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Personas are made per test; the default hasher would spend most of the suite's time on them."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def two_task_set(expert, reviewer, researcher):
    return build_two_task_set(expert, reviewer, researcher)


@pytest.fixture
def launch(researcher, two_task_set, monkeypatch):
    """Launch a run on the two-task set without dispatching it: these tests feed it events themselves."""
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)

    def make(kind: str = "eval", *, user=None, **spec):
        if kind == "train":
            # Not about the health gate: its eval half is off (docs/quality.md, "Tests").
            spec = {
                "model": {"builtin": "tiny-llama"},
                "max_steps": 3,
                "health_gate": {"max_eval_harness_error_rate": None},
                **spec,
            }
        else:
            spec = {"agent": "oracle", **spec}
        split = "train" if kind == "train" else "eval"
        return run_launch(user=user or researcher, kind=kind, task_set=two_task_set, split=split, spec=spec)

    return make
