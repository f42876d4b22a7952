"""Trace exports: JSONL, ATIF and metrics CSV of exactly the filtered list, progress, a real worker, the pages."""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.urls import reverse
from django.utils import timezone

from rl_engine.atif import AtifTrajectory
from rl_engine.trace import RolloutRecord
from runs.models import RolloutBody, StepMetric, TraceExport
from runs.services.trace_exports import (
    TraceExportError,
    TraceExportNotAllowed,
    filtered_rollouts,
    rollout_filters,
    trace_export_create,
    trace_export_run,
    write_rollouts_jsonl,
)
from runs.tasks import trace_exports_expire
from tests.runs.factories import add_steps
from tests.runs.trace_helpers import ingest, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    """Run A (the researcher's) and run B (another researcher's) over the expert's q0, q1 and another's z."""
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    a, b = world.runs["a"], world.runs["b"]
    q0, q1, z = world.versions["q0"], world.versions["q1"], world.versions["z"]
    world.rollouts = {
        "a_pass": ingest(a, q0, text="The revenue grew by a needle amount"),
        "a_fail": ingest(a, q1, outcome="failed", sample=1),
        "a_harness": ingest(a, q0, outcome="harness_error", sample=2, turns=0),
        "a_agent": ingest(a, z, outcome="agent_error", text="a NEEDLE in the answer"),
        "b_pass": ingest(b, q0, step=3),
        "b_harness": ingest(b, z, outcome="harness_error", code="TOOL_TIMEOUT", turns=3),
    }
    add_steps(a, 3)
    add_steps(b, 2)
    return world


def _export(user, format: str, filters: dict) -> TraceExport:
    export = trace_export_create(user=user, format=format, filters=filters)
    return trace_export_run(export=export)


def _lines(export: TraceExport) -> list[dict]:
    assert export.status == "done", export.error
    with export.file.open("rb") as handle:
        return [json.loads(line) for line in handle.read().decode().splitlines()]


def _ids(world, *names: str) -> set[int]:
    return {world.rollouts[name].pk for name in names}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, ("a_pass", "a_fail", "a_harness", "a_agent", "b_pass", "b_harness")),
        ({"outcome": "harness_error"}, ("a_harness", "b_harness")),
        ({"outcome": "harness_error", "error_code": "TOOL_TIMEOUT"}, ("b_harness",)),
        ({"q": "needle"}, ("a_pass", "a_agent")),
        ({"q": "needle", "outcome": "graded"}, ("a_pass",)),
        ({"passed": "no"}, ("a_fail",)),
        ({"step_min": "3"}, ("b_pass",)),
    ],
)
def test_a_jsonl_export_holds_exactly_the_filtered_rollouts_as_records(world, reviewer, filters, expected):
    lines = _lines(_export(reviewer, "jsonl", filters))

    assert {line["rollout_id"] for line in lines} == _ids(world, *expected)
    assert len(lines) == len(expected)
    for line in lines:
        record = RolloutRecord.model_validate(line)
        rollout = next(r for r in world.rollouts.values() if r.pk == line["rollout_id"])
        assert line["run_id"] == str(rollout.run.uuid) and line["run"] == rollout.run_id
        assert record.summary.outcome == rollout.outcome and record.summary.reward == rollout.reward
        assert len(record.turns) == rollout.turns


def test_the_label_filter_exports_the_labelled_rollouts_with_their_label(world, reviewer):
    from runs.services.labels import rollout_label_set

    rollout_label_set(rollout=world.rollouts["b_harness"], user=reviewer, label="harness_bug", note="hung")
    rollout_label_set(rollout=world.rollouts["a_fail"], user=reviewer, label="grader_wrong", note="")

    lines = _lines(_export(reviewer, "jsonl", {"label": "harness_bug"}))
    unlabelled = _lines(_export(reviewer, "jsonl", {"label": "none"}))

    assert [(line["rollout_id"], line["label"]) for line in lines] == [
        (world.rollouts["b_harness"].pk, "harness_bug")
    ]
    assert {line["rollout_id"] for line in unlabelled} == _ids(
        world, "a_pass", "a_harness", "a_agent", "b_pass"
    )
    assert all(line["label"] is None for line in unlabelled)


def test_an_atif_export_is_one_valid_trajectory_per_filtered_rollout(world, reviewer):
    lines = _lines(_export(reviewer, "atif", {"run": str(world.runs["a"].pk)}))

    assert {line["extra"]["rollout_id"] for line in lines} == _ids(
        world, "a_pass", "a_fail", "a_harness", "a_agent"
    )
    for line in lines:
        trajectory = AtifTrajectory.model_validate(line)
        assert trajectory.extra["run_id"] == str(world.runs["a"].uuid)
        assert trajectory.trajectory_id == f"{world.runs['a'].uuid}/{line['extra']['rollout_id']}"
    harness = next(line for line in lines if line["extra"]["rollout_id"] == world.rollouts["a_harness"].pk)
    assert harness["extra"]["outcome"] == "harness_error" and harness["extra"]["code"] == "SANDBOX_START"
    assert "reward" not in harness["extra"] or harness["extra"]["reward"] is None


def test_an_export_runs_as_its_owner_so_an_expert_gets_only_their_own_tasks(world, expert, researcher):
    expert_lines = _lines(_export(expert, "jsonl", {}))
    researcher_lines = _lines(_export(researcher, "jsonl", {}))

    assert {line["rollout_id"] for line in expert_lines} == _ids(
        world, "a_pass", "a_fail", "a_harness", "b_pass"
    )
    assert {line["rollout_id"] for line in researcher_lines} == _ids(
        world, "a_pass", "a_fail", "a_harness", "a_agent"
    )


def test_the_metrics_csv_has_a_column_per_metric_for_the_runs_in_the_filter(world, reviewer):
    export = _export(reviewer, "metrics_csv", {"run": str(world.runs["a"].pk)})

    with export.file.open("rb") as handle:
        rows = list(csv.DictReader(io.StringIO(handle.read().decode())))
    header = list(rows[0])
    assert header[:4] == ["run", "run_name", "split", "step"]
    assert "reward_mean" in header and "policy_loss" in header and "step" not in header[4:]
    assert "harness_errors_by_code.TOOL_TIMEOUT" in header and "agent_errors_by_code.TURN_BUDGET" in header
    assert header[4:] == sorted(header[4:])
    assert [(row["run"], row["split"], row["step"]) for row in rows] == [
        (str(world.runs["a"].pk), "train", str(step)) for step in (1, 2, 3)
    ]
    assert (
        rows[1]["harness_errors_by_code.TOOL_TIMEOUT"] == "1"
        and rows[0]["harness_errors_by_code.TOOL_TIMEOUT"] == ""
    )
    assert rows[2]["reward_mean"] == "1.0" and rows[0]["kl"] == ""
    assert (export.done, export.total) == (3, 3)


def test_the_metrics_csv_of_every_run_covers_each_run_once(world, reviewer):
    export = _export(reviewer, "metrics_csv", {})

    with export.file.open("rb") as handle:
        rows = list(csv.DictReader(io.StringIO(handle.read().decode())))
    assert len(rows) == StepMetric.objects.count() == 5
    assert {row["run_name"] for row in rows} == {"Run A", "Run B"}


def test_progress_is_reported_as_it_goes_and_reaches_the_total(world, reviewer, monkeypatch):
    monkeypatch.setattr("runs.services.trace_exports.PROGRESS_EVERY", 2)
    monkeypatch.setattr("runs.services.trace_exports.EXPORT_CHUNK", 4)
    reports = []

    written = write_rollouts_jsonl(
        io.StringIO(),
        rows=filtered_rollouts(user=reviewer, filters={}),
        atif=False,
        progress=lambda done, total: reports.append((done, total)),
    )

    assert written == 6
    assert reports == [(0, 6), (2, 6), (4, 6), (6, 6), (6, 6)]
    export = _export(reviewer, "atif", {})
    assert (export.status, export.done, export.total) == ("done", 6, 6)
    assert export.finished_at is not None


def test_a_rollout_that_does_not_fit_the_trace_format_fails_the_export_by_name(world, reviewer):
    broken = world.rollouts["b_pass"]
    RolloutBody.objects.filter(rollout=broken).update(turns=[{"index": 0, "role": "robot"}])

    export = _export(reviewer, "jsonl", {})

    assert export.status == "failed" and not export.file
    assert f"rollout {broken.pk}" in export.error and "turns.0.role" in export.error


def test_it_refuses_bad_filters_a_bad_format_and_outsiders(world, reviewer, outsider):
    with pytest.raises(TraceExportError, match="reward_max: The upper bound is below the lower one"):
        trace_export_create(user=reviewer, format="jsonl", filters={"reward_min": "1", "reward_max": "0"})
    with pytest.raises(TraceExportError, match="outcome: "):
        trace_export_create(user=reviewer, format="jsonl", filters={"outcome": "great"})
    with pytest.raises(TraceExportError, match="format must be one of jsonl, atif, metrics_csv"):
        trace_export_create(user=reviewer, format="xml", filters={})
    with pytest.raises(TraceExportNotAllowed):
        trace_export_create(user=outsider, format="jsonl", filters={})
    assert not TraceExport.objects.exists()


def test_the_stored_filters_are_the_lists_own_and_booleans_are_accepted(world, reviewer):
    export = trace_export_create(
        user=reviewer,
        format="jsonl",
        filters={"passed": True, "outcome": "graded", "sort": "-reward", "x": "y"},
    )

    assert (
        export.filters
        == {"outcome": "graded", "passed": True}
        == rollout_filters({"passed": "yes", "outcome": "graded"})
    )
    assert export.label == "Rollouts: outcome graded, passed yes"
    assert export.status == "queued"


# Pages --------------------------------------------------------------------------------------------


def test_the_list_page_starts_an_export_and_its_page_polls_until_done(world, client, reviewer):
    client.force_login(reviewer)
    response = client.post(reverse("runs:trace_export_new") + "?outcome=harness_error", {"format": "jsonl"})
    export = TraceExport.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "runs:trace_export", args=[export.pk]
    )
    assert export.filters == {"outcome": "harness_error"} and export.owner == reviewer

    polled = client.get(reverse("runs:trace_export", args=[export.pk]), headers={"HX-Request": "true"})
    assert polled.status_code == 200 and b"Waiting for a worker" in polled.content
    trace_export_run(export=export)
    done = client.get(reverse("runs:trace_export", args=[export.pk]), headers={"HX-Request": "true"})
    assert done.status_code == 286 and b"2 rollouts written" in done.content
    page = client.get(reverse("runs:trace_export", args=[export.pk]))
    assert b"Download" in page.content and b"outcome" in page.content
    listed = client.get(reverse("runs:trace_exports"))
    assert export.label.encode() in listed.content


def test_a_bad_export_request_is_answered_with_its_reason(world, client, reviewer):
    client.force_login(reviewer)
    response = client.post(
        reverse("runs:trace_export_new") + "?outcome=great", {"format": "jsonl"}, follow=True
    )

    assert b"Not exported: the filters are invalid: outcome:" in response.content
    assert not TraceExport.objects.exists()


def test_only_the_owner_or_an_admin_downloads(world, client, reviewer, researcher, admin_user, outsider):
    export = _export(reviewer, "jsonl", {"outcome": "harness_error"})
    url = reverse("runs:trace_export_download", args=[export.pk])

    client.force_login(reviewer)
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    body = b"".join(response.streaming_content).decode().splitlines()
    assert {json.loads(line)["rollout_id"] for line in body} == _ids(world, "a_harness", "b_harness")
    client.force_login(admin_user)
    assert client.get(url).status_code == 200
    for other in (researcher, outsider):
        client.force_login(other)
        assert client.get(url).status_code == 404
        assert client.get(reverse("runs:trace_export", args=[export.pk])).status_code == 404
    client.logout()
    assert client.get(url).status_code == 302  # to the login page


def test_an_unfinished_export_has_no_download(world, client, reviewer):
    export = trace_export_create(user=reviewer, format="jsonl", filters={})
    client.force_login(reviewer)

    assert client.get(reverse("runs:trace_export_download", args=[export.pk])).status_code == 404


def test_outsiders_get_404_from_the_export_pages(client, outsider):
    client.force_login(outsider)

    assert client.get(reverse("runs:trace_exports")).status_code == 404
    assert client.post(reverse("runs:trace_export_new"), {"format": "jsonl"}).status_code == 404


# A real worker ------------------------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_real_worker_writes_the_export_and_reports_progress(live_celery_worker, make_user):
    world = make_world(
        expert=make_user("wes_expert", "expert"),
        researcher=make_user("rhea_researcher", "researcher"),
        reviewer=make_user("wren_reviewer", "reviewer"),
        make_user=make_user,
    )
    for sample in range(3):
        ingest(world.runs["a"], world.versions["q0"], sample=sample)
    export = trace_export_create(
        user=world.users["reviewer"], format="atif", filters={"run": world.runs["a"].pk}
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        export.refresh_from_db()
        if export.status in ("done", "failed"):
            break
        time.sleep(0.3)

    assert (export.status, export.done, export.total) == ("done", 3, 3), export.error
    assert len([AtifTrajectory.model_validate(line) for line in _lines(export)]) == 3


def test_the_description_of_a_run_filter_names_the_run_not_yes():
    from runs.services.trace_exports import describe_filters

    assert describe_filters({"run": 1, "passed": True, "final": False}) == "run 1, passed yes, final no"


def test_an_expired_export_is_gone_from_the_page_and_the_api(world, client, reviewer, settings):
    settings.EXPORT_RETENTION_DAYS = 7
    export = _export(reviewer, "jsonl", {"outcome": "harness_error"})
    TraceExport.objects.filter(pk=export.pk).update(finished_at=timezone.now() - timedelta(days=8))
    stored = export.file.name
    assert trace_exports_expire() == 1
    export.refresh_from_db()
    assert (export.status, export.file.name) == ("expired", "")
    assert not default_storage.exists(stored)

    client.force_login(reviewer)
    page = client.get(reverse("runs:trace_export", args=[export.pk])).content.decode()
    assert "its file has expired" in page and "Download" not in page
    assert client.get(reverse("runs:trace_export_download", args=[export.pk])).status_code == 410
    api = client.get(f"/api/trace-exports/{export.pk}/download")
    assert api.status_code == 410 and "EXPORT_RETENTION_DAYS" in api.json()["detail"]
    assert client.get(f"/api/trace-exports/{export.pk}").json()["download_url"] is None
