"""Reads for environment quality (docs/quality.md): signal and difficulty per task, judge agreement.

Signal: over a run's final valid rollouts (graded and agent_error; a harness error has no reward
and says nothing about the task), per task version: samples, pass rate, mean score and the
variance of the reward. A task whose every valid sample passes, or every one fails, gives GRPO no
signal (its group advantages are all zero): it is *zero-signal*.

Judge agreement: reviewers confirm or overturn the grader's verdict on a criterion
(`CriterionReview`); the latest row per (rollout, criterion, reviewer) counts, and each such row
is one pair (grader said, reviewer said) for the agreement rate and Cohen's kappa.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.db.models import Avg, Count, OuterRef, Q, QuerySet, Subquery, Variance

from tasks_authoring.models import TaskVersion
from webapp.roles import Role, has_role

from .models import CriterionReview, DifficultyBand, Rollout, Run, RunKind, RunTaskVersion, TaskDifficulty
from .selectors import VALID_OUTCOMES
from .trace_selectors import rollouts_visible_to

SIGNAL_RUN_KINDS = (RunKind.EVAL, RunKind.TRAIN)
BAND_NAMES = {band: label.split(" (")[0] for band, label in DifficultyBand.choices}
# A task set's signal overview reads at most this many runs of the set, newest first.
MAX_SET_RUNS = 50
MAX_DISAGREEMENTS = 200


# Who acted and who judged, from the run's spec -----------------------------------------------------


def run_model_name(run: Run) -> str:
    """The policy of a run in words: the baseline agent (oracle, null), else the model it started from."""
    spec = run.spec or {}
    agent = spec.get("agent") or "model"
    if agent != "model":
        return agent
    model = spec.get("model") or {}
    inference = spec.get("inference") or {}
    if model.get("builtin"):
        return model["builtin"]
    if model.get("path"):
        return os.path.basename(str(model["path"]).rstrip("/")) or str(model["path"])
    return inference.get("served_model_name") or "model"


def run_judge_model(run: Run) -> str:
    return str(((run.spec or {}).get("judge") or {}).get("model") or "")


# Signal -------------------------------------------------------------------------------------------


def difficulty_band(pass_rate: float) -> str:
    """too_easy: every valid sample passes; easy: ≥ 0.7; medium: ≥ 0.3; hard: > 0; too_hard: none passes."""
    if pass_rate >= 1:
        return DifficultyBand.TOO_EASY
    if pass_rate >= 0.7:
        return DifficultyBand.EASY
    if pass_rate >= 0.3:
        return DifficultyBand.MEDIUM
    if pass_rate > 0:
        return DifficultyBand.HARD
    return DifficultyBand.TOO_HARD


def _signal_of(row: dict[str, Any]) -> dict[str, Any]:
    valid, passed = row["valid"], row["passed_count"]
    row["pass_rate"] = passed / valid if valid else None
    if not valid:
        row["signal"] = "no_valid"  # only harness errors: nothing is known about the task
    elif passed == valid:
        row["signal"] = "all_pass"
    elif passed == 0:
        row["signal"] = "all_fail"
    else:
        row["signal"] = "ok"
    row["zero_signal"] = row["signal"] in ("all_pass", "all_fail")
    return row


def run_task_signal(*, run: Run, user=None) -> list[dict[str, Any]]:
    """Per task version of the run: samples, pass rate, mean score and reward variance, and its signal.

    `user` limits the rows to the rollouts that user may read (an expert sees only their own tasks);
    None reads every rollout (services). The run's versions without a valid sample are listed too,
    with `signal="no_valid"`. One grouped query, one for the run's versions.
    """
    rollouts = rollouts_visible_to(user=user) if user is not None else Rollout.objects.all()
    rows = list(
        rollouts.filter(run=run, final=True)
        .values("task_version_id", "task_name")
        .annotate(
            valid=Count("pk", filter=Q(outcome__in=VALID_OUTCOMES)),
            passed_count=Count("pk", filter=Q(outcome__in=VALID_OUTCOMES, passed=True)),
            harness_errors=Count("pk", filter=Q(outcome="harness_error")),
            mean_score=Avg("score", filter=Q(outcome__in=VALID_OUTCOMES)),
            mean_reward=Avg("reward", filter=Q(outcome__in=VALID_OUTCOMES)),
            reward_variance=Variance("reward", filter=Q(outcome__in=VALID_OUTCOMES)),
        )
        .order_by("task_name")
    )
    versions = {
        rtv.version_id: rtv for rtv in RunTaskVersion.objects.filter(run=run).select_related("version__task")
    }
    seen = {row["task_version_id"] for row in rows}
    hidden = _hidden_version_ids(user=user, run=run, version_ids=set(versions) - seen)
    for version_id, rtv in versions.items():
        if version_id in seen or version_id in hidden:
            continue
        rows.append(
            {
                "task_version_id": version_id,
                "task_name": rtv.bundle_name,
                "valid": 0,
                "passed_count": 0,
                "harness_errors": 0,
                "mean_score": None,
                "mean_reward": None,
                "reward_variance": None,
            }
        )
    for row in rows:
        rtv = versions.get(row["task_version_id"])
        row["version"] = rtv.version if rtv else None
        row["split"] = rtv.split if rtv else ""
        _signal_of(row)
    return sorted(rows, key=lambda row: row["version"].task.title if row["version"] else row["task_name"])


def _hidden_version_ids(*, user, run: Run, version_ids: set[int]) -> set[int]:
    """Of `version_ids`, those whose rollouts `user` may not read: another team's tasks, for an expert."""
    if user is None or not version_ids:
        return set()
    if has_role(user, Role.REVIEWER) or (has_role(user, Role.RESEARCHER) and run.launched_by_id == user.pk):
        return set()
    own = TaskVersion.objects.filter(
        Q(task__owner=user) | Q(task__team__members=user), pk__in=version_ids
    ).values_list("pk", flat=True)
    return version_ids - set(own)


def signal_summary(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    counts = Counter(row["signal"] for row in rows)
    return {
        "tasks": sum(counts.values()),
        "zero_signal": counts["all_pass"] + counts["all_fail"],
        "all_pass": counts["all_pass"],
        "all_fail": counts["all_fail"],
        "no_valid": counts["no_valid"],
        "ok": counts["ok"],
    }


def zero_signal_version_ids(*, run: Run) -> set[int]:
    """The task versions the run shows to give no signal, over every rollout (services read this)."""
    return {row["task_version_id"] for row in run_task_signal(run=run) if row["zero_signal"]}


def signal_runs(*, user, task_set=None) -> QuerySet[Run]:
    """Eval and training runs the user may read (of `task_set` when given), newest first."""
    from .selectors import runs_for_user

    runs = runs_for_user(user=user).filter(kind__in=SIGNAL_RUN_KINDS)
    if task_set is not None:
        runs = runs.filter(task_set=task_set)
    return runs.order_by("-created_at", "-pk")


def runs_signal_counts(*, runs: list[Run], user) -> dict[int, dict[str, int]]:
    """run id → signal_summary over the run's task versions the user may read (one grouped query)."""
    rows = (
        rollouts_visible_to(user=user)
        .filter(run__in=runs, final=True, outcome__in=VALID_OUTCOMES)
        .values("run_id", "task_version_id")
        .annotate(valid=Count("pk"), passed_count=Count("pk", filter=Q(passed=True)))
    )
    per_run: dict[int, list[dict]] = {run.pk: [] for run in runs}
    for row in rows:
        per_run[row["run_id"]].append(_signal_of(row))
    return {run_id: signal_summary(items) for run_id, items in per_run.items()}


def pass_rates_by_model(*, user, versions: list, runs: list[Run]) -> dict[str, Any]:
    """Per task version and model (a run's agent or model, from its spec) over `runs`' final valid
    rollouts the user may read: {"models": [...], "rows": {version id: {model: figures}}}.
    One grouped query by (version, run); runs of the same model add up."""
    model_of = {run.pk: run_model_name(run) for run in runs}
    grouped = (
        rollouts_visible_to(user=user)
        .filter(run__in=runs, task_version__in=versions, final=True, outcome__in=VALID_OUTCOMES)
        .values("task_version_id", "run_id")
        .annotate(
            valid=Count("pk"),
            passed_count=Count("pk", filter=Q(passed=True)),
            mean_score=Avg("score"),
        )
    )
    table: dict[int, dict[str, dict[str, Any]]] = {}
    for row in grouped:
        cell = table.setdefault(row["task_version_id"], {}).setdefault(
            model_of[row["run_id"]], {"valid": 0, "passed_count": 0, "runs": 0, "_score": 0.0, "_scored": 0}
        )
        cell["valid"] += row["valid"]
        cell["passed_count"] += row["passed_count"]
        cell["runs"] += 1
        if row["mean_score"] is not None:
            cell["_score"] += row["mean_score"] * row["valid"]
            cell["_scored"] += row["valid"]
    for cells in table.values():
        for cell in cells.values():
            cell["pass_rate"] = cell["passed_count"] / cell["valid"] if cell["valid"] else None
            cell["mean_score"] = cell.pop("_score") / cell["_scored"] if cell["_scored"] else None
            cell.pop("_scored")
    models = sorted({model for cells in table.values() for model in cells})
    return {"models": models, "rows": table}


def band_counts(*, task_ids: Iterable[int]) -> dict[str, int]:
    """Measured difficulty bands of these tasks, in band order, with "unmeasured" last."""
    task_ids = list(task_ids)
    counts = Counter(TaskDifficulty.objects.filter(task_id__in=task_ids).values_list("band", flat=True))
    result = {band: counts[band] for band in DifficultyBand.values}
    result["unmeasured"] = len(set(task_ids)) - sum(counts.values())
    return result


def band_chart(counts: dict[str, int], *, chart_id: str = "difficulty-bands") -> dict[str, Any]:
    """A bar chart of band counts for static/js/runs.js (x = band index, named by `x_labels`; y counts)."""
    labels = {**BAND_NAMES, "unmeasured": "Not measured"}
    keys = list(counts)
    return {
        "id": chart_id,
        "title": "Measured difficulty",
        "x": list(range(len(keys))),
        "x_labels": [labels[key] for key in keys],
        "x_title": "band",
        "series": [{"label": "tasks", "values": [counts[key] for key in keys]}],
        "unit": "",
        "bars": True,
    }


# Judge agreement --------------------------------------------------------------------------------


def cohen_kappa(pairs: Iterable[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters over binary verdicts: pairs of (grader said met, reviewer said met).

        p_o = (both met + both not met) / n                      observed agreement
        p_e = p_g · p_r + (1 − p_g) · (1 − p_r)                  agreement expected by chance, where
              p_g, p_r = the fraction each rater said "met"
        κ   = (p_o − p_e) / (1 − p_e)

    None (undefined) when there is no pair, or when p_e = 1: both raters gave one and the same
    class to every item, so there is no chance-corrected agreement to measure (the agreement rate,
    1.0 there, still says they agreed). A perfect agreement with both classes present is 1.0;
    agreement no better than chance is 0; worse than chance is negative.
    """
    pairs = list(pairs)
    n = len(pairs)
    if not n:
        return None
    observed = sum(1 for grader, reviewer in pairs if grader == reviewer) / n
    p_grader = sum(1 for grader, _ in pairs if grader) / n
    p_reviewer = sum(1 for _, reviewer in pairs if reviewer) / n
    expected = p_grader * p_reviewer + (1 - p_grader) * (1 - p_reviewer)
    if expected >= 1:
        return None
    return (observed - expected) / (1 - expected)


def agreement(pairs: Iterable[tuple[bool, bool]]) -> dict[str, Any]:
    """{reviews, agreed, overturned, rate, kappa} over (grader, reviewer) pairs."""
    pairs = list(pairs)
    agreed = sum(1 for grader, reviewer in pairs if grader == reviewer)
    return {
        "reviews": len(pairs),
        "agreed": agreed,
        "overturned": len(pairs) - agreed,
        "rate": agreed / len(pairs) if pairs else None,
        "kappa": cohen_kappa(pairs),
    }


def criterion_reviews_current(*, user, run: Run | None = None) -> QuerySet[CriterionReview]:
    """The latest review per (rollout, criterion, reviewer) on the rollouts `user` may read."""
    newest = CriterionReview.objects.filter(
        rollout=OuterRef("rollout"), criterion_id=OuterRef("criterion_id"), reviewer=OuterRef("reviewer")
    ).order_by("-created_at", "-pk")
    rollouts = rollouts_visible_to(user=user)
    if run is not None:
        rollouts = rollouts.filter(run=run)
    return CriterionReview.objects.filter(
        rollout__in=rollouts.values("pk"), pk=Subquery(newest.values("pk")[:1])
    )


def grader_health(*, user, run: Run | None = None) -> dict[str, Any]:
    """Agreement rate and kappa overall, per task, per criterion kind and per judge model (llm_judge
    criteria only), and the disagreements newest first. Reads the current reviews once."""
    reviews = list(
        criterion_reviews_current(user=user, run=run)
        .select_related("rollout__task_version__task", "rollout__run", "reviewer")
        .order_by("-created_at", "-pk")
    )
    groups: dict[str, dict[Any, list]] = {"task": {}, "kind": {}, "judge": {}}
    titles: dict[Any, str] = {}
    for review in reviews:
        pair = (review.grader_met, review.reviewer_met)
        version = review.rollout.task_version
        task_key = version.task_id if version else review.rollout.task_name
        titles[task_key] = version.task.title if version else review.rollout.task_name
        groups["task"].setdefault(task_key, []).append(pair)
        groups["kind"].setdefault(review.criterion_kind or "(unknown)", []).append(pair)
        if review.criterion_kind == "llm_judge":
            groups["judge"].setdefault(review.judge_model or "(not named in the spec)", []).append(pair)

    def table(name: str, label) -> list[dict[str, Any]]:
        rows = [{"key": key, "name": label(key), **agreement(pairs)} for key, pairs in groups[name].items()]
        return sorted(rows, key=lambda row: (row["rate"] if row["rate"] is not None else 2, row["name"]))

    return {
        "overall": agreement((r.grader_met, r.reviewer_met) for r in reviews),
        "by_task": table("task", lambda key: titles[key]),
        "by_kind": table("kind", str),
        "by_judge": table("judge", str),
        "disagreements": [r for r in reviews if r.grader_met != r.reviewer_met][:MAX_DISAGREEMENTS],
        "reviewers": len({r.reviewer_id for r in reviews}),
    }


def criterion_reviews_of(*, rollout: Rollout) -> dict[str, list[CriterionReview]]:
    """criterion id → its reviews on this rollout, newest first (the viewer shows the latest per reviewer)."""
    reviews: dict[str, list[CriterionReview]] = {}
    for review in CriterionReview.objects.filter(rollout=rollout).select_related("reviewer"):
        reviews.setdefault(review.criterion_id, []).append(review)
    return reviews
