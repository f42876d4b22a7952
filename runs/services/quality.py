"""Writes for environment quality (docs/quality.md): difficulty bands from a reference run, a task set
without the zero-signal tasks of a run, and reviewers' verdicts on a criterion's grading."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from tasks_authoring.models import TaskSet, VersionState
from tasks_authoring.services.task_sets import task_set_create

from ..models import CriterionReview, Rollout, RolloutBody, Run, TaskDifficulty
from ..permissions import can_launch_runs, can_read_run
from ..quality_selectors import SIGNAL_RUN_KINDS, difficulty_band, run_judge_model, run_task_signal
from .labels import MAX_NOTE_CHARS, can_label_rollout


@dataclass(frozen=True)
class DifficultyUpdate:
    updated: int  # tasks whose band was set from this run
    skipped: int  # versions of the run without a valid sample: their band is left as it was


def _require_signal_run(*, run: Run, user) -> None:
    if not (can_launch_runs(user) and can_read_run(user, run)):
        raise PermissionDenied("Only researchers who may read this run may act on its signal")
    if run.kind not in SIGNAL_RUN_KINDS:
        raise ValidationError(
            f"a {run.get_kind_display().lower()} run does not measure tasks: use an eval or a training run"
        )


@transaction.atomic
def task_difficulty_set_from_run(*, run: Run, user) -> DifficultyUpdate:
    """Make `run` the difficulty reference of every task it measured: band from the pass rate of its
    final valid rollouts (runs.quality_selectors.difficulty_band). One band per task (not per
    version): the latest reference wins, whichever version it ran."""
    _require_signal_run(run=run, user=user)
    updated = skipped = 0
    for row in run_task_signal(run=run):
        version = row["version"]
        if version is None or not row["valid"]:
            skipped += 1
            continue
        TaskDifficulty.objects.update_or_create(
            task_id=version.task_id,
            defaults={
                "band": difficulty_band(row["pass_rate"]),
                "pass_rate": row["pass_rate"],
                "samples": row["valid"],
                "reference_run": run,
            },
        )
        updated += 1
    return DifficultyUpdate(updated=updated, skipped=skipped)


def task_set_without_zero_signal(*, run: Run, user, name: str) -> TaskSet:
    """A new task set of the run's task set's members minus the tasks the run found zero-signal, with
    the same split seed and eval fraction. Tasks the run has no valid sample of are kept: nothing is
    known against them."""
    _require_signal_run(run=run, user=user)
    if run.task_set is None:
        raise ValidationError("this run has no task set to start from")
    rows = run_task_signal(run=run)
    zero = {row["task_version_id"] for row in rows if row["zero_signal"]}
    members = list(run.task_set.members.select_related("version__task"))
    kept = [m.version for m in members if m.version_id not in zero]
    if not kept:
        raise ValidationError("every task of the set is zero-signal in this run: the new set would be empty")
    not_approved = [v for v in kept if v.state != VersionState.APPROVED]
    if not_approved:
        names = ", ".join(f"{v.task.slug} v{v.number}" for v in not_approved)
        raise ValidationError(f"these members are no longer approved, so cannot join a new set: {names}")
    dropped = len(members) - len(kept)
    return task_set_create(
        owner=user,
        name=name,
        versions=kept,
        seed=run.task_set.seed,
        eval_fraction=run.task_set.eval_fraction,
        description=(
            f"{run.task_set.name} without the {dropped} task{'s' * (dropped != 1)} that run #{run.pk} "
            f"({run.name}) found zero-signal (every valid sample passed, or every one failed)."
        ),
    )


def criterion_review_set(
    *, rollout: Rollout, user, criterion_id: str, reviewer_met: bool, note: str = ""
) -> CriterionReview:
    """Record that `user` finds criterion `criterion_id` met (or not) on this rollout, beside what the
    grader said. Append-only: a change of mind adds a row; the latest per reviewer counts. The
    criterion's kind comes from the verdict, the judge model from the run's spec (llm_judge only)."""
    if not can_label_rollout(user, rollout):
        raise PermissionDenied(
            "Only reviewers, or the researcher who launched the run, may review its grading"
        )
    note = (note or "").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise ValidationError(f"The note is {len(note)} characters long; at most {MAX_NOTE_CHARS} are kept")
    verdicts = RolloutBody.objects.filter(rollout=rollout).values_list("verdicts", flat=True).first() or []
    verdict = next(
        (v for v in verdicts if isinstance(v, dict) and str(v.get("criterion_id")) == str(criterion_id)), None
    )
    if verdict is None or not isinstance(verdict.get("met"), bool):
        raise ValidationError(f"criterion {criterion_id!r} was not graded on this rollout: nothing to review")
    kind = str(verdict.get("kind") or "")
    return CriterionReview.objects.create(
        rollout=rollout,
        criterion_id=str(criterion_id),
        criterion_kind=kind,
        judge_model=run_judge_model(rollout.run) if kind == "llm_judge" else "",
        grader_met=verdict["met"],
        reviewer_met=bool(reviewer_met),
        reviewer=user,
        note=note,
    )
