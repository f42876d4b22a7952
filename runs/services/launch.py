"""Launching and cancelling runs. The spec is checked by the engine's own validator before anything is stored.

A launch fills the spec's task folders with the paths the dispatcher will write (relative to the
Ray job's working directory), validates it with `rl_engine.spec.parse_run_spec`, records the exact
task versions and enqueues the dispatch once the transaction commits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

import rl_engine
from rl_engine.spec import RunSpec, SpecError, SpecProblem, parse_run_spec
from tasks_authoring.bundles import BUNDLE_ORG
from tasks_authoring.models import Split, TaskSet, TaskSetMember

from ..models import FINAL_STATUSES, Run, RunKind, RunSplit, RunStatus, RunTaskVersion
from ..permissions import can_cancel_run, can_launch_runs, is_admin
from .validation import launch_gate_problems, validation_run_ended

# Where the dispatcher writes each split's bundles, relative to the job's working directory.
TASK_FOLDERS = {Split.TRAIN: "tasks/train", Split.EVAL: "tasks/eval"}


class RunLaunchError(Exception):
    """The run cannot be launched or changed; the message says why."""


class RunSpecInvalid(RunLaunchError):
    """The spec was refused; `problems` lists every problem with the dotted field to fix."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p.loc or 'spec'}: {p.message}" for p in problems))


class RunGateRefused(RunLaunchError):
    """A training run failed its pre-launch health gate (docs/quality.md); `reasons` lists every one."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("the health gate refused the launch: " + "; ".join(reasons))


@dataclass(frozen=True)
class LaunchPreview:
    spec: RunSpec
    train_tasks: int
    eval_tasks: int
    steps: int
    rollouts: int


def _members(task_set: TaskSet, split: str) -> dict[str, list[TaskSetMember]]:
    members = list(task_set.members.select_related("version__task"))
    by_split = {Split.TRAIN: [], Split.EVAL: []}
    for member in members:
        by_split[member.split].append(member)
    if split == RunSplit.ALL:
        return {Split.EVAL: members, Split.TRAIN: []}
    return by_split


def _used_members(kind: str, split: str, by_split: dict[str, list[TaskSetMember]]) -> dict[str, list]:
    """The members each engine folder receives: eval-like runs read one folder, training two."""
    if kind == RunKind.TRAIN:
        return {Split.TRAIN: by_split[Split.TRAIN], Split.EVAL: by_split[Split.EVAL]}
    chosen = by_split[Split.EVAL] if split in (RunSplit.EVAL, RunSplit.ALL) else by_split[Split.TRAIN]
    return {Split.EVAL: chosen, Split.TRAIN: []}


def _filled_spec(kind: str, spec: dict[str, Any], used: dict[str, list]) -> dict[str, Any]:
    filled = copy.deepcopy(spec) if isinstance(spec, dict) else spec
    if not isinstance(filled, dict):
        return filled  # parse_run_spec names the problem
    filled["kind"] = kind
    tasks = filled.get("tasks") if isinstance(filled.get("tasks"), dict) else {}
    tasks = {**tasks, "train_dir": None, "eval_dir": None}
    if kind == RunKind.TRAIN:
        tasks["train_dir"] = TASK_FOLDERS[Split.TRAIN]
    if used[Split.EVAL]:
        tasks["eval_dir"] = TASK_FOLDERS[Split.EVAL]
    filled["tasks"] = tasks
    return filled


def _validated(kind: str, task_set: TaskSet, split: str, spec: dict[str, Any]) -> tuple[RunSpec, dict]:
    if kind not in RunKind.values:
        raise RunLaunchError(f"unknown run kind {kind!r}; expected one of {', '.join(RunKind.values)}")
    if split not in RunSplit.values:
        raise RunLaunchError(f"unknown split {split!r}; expected one of {', '.join(RunSplit.values)}")
    used = _used_members(kind, split, _members(task_set, split))
    problems: list[SpecProblem] = []
    if kind == RunKind.TRAIN and not used[Split.TRAIN]:
        problems.append(
            SpecProblem(loc="task_set", message=f"{task_set.name} has no tasks in its train split")
        )
    if kind != RunKind.TRAIN and not used[Split.EVAL]:
        problems.append(
            SpecProblem(loc="split", message=f"{task_set.name} has no tasks in the {split} split")
        )
    try:
        parsed = parse_run_spec(_filled_spec(kind, spec, used))
    except SpecError as error:
        problems += error.problems
        parsed = None
    if problems:
        raise RunSpecInvalid(problems)
    assert parsed is not None
    return parsed, used


def _counts(spec: RunSpec, used: dict[str, list]) -> tuple[int, int]:
    """(steps, rollouts) the run will make, before harness retries."""
    eval_tasks = len(used[Split.EVAL])
    per_evaluation = eval_tasks * spec.evaluation.samples_per_task
    if spec.kind != RunKind.TRAIN:
        samples = 2 if spec.kind == RunKind.VALIDATE else 1  # validation runs oracle and null
        return 0, per_evaluation * samples
    steps = spec.max_steps
    rollouts = steps * spec.batch.prompts_per_step * spec.batch.samples_per_prompt
    if eval_tasks:
        every = spec.evaluation.every_steps
        evaluations = int(spec.evaluation.at_start) + (steps // every if every else 0)
        rollouts += evaluations * per_evaluation
    return steps, rollouts


def launch_preview(*, kind: str, task_set: TaskSet, split: str, spec: dict[str, Any]) -> LaunchPreview:
    """What the run would do, or RunSpecInvalid with every problem: the launch form shows it before launch."""
    parsed, used = _validated(kind, task_set, split, spec)
    steps, rollouts = _counts(parsed, used)
    return LaunchPreview(
        spec=parsed,
        train_tasks=len(used[Split.TRAIN]),
        eval_tasks=len(used[Split.EVAL]),
        steps=steps,
        rollouts=rollouts,
    )


def run_launch(
    *,
    user,
    kind: str,
    task_set: TaskSet,
    split: str,
    spec: dict[str, Any],
    name: str = "",
    cloned_from: Run | None = None,
    gate_override_reason: str = "",
) -> Run:
    """A training run must pass the health gate (`launch_gate_problems`), or RunGateRefused lists why;
    an admin launches past it by giving `gate_override_reason`, which the run keeps with their name."""
    if not can_launch_runs(user):
        raise PermissionDenied("only researchers launch runs")
    parsed, used = _validated(kind, task_set, split, spec)
    steps, rollouts = _counts(parsed, used)
    overridden = False
    if kind == RunKind.TRAIN:
        reasons = launch_gate_problems(task_set=task_set, spec=parsed)
        if reasons and not gate_override_reason.strip():
            raise RunGateRefused(reasons)
        if reasons and not is_admin(user):
            raise PermissionDenied("only admins launch a training run past the health gate")
        overridden = bool(reasons)
    name = name.strip() or f"{RunKind(kind).label} of {task_set.name} · {timezone.now():%b %d %H:%M}"
    with transaction.atomic():
        run = Run.objects.create(
            name=name[:200],
            kind=kind,
            task_set=task_set,
            split=split,
            spec=parsed.model_dump(mode="json"),
            launched_by=user,
            cloned_from=cloned_from,
            engine_version=rl_engine.__version__,
            steps_total=steps,
            rollouts_expected=rollouts,
            gate_overridden_by=user if overridden else None,
            gate_override_reason=gate_override_reason.strip() if overridden else "",
        )
        RunTaskVersion.objects.bulk_create(
            RunTaskVersion(
                run=run,
                version=member.version,
                split=folder_split,
                content_hash=member.version.content_hash,
                bundle_name=f"{BUNDLE_ORG}/{member.version.task.slug}",
            )
            for folder_split, members in used.items()
            for member in members
        )
        transaction.on_commit(lambda: _enqueue("run_dispatch", run.pk))
    return run


def run_cancel(*, run: Run, user) -> Run:
    """Ask the run to stop; the dispatcher stops its Ray job and the reconciler records `cancelled`."""
    if not can_cancel_run(user, run):
        raise PermissionDenied("only the researcher who launched a run, or an admin, cancels it")
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status in FINAL_STATUSES:
            raise RunLaunchError(f"the run already ended ({run.get_status_display().lower()})")
        if run.status == RunStatus.CANCELLING:
            return run
        now = timezone.now()
        run.cancel_requested_at = now
        if run.status == RunStatus.QUEUED and not run.ray_job_id:
            # Nothing was submitted yet: the dispatcher sees the status and submits nothing.
            run.status, run.finished_at = RunStatus.CANCELLED, now
            run.status_reason = f"cancelled by {user.get_username()} before it started"
        elif run.status == RunStatus.PAUSED:
            # The health gate paused it: its job has ended, so there is nothing to stop.
            run.status, run.finished_at = RunStatus.CANCELLED, now
            run.status_reason = f"cancelled by {user.get_username()} while paused by the health gate"
        else:
            run.status = RunStatus.CANCELLING
            run.status_reason = f"cancel requested by {user.get_username()}"
        run.save(update_fields=["status", "status_reason", "cancel_requested_at", "finished_at"])
        validation_run_ended(run=run)
        if run.status == RunStatus.CANCELLING:
            transaction.on_commit(lambda: _enqueue("run_stop", run.pk))
    return run


def _enqueue(task_name: str, run_pk: int) -> None:
    from .. import tasks

    getattr(tasks, task_name).delay(run_pk)
