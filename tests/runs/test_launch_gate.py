"""The pre-launch health gate of training runs (run_launch): refused with every reason, or launched past it
by an admin whose name and reason the run keeps."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from runs.forms import default_spec, merge, spec_json
from runs.models import Run
from runs.services.launch import RunGateRefused, run_launch
from tests.runs.factories import make_run
from tests.runs.validation_helpers import checks

pytestmark = pytest.mark.django_db

TRAIN = {"model": {"builtin": "tiny-llama"}, "max_steps": 2}


@pytest.fixture(autouse=True)
def no_dispatch(monkeypatch):
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)


def _fail_validation(version) -> None:
    """A newer validation of the version that failed."""
    version.validations.create(
        status="failed",
        trigger="manual",
        requested_by=version.task.owner,
        checks=checks({"oracle_passes": "score 0.50: c1 not met"}),
    )


def _evaluated(task_set, user, rate: float) -> Run:
    return make_run(
        user=user,
        task_set=task_set,
        kind="eval",
        status="succeeded",
        name="Baseline eval",
        harness_error_rate=rate,
    )


def test_a_clean_set_with_a_healthy_evaluation_launches(two_task_set, researcher):
    _evaluated(two_task_set, researcher, 0.05)
    run = run_launch(user=researcher, kind="train", task_set=two_task_set, split="train", spec=TRAIN)
    assert run.gate_overridden_by is None and run.gate_override_reason == ""


def test_the_gate_refuses_with_every_reason(two_task_set, researcher):
    version = two_task_set.members.select_related("version__task").order_by("pk").first().version
    _fail_validation(version)
    bad = _evaluated(two_task_set, researcher, 0.25)

    with pytest.raises(RunGateRefused) as refused:
        run_launch(user=researcher, kind="train", task_set=two_task_set, split="train", spec=TRAIN)

    reasons = refused.value.reasons
    assert len(reasons) == 2
    assert reasons[0].startswith(
        f"{version.task.slug} v1: its validation failed (The oracle passes (score 1.0)"
    )
    assert reasons[1] == (
        f"the latest evaluation of Two questions (run #{bad.pk}, Baseline eval) had a harness error rate of "
        "25.0%, above health_gate.max_eval_harness_error_rate 10.0%"
    )
    assert not Run.objects.filter(kind="train").exists()


def test_a_set_never_evaluated_is_refused_unless_the_spec_turns_that_check_off(two_task_set, researcher):
    with pytest.raises(RunGateRefused) as refused:
        run_launch(user=researcher, kind="train", task_set=two_task_set, split="train", spec=TRAIN)
    assert refused.value.reasons == [
        "Two questions has no finished evaluation run to measure the harness error rate; evaluate it first "
        "(or set health_gate.max_eval_harness_error_rate to null)"
    ]
    spec = {**TRAIN, "health_gate": {"max_eval_harness_error_rate": None}}
    assert run_launch(user=researcher, kind="train", task_set=two_task_set, split="train", spec=spec).pk


def test_the_threshold_comes_from_the_spec(two_task_set, researcher):
    _evaluated(two_task_set, researcher, 0.25)
    spec = {**TRAIN, "health_gate": {"max_eval_harness_error_rate": 0.3}}
    assert run_launch(user=researcher, kind="train", task_set=two_task_set, split="train", spec=spec).pk


def test_evaluations_are_not_gated(two_task_set, researcher):
    _fail_validation(two_task_set.members.first().version)
    assert run_launch(
        user=researcher, kind="eval", task_set=two_task_set, split="eval", spec={"agent": "oracle"}
    )


def test_only_an_admin_launches_past_the_gate_and_the_run_keeps_who_and_why(
    two_task_set, researcher, make_user
):
    _fail_validation(two_task_set.members.first().version)
    _evaluated(two_task_set, researcher, 0.0)
    with pytest.raises(PermissionDenied, match="only admins launch a training run past the health gate"):
        run_launch(
            user=researcher,
            kind="train",
            task_set=two_task_set,
            split="train",
            spec=TRAIN,
            gate_override_reason="I know",
        )
    admin = make_user("ari_admin", "admin", "researcher")

    run = run_launch(
        user=admin,
        kind="train",
        task_set=two_task_set,
        split="train",
        spec=TRAIN,
        gate_override_reason="  c1 is graded by hand; the rest is sound  ",
    )

    run.refresh_from_db()
    assert (run.gate_overridden_by, run.gate_override_reason) == (
        admin,
        "c1 is graded by hand; the rest is sound",
    )


def _post(task_set, **extra) -> dict:
    spec = merge(default_spec("train"), TRAIN)
    return {
        "name": "",
        "kind": "train",
        "task_set": task_set.pk,
        "split": "train",
        "spec_json": spec_json(spec),
        **extra,
    }


def test_the_launch_form_lists_the_reasons_and_admins_override_there(
    client, two_task_set, researcher, admin_user
):
    client.force_login(researcher)
    refused = client.post(reverse("runs:run_new"), {**_post(two_task_set), "use_json": "on"})
    page = refused.content.decode()
    assert refused.status_code == 400
    assert "The health gate refused this training run" in page and "has no finished evaluation run" in page
    assert "gate_override_reason" not in page

    client.force_login(admin_user)
    shown = client.post(reverse("runs:run_new"), {**_post(two_task_set), "use_json": "on"}).content.decode()
    assert 'name="gate_override_reason"' in shown
    launched = client.post(
        reverse("runs:run_new"),
        {**_post(two_task_set), "use_json": "on", "gate_override_reason": "first run of a new set"},
    )
    assert launched.status_code == 302
    run = Run.objects.get(kind="train")
    assert (run.gate_overridden_by, run.gate_override_reason) == (admin_user, "first run of a new set")
    detail = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert (
        "launched past the gate by <strong>ada_admin</strong>" in detail
        and "first run of a new set" in detail
    )
