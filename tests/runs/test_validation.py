"""Task-version validation (runs/services/validation.py): the run submitting requests, ingestion of its
checklist, a failed run, the approval gate and the admin override, in the services and on the pages."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from runs.models import Run, RunKind, RunStatus, RunTaskVersion, ValidationStatus, VersionValidation
from runs.services.ingest import events_ingest
from runs.services.launch import run_cancel
from runs.services.validation import (
    ValidationRefused,
    version_validation_override,
    version_validation_request,
    version_validation_run_inline,
)
from tasks_authoring import services as authoring
from tasks_authoring.errors import AuthoringError
from tests.runs.event_builders import event, rollout_payload
from tests.runs.factories import bundle_name
from tests.runs.validation_helpers import checks, validation_finished
from tests.tasks_authoring.data_helpers import draft_with_rubric

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    sent = []
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: sent.append((name, pk)))
    return sent


@pytest.fixture
def submitted(expert, enqueued, django_capture_on_commit_callbacks):
    """A version submitted for review: its validation run is queued and was sent to the dispatcher."""
    task = draft_with_rubric(expert)
    with django_capture_on_commit_callbacks(execute=True):
        authoring.task_version_submit(version=task.latest_version, user=expert)
    return task.latest_version


def _finish(validation, *, items: list[dict], ok: bool, null_passed: bool = False) -> None:
    """The validate run's events: an oracle and a null rollout, then run_finished with the checklist."""
    run, version = validation.run, validation.version
    oracle = rollout_payload(bundle_name(version), version.content_hash)
    null = rollout_payload(
        bundle_name(version), version.content_hash, outcome="graded" if null_passed else "failed"
    )
    null["summary"]["policy"] = "null"
    checklist = {"task": bundle_name(version), "task_hash": version.content_hash, "ok": ok, "items": items}
    finished = {"kind": "validate", "findings": [], "checklists": [checklist]}
    result = events_ingest(
        run=run,
        events=[
            event(run, 1, "run_started", {"kind": "validate"}),
            event(run, 2, "rollout", oracle),
            event(run, 3, "rollout", null),
            event(run, 4, "run_finished", finished),
        ],
    )
    assert result.rejected == []


def engine_items(failed: dict[str, str] | None = None) -> list[dict]:
    """The checklist as the engine reports it: evidence names the policy, not a rollout."""
    evidence = {"oracle_passes": "oracle", "null_fails": "null", "golden_meets_criteria": "oracle"}
    return [
        {k: v for k, v in {**item, "evidence": evidence.get(item["key"])}.items() if k != "rollout_id"}
        for item in checks(failed)
    ]


def test_submitting_a_version_queues_a_validation_run_of_that_version_alone(submitted, expert, enqueued):
    validation = VersionValidation.objects.get(version=submitted)
    run = validation.run
    assert (validation.trigger, validation.status, validation.requested_by) == ("submit", "pending", expert)
    assert (run.kind, run.task_set, run.launched_by, run.status) == (RunKind.VALIDATE, None, expert, "queued")
    assert run.spec["kind"] == "validate" and run.spec["tasks"]["eval_dir"] == "tasks/eval"
    assert run.spec["judge"]["base_url"]  # the rubric has an llm_judge criterion
    [use] = RunTaskVersion.objects.filter(run=run)
    assert (use.version, use.content_hash, use.split) == (submitted, submitted.content_hash, "eval")
    assert enqueued == [("run_dispatch", run.pk)]


def test_a_draft_cannot_be_validated_because_it_may_still_change(expert):
    draft = draft_with_rubric(expert).latest_version
    with pytest.raises(ValidationRefused, match="is a draft that may still change"):
        version_validation_request(version=draft, user=expert, trigger="manual")


def test_run_finished_fills_the_checklist_with_each_failure_and_its_trace(submitted):
    validation = submitted.validations.get()
    reason = "the answer 'I don't know.' passes (criteria met: c1)"

    _finish(validation, items=engine_items({"null_fails": reason}), ok=False, null_passed=True)

    validation.refresh_from_db()
    assert validation.status == ValidationStatus.FAILED and validation.finished_at is not None
    assert validation.run.status == RunStatus.SUCCEEDED
    by_key = {c["key"]: c for c in validation.checks}
    assert list(by_key)[:2] == ["world_files", "tools_listed"]
    assert (by_key["null_fails"]["ok"], by_key["null_fails"]["reason"]) == (False, reason)
    null_rollout = validation.run.rollouts.get(policy="null")
    assert by_key["null_fails"]["rollout_id"] == null_rollout.pk
    assert by_key["oracle_passes"]["rollout_id"] == validation.run.rollouts.get(policy="oracle").pk
    assert by_key["world_files"]["rollout_id"] is None


def test_a_clean_checklist_passes(submitted):
    validation = submitted.validations.get()
    _finish(validation, items=engine_items(), ok=True)
    validation.refresh_from_db()
    assert validation.status == ValidationStatus.PASSED and all(c["ok"] for c in validation.checks)


def test_a_run_without_this_versions_checklist_is_an_error(submitted):
    validation = submitted.validations.get()
    run = validation.run
    events_ingest(run=run, events=[event(run, 1, "run_finished", {"kind": "validate", "checklists": []})])
    validation.refresh_from_db()
    assert validation.status == ValidationStatus.ERROR
    assert validation.error == "the validation run reported no checklist for this task version"


def test_a_cancelled_validation_run_ends_the_validation_as_an_error_with_the_reason(submitted, admin_user):
    validation = submitted.validations.get()
    run_cancel(run=validation.run, user=admin_user)
    validation.refresh_from_db()
    assert validation.status == ValidationStatus.ERROR
    assert validation.error == "the validation run cancelled: cancelled by ada_admin before it started"


def test_a_reviewer_cannot_approve_before_a_validation_has_passed(submitted, reviewer):
    with pytest.raises(AuthoringError, match="has no finished validation \\(one is running\\)"):
        authoring.review_decide(version=submitted, reviewer=reviewer, decision="approve")
    validation_finished(
        submitted, failed={"golden_meets_criteria": "c1 (regex): the pattern 'x' does not match"}
    )
    with pytest.raises(AuthoringError) as refused:
        authoring.review_decide(version=submitted, reviewer=reviewer, decision="approve")
    assert "its validation failed (The golden answer meets each deterministic criterion: c1 (regex)" in str(
        refused.value
    )
    assert "an admin may override the validation" in str(refused.value)
    submitted.refresh_from_db()
    assert submitted.state == "in_review"
    # Requesting changes needs no validation.
    authoring.review_decide(
        version=submitted, reviewer=reviewer, decision="request_changes", comment="Fix c1"
    )


def test_an_admin_override_lets_the_reviewer_approve_and_keeps_who_when_and_why(
    submitted, reviewer, admin_user
):
    validation = validation_finished(submitted, failed={"oracle_passes": "score 0.50: c1 not met"})
    with pytest.raises(PermissionDenied):
        version_validation_override(validation=validation, user=reviewer, reason="looks fine")
    with pytest.raises(ValidationRefused, match="reason: say why"):
        version_validation_override(validation=validation, user=admin_user, reason="  ")

    version_validation_override(
        validation=validation, user=admin_user, reason="c1 is judged by hand this week"
    )

    validation.refresh_from_db()
    assert (validation.overridden_by, validation.override_reason) == (
        admin_user,
        "c1 is judged by hand this week",
    )
    assert validation.overridden_at is not None
    authoring.review_decide(version=submitted, reviewer=reviewer, decision="approve")
    submitted.refresh_from_db()
    assert submitted.state == "approved"


def test_a_passed_validation_cannot_be_overridden(submitted, admin_user):
    validation = validation_finished(submitted)
    with pytest.raises(ValidationRefused, match="only a failed validation is overridden"):
        version_validation_override(validation=validation, user=admin_user, reason="why not")


def test_an_inline_validation_runs_the_engine_and_catches_a_regex_the_golden_answer_misses(expert, reviewer):
    task = authoring.task_create(owner=expert, title="Revenue", domain="finance")
    version = task.latest_version
    authoring.task_version_update(
        version=version, user=expert, instruction="What was Q3 revenue?", golden_answer="Q3 revenue was 120."
    )
    authoring.world_file_upload(
        version=version, user=expert, path="notes.txt", uploaded=io.BytesIO(b"Q3: 120\n")
    )
    authoring.criterion_create(
        version=version,
        user=expert,
        text="States 120",
        kind="number_close",
        params={"value": 120},
        required=True,
    )
    authoring.criterion_create(
        version=version,
        user=expert,
        text="Says it in euros",
        kind="regex",
        params={"pattern": "EUR"},
        required=True,
    )
    authoring.task_version_submit(version=version, user=expert)

    validation = version_validation_run_inline(version=version, user=expert)

    assert validation.trigger == "submit"  # the validation submitting requested, run here
    assert validation.status == ValidationStatus.FAILED, validation.error
    failed = {c["key"]: c for c in validation.checks if not c["ok"]}
    assert set(failed) == {"oracle_passes", "golden_meets_criteria"}
    assert failed["golden_meets_criteria"]["reason"].startswith(
        "c2 (regex): the pattern 'EUR' does not match"
    )
    oracle = Run.objects.get(pk=validation.run_id).rollouts.get(policy="oracle", final=True)
    assert failed["oracle_passes"]["rollout_id"] == oracle.pk and oracle.task_version == version
    with pytest.raises(AuthoringError, match="its validation failed"):
        authoring.review_decide(version=version, reviewer=reviewer, decision="approve")


# ---- pages ----


def test_the_task_page_shows_the_checklist_with_reasons_and_trace_links(client, submitted, expert):
    validation = submitted.validations.get()
    _finish(validation, items=engine_items({"null_fails": "the answer passes"}), ok=False, null_passed=True)
    null_rollout = validation.run.rollouts.get(policy="null")
    client.force_login(expert)

    page = client.get(reverse("tasks_authoring:task_detail", args=[submitted.task_id])).content.decode()

    assert "Validation of version 1" in page and "validation-failed" in page
    assert "The null agent does not pass" in page and "the answer passes" in page
    assert reverse("runs:trace_detail", args=[null_rollout.pk]) in page
    assert client.get(reverse("runs:trace_detail", args=[null_rollout.pk])).status_code == 200


def test_the_card_polls_while_the_validation_runs_and_stops_when_it_ends(client, submitted, expert):
    client.force_login(expert)
    url = reverse("runs:validation_card", args=[submitted.task_id]) + "?v=1"
    running = client.get(url)
    assert running.status_code == 200 and 'hx-trigger="every 3s"' in running.content.decode()
    validation_finished(submitted)
    ended = client.get(url)
    assert ended.status_code == 286 and "hx-trigger" not in ended.content.decode()


def test_validate_now_requests_a_manual_validation(client, submitted, reviewer, outsider, enqueued):
    validation_finished(submitted)
    client.force_login(outsider)
    assert (
        client.post(reverse("runs:version_validate", args=[submitted.task_id]), {"v": 1}).status_code == 404
    )
    client.force_login(reviewer)
    response = client.post(reverse("runs:version_validate", args=[submitted.task_id]), {"v": 1})
    assert response.status_code == 302
    latest = submitted.validations.order_by("-pk").first()
    assert (latest.trigger, latest.requested_by, latest.status) == ("manual", reviewer, "pending")


def test_the_review_form_says_why_approval_is_refused_and_an_admin_overrides_from_the_page(
    client, submitted, reviewer, admin_user
):
    validation = validation_finished(submitted, failed={"empty_answer_fails": "met by an empty answer: c2"})
    client.force_login(reviewer)
    page = client.get(reverse("tasks_authoring:task_detail", args=[submitted.task_id])).content.decode()
    assert "Approval is refused:" in page and "met by an empty answer: c2" in page
    assert "Override this validation" not in page
    denied = client.post(reverse("runs:validation_override", args=[validation.pk]), {"reason": "x"})
    assert denied.status_code == 403

    client.force_login(admin_user)
    assert (
        "Override this validation"
        in client.get(reverse("tasks_authoring:task_detail", args=[submitted.task_id])).content.decode()
    )
    client.post(reverse("runs:validation_override", args=[validation.pk]), {"reason": "the judge covers c2"})

    page = client.get(reverse("tasks_authoring:task_detail", args=[submitted.task_id])).content.decode()
    assert "Overridden by <strong>ada_admin</strong>" in page and "the judge covers c2" in page
    assert "Approval is refused" not in page


def test_the_review_queue_shows_each_versions_validation_failures(client, submitted, reviewer):
    validation_finished(submitted, failed={"oracle_passes": "score 0.50: c1 not met"})
    client.force_login(reviewer)
    page = client.get(reverse("tasks_authoring:review_queue")).content.decode()
    assert "validation-failed" in page and "The oracle passes (score 1.0)" in page
    assert "score 0.50: c1 not met" in page


def test_run_pages_cope_with_a_validation_run_that_has_no_task_set(client, submitted, reviewer):
    validation = submitted.validations.get()
    _finish(validation, items=engine_items(), ok=True)
    client.force_login(reviewer)
    detail = client.get(reverse("runs:run_detail", args=[validation.run_id]))
    assert detail.status_code == 200
    assert f"{submitted.task.slug} v1" in detail.content.decode()
    listing = client.get(reverse("runs:run_list"))
    assert listing.status_code == 200 and "one task version" in listing.content.decode()
    assert client.get(f"/api/runs/{validation.run_id}").json()["task_set_id"] is None


def test_the_demos_broken_draft_is_caught_when_it_is_submitted(expert, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    from tasks_authoring.demo import _create_draft, broken_draft

    version = _create_draft(broken_draft(), expert).latest_version
    authoring.task_version_submit(version=version, user=expert)

    validation = version_validation_run_inline(version=version, user=expert)

    failed = {c["key"]: c["reason"] for c in validation.checks if not c["ok"]}
    assert validation.status == ValidationStatus.FAILED
    assert set(failed) == {"oracle_passes", "golden_meets_criteria"}
    assert failed["golden_meets_criteria"].startswith(
        "c2 (regex): the pattern 'target (was )?missed' does not match the answer"
    )
    assert failed["oracle_passes"].startswith("score 0.50: c2 not met")


@pytest.mark.parametrize(
    ("persona", "card", "validate", "override"),
    [
        ("expert", 200, 302, 403),
        ("reviewer", 200, 302, 403),
        ("admin_user", 200, 302, 302),
        ("outsider", 404, 404, 404),
    ],
)
def test_who_may_read_validate_and_override(client, request, submitted, persona, card, validate, override):
    validation = validation_finished(submitted, failed={"null_fails": "passes"})
    client.force_login(request.getfixturevalue(persona))
    task = submitted.task_id
    assert client.get(reverse("runs:validation_card", args=[task]) + "?v=1").status_code in (card, 286)
    assert client.post(reverse("runs:version_validate", args=[task]), {"v": 1}).status_code == validate
    response = client.post(reverse("runs:validation_override", args=[validation.pk]), {"reason": "ok"})
    assert response.status_code == override


def test_an_anonymous_visitor_is_sent_to_log_in(client, submitted):
    for response in (
        client.get(reverse("runs:validation_card", args=[submitted.task_id])),
        client.post(reverse("runs:version_validate", args=[submitted.task_id])),
        client.post(reverse("runs:validation_override", args=[1])),
    ):
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
