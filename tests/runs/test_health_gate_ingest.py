"""The in-run health gate on the web side: the engine's gate run_finished → failed or paused with the
evidence; the reconciler leaves a paused run paused; Resume re-dispatches `train --resume` into the same
run folder; the run page shows the evidence, links to the offending traces and offers Resume."""

from __future__ import annotations

import shlex
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from rl_engine.health_gate import HealthGate
from rl_engine.spec import HealthGateSpec
from runs import ray_jobs, tasks
from runs.health_gate_selectors import run_gate_trip
from runs.models import RunEvent, RunStatus
from runs.services import dispatch
from runs.services.ingest import events_ingest
from runs.services.launch import run_cancel

from .event_builders import event, rollout_payload, task_of
from .factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(researcher, two_task_set):
    return make_run(user=researcher, task_set=two_task_set, kind="train", status="running")


def gate_evidence(action: str, *, checkpoint_step: int | None = None) -> dict:
    """The evidence exactly as the engine writes it: 3 of the last 4 final rollouts failed at step 2."""
    gate = HealthGate(HealthGateSpec(window_rollouts=4, max_window_harness_error_rate=0.5, on_trip=action))
    for step, code, seq in [(1, None, 3), (2, "TOOL_TIMEOUT", 10), (2, "TOOL_TIMEOUT", 12), (2, "JUDGE", 14)]:
        gate.observe(step=step, code=code, seq=seq)
    trip = gate.check(2)
    trip.checkpoint_step = checkpoint_step
    return trip.evidence()


def gate_events(run, action: str, *, first_seq: int = 1) -> list[dict]:
    """A step-2 burst as the driver reports it: its harness-error rollouts, then log and run_finished."""
    name, content_hash = task_of(run)
    rollouts = [
        event(
            run,
            first_seq + i,
            "rollout",
            rollout_payload(name, content_hash, outcome="harness_error", step=2, sample=i),
        )
        for i in range(3)
    ]
    evidence = gate_evidence(action, checkpoint_step=1 if action == "pause" else None)
    seq = first_seq + len(rollouts)
    return [
        *rollouts,
        event(run, seq, "log", {"message": evidence["message"], "step": 2, "health_gate": evidence}),
        event(
            run,
            seq + 1,
            "run_finished",
            {"steps": 1, "last": {}, "stopped_by": "health_gate", "health_gate": evidence},
        ),
    ]


def test_a_gate_that_fails_the_run_fails_it_with_the_evidence_as_reason(run):
    result = events_ingest(run=run, events=gate_events(run, "fail"))
    assert result.rejected == [] and result.accepted == 5
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.finished_at is not None
    assert run.status_reason.startswith("health gate: 3 of the last 4 final rollouts (steps 1–2)")
    assert (
        "TOOL_TIMEOUT 2, JUDGE 1" in run.status_reason
        and "failed before the update of step 2" in run.status_reason
    )
    trip = run_gate_trip(run=run)
    assert trip["by_code"] == {"TOOL_TIMEOUT": 2, "JUDGE": 1} and trip["seqs"] == [10, 12, 14]
    assert trip["traces_query"] == (
        f"run={run.pk}&step_min=1&step_max=2&split=train&outcome=harness_error&final=yes"
    )


def test_a_gate_that_pauses_the_run_leaves_it_paused_not_active_and_not_ended(run):
    events_ingest(run=run, events=gate_events(run, "pause"))
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and not run.is_active
    assert "paused before the update of step 2, checkpoint of step 1 kept" in run.status_reason
    # A plain run_finished arriving late (never in practice) does not turn a pause into a success.
    events_ingest(run=run, events=[event(run, 20, "run_finished", {"steps": 3})])
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED


def test_a_gate_payload_without_its_action_is_rejected(run):
    bad = event(run, 1, "run_finished", {"stopped_by": "health_gate", "health_gate": {"rate": 1.0}})
    result = events_ingest(run=run, events=[bad])
    assert result.rejected == [
        {
            "index": 0,
            "reason": "payload.health_gate must be the gate's evidence, with action one of fail, pause",
        }
    ]
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_the_reconciler_keeps_a_paused_run_paused_when_its_job_ends(run, monkeypatch):
    """The job exits (code 4) right after its last events: a reconcile pass that read the run while it
    was still running must not call it failed, nor one that runs later call it succeeded."""
    type(run).objects.filter(pk=run.pk).update(
        ray_job_id=f"practicum-{run.uuid}", ray_address="http://ray:8265"
    )
    run.refresh_from_db()  # the reconciler's view: running
    events_ingest(run=run, events=gate_events(run, "pause"))
    for status, code in ((ray_jobs.FAILED, 4), (ray_jobs.SUCCEEDED, 0)):
        monkeypatch.setattr(
            ray_jobs, "job_info", lambda address, job_id, s=status, c=code: ray_jobs.JobInfo(s, "", c)
        )
        dispatch._reconcile_job(run, timezone.now(), {})
        dispatch.runs_reconcile()
        run.refresh_from_db()
        assert run.status == RunStatus.PAUSED


class TestResume:
    @pytest.fixture
    def paused(self, run):
        type(run).objects.filter(pk=run.pk).update(
            ray_job_id=f"practicum-{run.uuid}", ray_address="http://ray:8265", dispatch_requeues=2
        )
        events_ingest(run=run, events=gate_events(run, "pause"))
        run.refresh_from_db()
        return run

    def test_the_launcher_resumes_a_paused_run_into_the_same_folder_with_resume(
        self, paused, researcher, settings, monkeypatch, django_capture_on_commit_callbacks
    ):
        dispatched = []
        monkeypatch.setattr(tasks.run_dispatch, "delay", dispatched.append)
        with django_capture_on_commit_callbacks(execute=True):
            dispatch.run_resume(run=paused, user=researcher)
        paused.refresh_from_db()
        assert paused.status == RunStatus.QUEUED and paused.status_reason == "resumed by rhea_researcher"
        assert (paused.ray_job_id, paused.finished_at, paused.dispatch_requeues) == ("", None, 0)
        assert dispatched == [paused.pk]
        # The new job: a fresh submission id, and the engine continues the run in its output folder.
        assert dispatch.submission_id(paused) == f"practicum-{paused.uuid}-resume-1"
        paused.ray_job_id = dispatch.submission_id(paused)
        argv = shlex.split(dispatch._entrypoint(paused, job_dir=None))
        assert argv[argv.index("--run-dir") + 1] == str(dispatch.run_folder(paused) / "output")
        assert argv[-1] == "--resume" and argv[argv.index("--run-id") + 1] == str(paused.uuid)

    def test_the_resumed_job_moves_the_run_through_starting_to_running(self, paused, researcher, monkeypatch):
        submitted = []
        monkeypatch.setattr(tasks.run_dispatch, "delay", lambda pk: None)
        monkeypatch.setattr(ray_jobs, "job_info", lambda address, job_id: None)
        monkeypatch.setattr(ray_jobs, "job_submit", lambda address, **job: submitted.append(job))
        dispatch.run_resume(run=paused, user=researcher)

        run = dispatch.run_submit(run=paused)

        assert run.status == RunStatus.STARTING and run.ray_job_id == f"practicum-{run.uuid}-resume-1"
        assert shlex.split(submitted[0]["entrypoint"])[-1] == "--resume"
        events_ingest(
            run=run, events=[event(run, 30, "log", {"message": "resumed from step_000001", "step": 1})]
        )
        run.refresh_from_db()
        assert run.status == RunStatus.RUNNING

    def test_only_the_launcher_or_an_admin_resumes_and_only_a_paused_run(
        self, paused, reviewer, admin_user, monkeypatch
    ):
        monkeypatch.setattr(tasks.run_dispatch, "delay", lambda pk: None)
        with pytest.raises(PermissionDenied):
            dispatch.run_resume(run=paused, user=reviewer)
        dispatch.run_resume(run=paused, user=admin_user)
        with pytest.raises(dispatch.RunNotResumable, match="only a paused run resumes; this one is queued"):
            dispatch.run_resume(run=paused, user=admin_user)

    def test_a_paused_run_is_cancelled_at_once(self, paused, researcher):
        run = run_cancel(run=paused, user=researcher)
        assert run.status == RunStatus.CANCELLED
        assert run.status_reason == "cancelled by rhea_researcher while paused by the health gate"

    def test_a_run_paused_twice_gets_a_new_job_each_time(self, paused, researcher, monkeypatch):
        monkeypatch.setattr(tasks.run_dispatch, "delay", lambda pk: None)
        dispatch.run_resume(run=paused, user=researcher)
        events_ingest(run=paused, events=gate_events(paused, "pause", first_seq=40))
        assert RunEvent.objects.filter(run=paused, type="run_finished").count() == 2
        assert dispatch.submission_id(paused) == f"practicum-{paused.uuid}-resume-2"


class TestRunPage:
    def test_the_banner_shows_the_evidence_links_the_traces_and_offers_resume(self, client, run, researcher):
        events_ingest(run=run, events=gate_events(run, "pause"))
        client.force_login(researcher)
        page = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
        assert (
            'data-gate="pause"' in page
            and "The health gate paused this run before the update of step 2" in page
        )
        assert "3 of the last 4 final rollouts (steps 1–2) were harness errors" in page
        traces = f"{reverse('runs:trace_list')}?run={run.pk}&amp;step_min=1&amp;step_max=2&amp;split=train"
        assert traces in page and "checkpoint of step 1 kept" in page
        assert reverse("runs:run_resume", args=[run.pk]) in page
        assert 'class="pill run-paused"' in page

    def test_a_reader_who_may_not_resume_sees_the_evidence_without_the_button(self, client, run, reviewer):
        events_ingest(run=run, events=gate_events(run, "pause"))
        client.force_login(reviewer)
        page = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
        assert "The health gate paused this run" in page
        assert reverse("runs:run_resume", args=[run.pk]) not in page
        assert client.post(reverse("runs:run_resume", args=[run.pk])).status_code == 403

    def test_resume_posts_queue_the_run_again(self, client, run, researcher, monkeypatch):
        monkeypatch.setattr(tasks.run_dispatch, "delay", lambda pk: None)
        events_ingest(run=run, events=gate_events(run, "pause"))
        client.force_login(researcher)
        response = client.post(reverse("runs:run_resume", args=[run.pk]), follow=True)
        run.refresh_from_db()
        assert run.status == RunStatus.QUEUED and "Resuming from the checkpoint" in response.content.decode()
        again = client.post(reverse("runs:run_resume", args=[run.pk]), follow=True).content.decode()
        assert "Not resumed: only a paused run resumes; this one is queued." in again

    def test_a_run_the_gate_failed_shows_the_banner_without_resume(self, client, run, researcher):
        events_ingest(run=run, events=gate_events(run, "fail"))
        client.force_login(researcher)
        page = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
        assert 'data-gate="fail"' in page and "The health gate failed this run" in page
        assert reverse("runs:run_resume", args=[run.pk]) not in page


def test_an_old_run_resumed_is_not_requeued_by_the_reconciler_at_once(run, researcher, monkeypatch):
    """A resumed run keeps its old created_at: without a fresh requeue mark the reconciler would
    think its dispatch message was lost and send another straight away."""
    sent = []
    monkeypatch.setattr(tasks.run_dispatch, "delay", sent.append)
    type(run).objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    events_ingest(run=run, events=gate_events(run, "pause"))
    run.refresh_from_db()
    dispatch.run_resume(run=run, user=researcher)
    report = dispatch.runs_reconcile()
    assert report.requeued == []


def test_a_resumed_run_that_then_failed_otherwise_shows_its_own_reason(run, researcher, monkeypatch):
    monkeypatch.setattr(tasks.run_dispatch, "delay", lambda pk: None)
    events_ingest(run=run, events=gate_events(run, "pause"))
    run.refresh_from_db()
    assert run_gate_trip(run=run)["action"] == "pause"
    dispatch.run_resume(run=run, user=researcher)
    type(run).objects.filter(pk=run.pk).update(status=RunStatus.FAILED, status_reason="killed by signal 9")
    run.refresh_from_db()
    assert run_gate_trip(run=run) is None
