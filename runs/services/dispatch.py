"""Dispatch and lifecycle: a run becomes a Ray job (Jobs API), and Ray's view of the job becomes the run's status.

`run_submit` exports the run's task versions and spec into `<RUNS_DIR>/<uuid>/job/`, and submits
`python -m rl_engine <kind> spec.json` with that folder as the job's working directory and the
submission id `practicum-<uuid>`; outputs (events file, checkpoints) go to the absolute
`<RUNS_DIR>/<uuid>/output`. It is safe to run twice: the claim (queued → starting) happens under
the run's row lock, a file lock keeps two dispatchers of one run apart, and Ray refuses a second
job with the same submission id. `runs_reconcile` (Celery beat) maps Ray's job status to the run's
and fails runs that Ray lost. docs/runs.md ("Dispatch") says why the Jobs API.

A train run that the health gate paused is resumed by `run_resume` (paused → queued, then the same
dispatch): the new job runs `train --resume` into the same output folder, under the submission id
`practicum-<uuid>-resume-<n>` (Ray keeps the ended job's id). docs/quality.md ("Health gate").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shlex
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from rl_engine.bundle import write_bundle
from tasks_authoring.bundles import version_bundle

from .. import ray_jobs
from ..health_gate_selectors import run_pauses
from ..models import Run, RunKind, RunStatus, RunTaskVersion
from ..permissions import can_cancel_run
from ..tokens import run_ingest_token
from .validation import validation_run_ended

log = logging.getLogger(__name__)

SUBMISSION_PREFIX = "practicum-"
FAILED_LOG_LINES = 20
# Environment a job always gets: the engine never reaches the Hugging Face hub (models are local
# folders or built in), and its output is not held back by buffering.
JOB_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}
# Passed on from the worker's environment when set there.
PASSED_ENV = ("RAY_AUTH_MODE", "PRACTICUM_MODEL_CACHE")
# A cancel that Ray has not acted on after this long is sent again (the first stop may have been lost).
STOP_RESEND_SECONDS = 10
MAX_DISPATCH_REQUEUES = 5
# Ray uploads a working directory through its object store, whose messages are capped (512 MiB); a
# larger job folder (big task worlds) is run in place instead, from RUNS_DIR on shared storage.
UPLOAD_MAX_BYTES = 256 * 1024**2


class DispatchError(Exception):
    """The run could not be exported or submitted; the message is the run's failure reason."""


def submission_id(run: Run) -> str:
    pauses = run_pauses(run=run) if run.kind == RunKind.TRAIN else 0
    return f"{SUBMISSION_PREFIX}{run.uuid}" + (f"-resume-{pauses}" if pauses else "")


class RunNotResumable(Exception):
    """The run is not paused by the health gate; the message says what it is."""


def run_folder(run: Run) -> Path:
    return Path(settings.RUNS_DIR) / str(run.uuid)


# ---- submit ----


def run_submit(*, run: Run) -> Run:
    """Exports and submits the run once; a run cancelled while queued, or already submitted, is left alone."""
    address = settings.RAY_ADDRESS
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status == RunStatus.QUEUED:
            run.status = RunStatus.STARTING
            run.ray_job_id, run.ray_address = submission_id(run), address
            run.save(update_fields=["status", "ray_job_id", "ray_address"])
        elif run.status != RunStatus.STARTING:
            return run
    with _dispatch_lock(run) as held:
        if not held:
            return run  # another dispatcher of this run is at work
        try:
            if _already_submitted(run):
                return run
            job_dir = run_job_export(run=run)
            if not _still_starting(run):
                return run  # cancelled while the folder was written: submit nothing
            upload = _folder_bytes(job_dir) <= UPLOAD_MAX_BYTES
            _submit_patiently(
                run,
                entrypoint=_entrypoint(run, job_dir=None if upload else job_dir),
                working_dir=str(job_dir) if upload else None,
            )
        except (
            DispatchError,
            ray_jobs.RaySubmitRefused,
            ray_jobs.RayUnavailable,
            ValueError,
            OSError,
        ) as error:
            _run_fail(run, f"could not submit the run to Ray at {run.ray_address or '(no address)'}: {error}")
        except Exception as error:  # a bug must still end the run with its reason, not leave it starting
            log.exception("dispatching run %s failed", run.uuid)
            _run_fail(run, f"could not dispatch the run: {type(error).__name__}: {error}")
    run.refresh_from_db()
    return run


SUBMIT_RETRY_SECONDS = 2


def _submit_patiently(run: Run, *, entrypoint: str, working_dir: str | None) -> None:
    """Submits the job, asking again while Ray does not answer or answers with a server error (a head that
    has just started says "No available agent to submit job"), for up to RAY_SUBMIT_PATIENCE_SECONDS."""
    deadline = time.monotonic() + settings.RAY_SUBMIT_PATIENCE_SECONDS
    while True:
        try:
            ray_jobs.job_submit(
                run.ray_address,
                submission_id=run.ray_job_id,
                entrypoint=entrypoint,
                working_dir=working_dir,
                env_vars=_job_env(run),
                metadata={"practicum_run": str(run.uuid), "kind": run.kind},
            )
            return
        except ray_jobs.RayUnavailable:
            if time.monotonic() + SUBMIT_RETRY_SECONDS > deadline:
                raise
            time.sleep(SUBMIT_RETRY_SECONDS)


def _already_submitted(run: Run) -> bool:
    try:
        return ray_jobs.job_info(run.ray_address, run.ray_job_id) is not None
    except ray_jobs.RayUnavailable:
        return False  # the submit below reports the cluster's state


def _still_starting(run: Run) -> bool:
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status == RunStatus.CANCELLING:
            _finish(run, RunStatus.CANCELLED, run.status_reason or "cancelled before it was submitted")
        return run.status == RunStatus.STARTING


@contextlib.contextmanager
def _dispatch_lock(run: Run) -> Iterator[bool]:
    """An exclusive, non-blocking lock per run; the kernel releases it when a dispatcher dies."""
    folder = run_folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "dispatch.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_job_export(*, run: Run) -> Path:
    """Writes `<RUNS_DIR>/<uuid>/job/` afresh: tasks/<split>/<slug>/ bundles and spec.json; returns it."""
    folder = run_folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    job_dir = folder / "job"
    staging = Path(tempfile.mkdtemp(prefix="job-", dir=folder))
    try:
        uses = RunTaskVersion.objects.filter(run=run).select_related(
            "version__task__owner", "version__task__domain"
        )
        if not uses:
            raise DispatchError("the run has no task versions to export")
        for use in uses:
            slug = use.version.task.slug
            if use.version.content_hash != use.content_hash:
                raise DispatchError(
                    f"{slug} v{use.version.number} changed since launch (content hash differs)"
                )
            with tempfile.TemporaryDirectory(prefix="world-") as world:
                bundle = version_bundle(use.version, Path(world) / slug)
                write_bundle(bundle, staging / "tasks" / use.split / slug)
        (staging / "spec.json").write_text(json.dumps(run.spec, indent=2) + "\n", encoding="utf-8")
        if job_dir.exists():
            shutil.rmtree(job_dir)
        staging.rename(job_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    (folder / "output").mkdir(exist_ok=True)
    return job_dir


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _entrypoint(run: Run, *, job_dir: Path | None) -> str:
    """The job's command; with `job_dir` it starts there (shared storage) instead of in the uploaded copy."""
    output = run_folder(run) / "output"
    events_url = f"{settings.PRACTICUM_PUBLIC_URL.rstrip('/')}/api/runs/{run.uuid}/events"
    argv = [
        settings.RAY_JOB_PYTHON,
        "-m",
        "rl_engine",
        run.kind,
        "spec.json",
        "--run-id",
        str(run.uuid),
        "--events-url",
        events_url,
        "--run-dir",
        str(output),
    ]
    if run.ray_job_id != f"{SUBMISSION_PREFIX}{run.uuid}" and run.kind == RunKind.TRAIN:
        argv.append("--resume")  # a resumed job: continue from the checkpoint the pause wrote
    command = shlex.join(argv)
    return command if job_dir is None else f"cd {shlex.quote(str(job_dir))} && {command}"


def _job_env(run: Run) -> dict[str, str]:
    env = dict(JOB_ENV, PRACTICUM_EVENTS_TOKEN=run_ingest_token(run))
    spec = run.spec or {}
    passed = list(PASSED_ENV)
    passed += [
        section.get("api_key_env")
        for section in (spec.get("inference") or {}, spec.get("judge") or {})
        if section.get("api_key_env")
    ]
    for name in passed:
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


# ---- resume ----


def run_resume(*, run: Run, user) -> Run:
    """A run the health gate paused goes back to `queued` and is dispatched again with `--resume`."""
    if not can_cancel_run(user, run):
        raise PermissionDenied("only the researcher who launched a run, or an admin, resumes it")
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status != RunStatus.PAUSED:
            raise RunNotResumable(
                f"only a paused run resumes; this one is {run.get_status_display().lower()}"
            )
        run.status, run.status_reason = RunStatus.QUEUED, f"resumed by {user.get_username()}"
        # A fresh job: the reconciler must not read the ended one's status, and gives dispatch a minute.
        run.ray_job_id, run.finished_at, run.lost_since = "", None, None
        run.dispatch_requeues, run.last_requeued_at = 0, timezone.now()
        run.save(
            update_fields=[
                "status",
                "status_reason",
                "ray_job_id",
                "finished_at",
                "lost_since",
                "dispatch_requeues",
                "last_requeued_at",
            ]
        )
        from .. import tasks

        transaction.on_commit(lambda: tasks.run_dispatch.delay(run.pk))
    return run


# ---- stop ----


def run_stop(*, run: Run) -> Run:
    """Asks Ray to stop the run's job; the reconciler records `cancelled` once Ray reports it stopped."""
    run.refresh_from_db()
    if run.status != RunStatus.CANCELLING or not run.ray_job_id:
        return run
    try:
        ray_jobs.job_stop(run.ray_address, run.ray_job_id)
    except (ray_jobs.RayUnavailable, ValueError) as error:
        log.warning("stopping %s failed (the reconciler retries): %s", run.ray_job_id, error)
    return run


# ---- reconcile ----


@dataclass
class ReconcileReport:
    checked: int = 0
    changed: dict[str, str] = field(default_factory=dict)  # run uuid → new status
    requeued: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # Ray address → why it did not answer


def runs_reconcile() -> ReconcileReport:
    """Brings every active run's status in line with its Ray job; fails runs that Ray lost."""
    report = ReconcileReport()
    now = timezone.now()
    active = (RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING, RunStatus.CANCELLING)
    for run in Run.objects.filter(status__in=active).order_by("pk"):
        report.checked += 1
        before = run.status
        try:
            if not run.ray_job_id:
                _reconcile_undispatched(run, now, report)
            else:
                _reconcile_job(run, now, report.unreachable)
        except Exception:  # one broken run must not stop the others from being reconciled
            log.exception("reconciling run %s failed", run.uuid)
            continue
        run.refresh_from_db(fields=["status"])
        if run.status != before:
            report.changed[str(run.uuid)] = run.status
    return report


def _reconcile_undispatched(run: Run, now, report: ReconcileReport) -> None:
    """A queued run nobody dispatched (its Celery message was lost) is dispatched again, a few times."""
    lost_after = timedelta(seconds=settings.RUN_LOST_AFTER_SECONDS)
    if run.status != RunStatus.QUEUED or now - run.created_at < lost_after:
        return
    if run.last_requeued_at is not None and now - run.last_requeued_at < lost_after:
        return
    count = run.dispatch_requeues
    if count >= MAX_DISPATCH_REQUEUES:
        with transaction.atomic():
            locked = Run.objects.select_for_update().get(pk=run.pk)
            if locked.status == RunStatus.QUEUED and not locked.ray_job_id:
                _finish(
                    locked, RunStatus.FAILED, f"no Celery worker dispatched the run after {count + 1} tries"
                )
        return
    Run.objects.filter(pk=run.pk).update(dispatch_requeues=count + 1, last_requeued_at=now)
    from .. import tasks

    tasks.run_dispatch.delay(run.pk)
    report.requeued.append(str(run.uuid))


def _reconcile_job(run: Run, now, unreachable: dict[str, str]) -> None:
    """`unreachable` (address → error) spares the other runs of a hung cluster a timeout each."""
    try:
        if run.ray_address in unreachable:
            raise ray_jobs.RayUnavailable(unreachable[run.ray_address])
        info = ray_jobs.job_info(run.ray_address, run.ray_job_id)
    except (ray_jobs.RayUnavailable, ValueError) as error:
        unreachable[run.ray_address] = str(error)
        _lost(run, f"the Ray cluster at {run.ray_address or '(no address)'} did not answer: {error}")
        return
    if info is None:
        if _dispatch_in_progress(run):
            return  # the dispatcher is still exporting; Ray cannot know the job yet
        if run.status == RunStatus.CANCELLING:
            _move(run, RunStatus.CANCELLED, "")  # nothing runs and nothing will be submitted
            return
        _lost(
            run,
            f"Ray at {run.ray_address} does not know the job {run.ray_job_id} (was the cluster restarted?)",
        )
        return
    _lost_clear(run)
    if info.status == ray_jobs.RUNNING:
        _move(run, RunStatus.RUNNING, "", only_from=(RunStatus.STARTING,))
        if run.status == RunStatus.CANCELLING:
            _stop_again_if_ignored(run, now)
    elif info.status == ray_jobs.PENDING and run.status == RunStatus.CANCELLING:
        _stop_again_if_ignored(run, now)
    elif info.status == ray_jobs.SUCCEEDED:
        _move(run, RunStatus.SUCCEEDED, "")
    elif info.status == ray_jobs.STOPPED:
        _move(run, RunStatus.CANCELLED, "the Ray job was stopped outside Practicum")
    elif info.status == ray_jobs.FAILED:
        _move(run, RunStatus.FAILED, _failure_reason(run, info))


def _dispatch_in_progress(run: Run) -> bool:
    lock = run_folder(run) / "dispatch.lock"
    if not lock.exists():
        return False
    with open(lock) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def _stop_again_if_ignored(run: Run, now) -> None:
    if run.cancel_requested_at and now - run.cancel_requested_at > timedelta(seconds=STOP_RESEND_SECONDS):
        run_stop(run=run)


def _failure_reason(run: Run, info: ray_jobs.JobInfo) -> str:
    """Ray's message (its first line: the exit code) and the last lines of the job's log."""
    message = info.message.strip()
    headline = message.splitlines()[0] if message else f"the Ray job failed (exit code {info.exit_code})"
    headline = headline.removesuffix(":").removesuffix(", last available logs (truncated to 20,000 chars)")
    signal_number = _killing_signal(info.exit_code)
    if signal_number is not None:
        name = signal.Signals(signal_number).name if signal_number in signal.valid_signals() else "?"
        headline += f" — the driver was killed by signal {signal_number} ({name}"
        headline += ": out of memory, or killed by hand)" if signal_number == signal.SIGKILL else ")"
    tail = run_logs_tail(run=run, lines=FAILED_LOG_LINES)
    if tail.startswith("The logs are unavailable") and "\n" in message:
        tail = "\n".join(message.splitlines()[-FAILED_LOG_LINES:])
    return f"{headline}\n\nLast lines of the job's log:\n{tail}"


def _killing_signal(exit_code: int | None) -> int | None:
    """The signal that ended the driver: negative codes from Python, 128 + N from the shell that runs it."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 160:
        return exit_code - 128
    return None


def _move(run: Run, status: str, reason: str, *, only_from: tuple[str, ...] | None = None) -> None:
    """Moves an active run forward under its row lock; a run that ended meanwhile stays as it is."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        allowed = only_from or (RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING, RunStatus.CANCELLING)
        if locked.status not in allowed:
            return
        if status == RunStatus.RUNNING:
            locked.status = status
            locked.started_at = locked.started_at or timezone.now()
            locked.save(update_fields=["status", "started_at"])
        elif status == RunStatus.CANCELLED and locked.status == RunStatus.CANCELLING:
            _finish(locked, status, locked.status_reason)
        else:
            _finish(locked, status, reason)
    run.refresh_from_db()


def _finish(run: Run, status: str, reason: str) -> None:
    run.status, run.status_reason = status, reason
    run.finished_at = run.finished_at or timezone.now()
    run.save(update_fields=["status", "status_reason", "finished_at"])
    validation_run_ended(run=run)


def _run_fail(run: Run, reason: str) -> None:
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status == RunStatus.STARTING:
            _finish(locked, RunStatus.FAILED, reason)
        elif locked.status == RunStatus.CANCELLING:
            _finish(locked, RunStatus.CANCELLED, locked.status_reason)


def _lost(run: Run, reason: str) -> None:
    """Records since when Ray has not had the run; past RUN_LOST_AFTER_SECONDS the run is failed (or cancelled)."""
    now = timezone.now()
    if run.lost_since is None:
        Run.objects.filter(pk=run.pk, lost_since__isnull=True).update(lost_since=now)
        return
    waited = (now - run.lost_since).total_seconds()
    if waited < settings.RUN_LOST_AFTER_SECONDS:
        return
    if run.status == RunStatus.CANCELLING:
        _move(run, RunStatus.CANCELLED, "")
    else:
        _move(run, RunStatus.FAILED, f"{reason} — for {waited:.0f} s")


def _lost_clear(run: Run) -> None:
    if run.lost_since is not None:
        Run.objects.filter(pk=run.pk).update(lost_since=None)


# ---- logs ----


def run_logs_tail(*, run: Run, lines: int = 200) -> str:
    """The last `lines` lines of the run's Ray job log, or a sentence saying why there are none."""
    if not run.ray_job_id:
        return "No logs yet: the run has not been submitted to Ray."
    try:
        logs = ray_jobs.job_logs(run.ray_address, run.ray_job_id)
    except (ray_jobs.RayUnavailable, ValueError) as error:
        return f"The logs are unavailable: the Ray cluster at {run.ray_address or '(no address)'} did not answer ({error})."
    if logs is None:
        return f"The logs are unavailable: Ray at {run.ray_address} no longer knows the job {run.ray_job_id}."
    if not logs.strip():
        return "The job has not written anything yet."
    return "\n".join(logs.rstrip("\n").splitlines()[-lines:])
