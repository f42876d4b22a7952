"""Task-version validation (docs/quality.md, "Validation"): a validate run per version, its checklist, the
approval gate and the admin override, and the pre-launch health gate of training runs.

A validation is a `validate` run of one task version (no task set), launched by the system when an
expert submits the version for review, or on demand from the task page; it is dispatched like any
run. Ingestion of its `run_finished` fills the checklist (`validation_events_ingested`); a run that
fails or is cancelled ends the validation as `error` with the run's reason (`validation_run_ended`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

import rl_engine
from rl_engine.bundle import write_bundle
from rl_engine.spec import RunSpec, parse_run_spec
from tasks_authoring.bundles import BUNDLE_ORG, version_bundle
from tasks_authoring.models import TaskSet, TaskVersion

from ..models import (
    Rollout,
    Run,
    RunKind,
    RunSplit,
    RunStatus,
    RunTaskVersion,
    ValidationStatus,
    VersionValidation,
)
from ..permissions import is_admin

FINISHED = (ValidationStatus.PASSED, ValidationStatus.FAILED, ValidationStatus.ERROR)
TRIGGERS = ("submit", "manual", "bootstrap")
EVAL_FOLDER = "tasks/eval"


class ValidationRefused(Exception):
    """The validation cannot be requested or overridden; the message says why."""


# ---- requesting a validation ------------------------------------------------------------------


def validation_spec(version: TaskVersion) -> dict[str, Any]:
    """The validate run's spec: the version's bundle in one folder; a judge when the rubric needs one."""
    spec: dict[str, Any] = {
        "kind": RunKind.VALIDATE,
        "tasks": {"eval_dir": EVAL_FOLDER, "train_dir": None},
        "max_attempts": 2,
        "resources": {"sandboxes_per_worker": 1},
    }
    if version.criteria.filter(kind="llm_judge").exists():
        spec["judge"] = {
            "base_url": settings.PRACTICUM_JUDGE_URL,
            "model": settings.PRACTICUM_JUDGE_MODEL,
            "timeout_sec": 120,
            "retries": 2,
        }
    return spec


def _create(*, version: TaskVersion, user, trigger: str) -> VersionValidation:
    if trigger not in TRIGGERS:
        raise ValidationRefused(f"unknown trigger {trigger!r}; expected one of {', '.join(TRIGGERS)}")
    if not version.content_hash:
        raise ValidationRefused(
            f"{version.task.slug} v{version.number} is a draft that may still change; submit it to validate it"
        )
    parsed: RunSpec = parse_run_spec(validation_spec(version))
    run = Run.objects.create(
        name=f"Validation of {version.task.slug} v{version.number}"[:200],
        kind=RunKind.VALIDATE,
        task_set=None,
        split=RunSplit.EVAL,
        spec=parsed.model_dump(mode="json"),
        launched_by=user,
        engine_version=rl_engine.__version__,
        rollouts_expected=2 * parsed.evaluation.samples_per_task,
    )
    RunTaskVersion.objects.create(
        run=run,
        version=version,
        split="eval",
        content_hash=version.content_hash,
        bundle_name=f"{BUNDLE_ORG}/{version.task.slug}",
    )
    return VersionValidation.objects.create(version=version, run=run, trigger=trigger, requested_by=user)


def version_validation_request(*, version: TaskVersion, user, trigger: str) -> VersionValidation:
    """A validate run of this one version, dispatched on commit; `user` is who asked (the run's launcher).

    System-launched (on submit) or asked for by an editor or reviewer, so no researcher role is needed.
    """
    with transaction.atomic():
        validation = _create(version=version, user=user, trigger=trigger)
        run_pk = validation.run_id
        transaction.on_commit(lambda: _enqueue_dispatch(run_pk))
    return validation


def version_validation_run_inline(
    *, version: TaskVersion, user, trigger: str = "bootstrap", judge: dict[str, Any] | None = None
) -> VersionValidation:
    """Validates in this process (no Celery, no Ray): the engine's `validate` over the exported bundle,
    its events stored through ingestion, so the checklist and the evidence are those of any run.

    For set-up commands (bootstrap_demo), never a web request. The version's validation still waiting
    for a dispatcher (the one submitting requested) is the one run, claimed first so that a dispatcher
    leaves it alone; otherwise a new one is made. Nothing is retried (max_attempts 1, judge retries 0),
    so a missing judge is reported at once rather than after minutes of back-off. `judge` (base_url,
    model, ...) replaces the settings' judge when the rubric needs one: the judge the set-up started.
    """
    from rl_engine.cli import main as engine_main

    from .ingest import events_ingest

    validation = _claim_waiting(version) or _create(version=version, user=user, trigger=trigger)
    run = validation.run
    run.spec = dict(run.spec, max_attempts=1)  # stored too: ingestion reads max_attempts from it
    if run.spec.get("judge"):
        run.spec["judge"] = {**run.spec["judge"], **(judge or {}), "retries": 0}
    run.status, run.started_at = RunStatus.RUNNING, run.started_at or timezone.now()
    run.save(update_fields=["spec", "status", "started_at"])
    spec = dict(run.spec)
    with tempfile.TemporaryDirectory(prefix="practicum-validate-") as folder:
        job = Path(folder)
        with tempfile.TemporaryDirectory(prefix="world-") as world:
            bundle = version_bundle(version, Path(world) / version.task.slug)
            write_bundle(bundle, job / EVAL_FOLDER / version.task.slug)
        spec["tasks"] = {"eval_dir": str(job / EVAL_FOLDER), "train_dir": None}
        (job / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        argv = ["validate", str(job / "spec.json"), "--run-dir", str(job / "out"), "--run-id", str(run.uuid)]
        try:
            code: object = engine_main(argv)
        except Exception as error:  # the run must still end with a reason, not stay running
            code = f"{type(error).__name__}: {error}"
        events_file = job / "out" / "events.jsonl"
        lines = events_file.read_text(encoding="utf-8").splitlines() if events_file.is_file() else []
    if lines:
        events_ingest(run=run, events=[json.loads(line) for line in lines])
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status != RunStatus.SUCCEEDED:
            locked.status, locked.finished_at = RunStatus.FAILED, timezone.now()
            locked.status_reason = f"the engine's validate command ended without a result ({code})"
            locked.save(update_fields=["status", "status_reason", "finished_at"])
            validation_run_ended(run=locked)
    validation.refresh_from_db()
    return validation


def _claim_waiting(version: TaskVersion) -> VersionValidation | None:
    """The validation waiting for a dispatcher, its run moved to running (no Ray job): the dispatcher
    only claims queued runs and the reconciler only re-sends queued ones, so nothing else touches it."""
    waiting = (
        version.validations.filter(status=ValidationStatus.PENDING, run__status=RunStatus.QUEUED)
        .order_by("-created_at", "-pk")
        .first()
    )
    if waiting is None:
        return None
    claimed = Run.objects.filter(pk=waiting.run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=timezone.now()
    )
    return waiting if claimed else None


def _enqueue_dispatch(run_pk: int) -> None:
    from .launch import _enqueue

    _enqueue("run_dispatch", run_pk)


# ---- results ----------------------------------------------------------------------------------


def validation_events_ingested(*, run: Run, finished: list[dict[str, Any]]) -> None:
    """Called by ingestion inside its transaction: the first event starts the validation, `run_finished`
    (its payload in `finished`) fills the checklist."""
    validation = VersionValidation.objects.select_for_update().filter(run=run).first()
    if validation is None or validation.status in FINISHED:
        return
    if not finished:
        if validation.status == ValidationStatus.PENDING:
            validation.status = ValidationStatus.RUNNING
            validation.save(update_fields=["status"])
        return
    use = RunTaskVersion.objects.filter(run=run, version=validation.version).first()
    checklist = _checklist_of(finished[-1], use) if use is not None else None
    validation.finished_at = timezone.now()
    if checklist is None:
        validation.status = ValidationStatus.ERROR
        validation.error = "the validation run reported no checklist for this task version"
        validation.save(update_fields=["status", "error", "finished_at"])
        return
    validation.checks = _with_evidence(run, checklist.get("items") or [])
    validation.status = ValidationStatus.PASSED if checklist.get("ok") else ValidationStatus.FAILED
    validation.save(update_fields=["status", "checks", "finished_at"])


def _checklist_of(payload: dict[str, Any], use: RunTaskVersion) -> dict[str, Any] | None:
    checklists = [c for c in payload.get("checklists") or [] if isinstance(c, dict)]
    slug = use.bundle_name.rsplit("/", 1)[-1]
    for checklist in checklists:
        task = str(checklist.get("task", ""))
        if task == use.bundle_name or task.rstrip("/").endswith(f"/{slug}"):
            return checklist
    return None


def _with_evidence(run: Run, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item as stored, with the id of the rollout that shows it (a failing one first)."""
    first: dict[str, int] = {}
    telling: dict[str, int] = {}  # a rollout the oracle failed, or one the null agent passed
    for policy, passed, rollout_id in (
        Rollout.objects.filter(run=run, final=True).order_by("id").values_list("policy", "passed", "id")
    ):
        first.setdefault(policy, rollout_id)
        if (policy == "oracle" and passed is not True) or (policy == "null" and passed):
            telling.setdefault(policy, rollout_id)
    stored = []
    for entry in items:
        evidence = entry.get("evidence")
        stored.append(
            {
                "key": str(entry.get("key", "")),
                "label": str(entry.get("label", "")),
                "ok": bool(entry.get("ok")),
                "reason": str(entry.get("reason", "")),
                "rollout_id": telling.get(evidence) or first.get(evidence) if evidence else None,
            }
        )
    return stored


def validation_run_ended(*, run: Run) -> None:
    """A validate run that failed or was cancelled ends its validation as `error` with the run's reason."""
    if run.kind != RunKind.VALIDATE or run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        return
    reason = (run.status_reason or f"the validation run was {run.get_status_display().lower()}").strip()
    VersionValidation.objects.filter(run=run).exclude(status__in=FINISHED).update(
        status=ValidationStatus.ERROR,
        error=f"the validation run {run.get_status_display().lower()}: {reason}"[:2000],
        finished_at=timezone.now(),
    )


# ---- the approval gate ------------------------------------------------------------------------


def latest_finished_validation(version: TaskVersion) -> VersionValidation | None:
    return version.validations.filter(status__in=FINISHED).order_by("-created_at", "-pk").first()


def validation_problem(version: TaskVersion) -> str | None:
    """Why the version's validation does not allow approving or training on it, or None."""
    latest = latest_finished_validation(version)
    label = f"{version.task.slug} v{version.number}"
    if latest is None:
        running = version.validations.exclude(status__in=FINISHED).exists()
        return f"{label} has no finished validation" + (" (one is running)" if running else "")
    if latest.overridden_by_id or latest.status == ValidationStatus.PASSED:
        return None
    if latest.status == ValidationStatus.ERROR:
        return f"{label}: its validation could not run ({latest.error})"
    failed = "; ".join(f"{c['label']}: {c['reason']}" for c in latest.checks if not c.get("ok"))
    return f"{label}: its validation failed ({failed})"


def version_approval_problem(version: TaskVersion) -> str | None:
    """The approval gate of review_decide: None when the version may be approved."""
    problem = validation_problem(version)
    if problem is None:
        return None
    return (
        f"cannot approve: {problem}; fix the task and submit again, or an admin may override the validation"
    )


def version_validation_override(*, validation: VersionValidation, user, reason: str) -> VersionValidation:
    """An admin lets a version whose validation failed be approved (and trained on); who, when and why are kept."""
    if not is_admin(user):
        raise PermissionDenied("only admins override a validation")
    if not reason.strip():
        raise ValidationRefused("reason: say why this version may be approved although its validation failed")
    with transaction.atomic():
        validation = VersionValidation.objects.select_for_update().get(pk=validation.pk)
        if validation.status not in (ValidationStatus.FAILED, ValidationStatus.ERROR):
            raise ValidationRefused(
                f"only a failed validation is overridden; this one is {validation.get_status_display().lower()}"
            )
        validation.overridden_by = user
        validation.override_reason = reason.strip()
        validation.overridden_at = timezone.now()
        validation.save(update_fields=["overridden_by", "override_reason", "overridden_at"])
    return validation


# ---- the pre-launch health gate ---------------------------------------------------------------


def launch_gate_problems(*, task_set: TaskSet, spec: RunSpec) -> list[str]:
    """Every reason a training run on `task_set` must not start (docs/quality.md, "Health gate")."""
    problems = []
    for member in task_set.members.select_related("version__task").order_by("version__task__slug"):
        problem = validation_problem(member.version)
        if problem is not None:
            problems.append(problem)
    limit = spec.health_gate.max_eval_harness_error_rate
    if limit is not None:
        latest = (
            Run.objects.filter(task_set=task_set, kind=RunKind.EVAL, status=RunStatus.SUCCEEDED)
            .order_by("-finished_at", "-pk")
            .first()
        )
        if latest is None:
            problems.append(
                f"{task_set.name} has no finished evaluation run to measure the harness error rate; "
                "evaluate it first (or set health_gate.max_eval_harness_error_rate to null)"
            )
        elif (latest.harness_error_rate or 0.0) > limit:
            problems.append(
                f"the latest evaluation of {task_set.name} (run #{latest.pk}, {latest.name}) had a harness "
                f"error rate of {latest.harness_error_rate:.1%}, above health_gate.max_eval_harness_error_rate "
                f"{limit:.1%}"
            )
    return problems
