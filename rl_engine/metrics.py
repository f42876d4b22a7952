"""Pass@k, valid mean reward and the per-step aggregation of rollout and trainer metrics.

Harness errors carry no reward: they are left out of every mean and reported beside it as a
rate, never averaged in as 0 (DESIGN.md, "Rollout" step 5). Agent errors are the model's fault and
count as valid, failed samples with their configured reward.

Pass@k (Chen et al. 2021, unbiased): for a task with n valid samples of which c passed,
    pass@k = 1 − C(n − c, k) / C(n, k)          (= 1 when n − c < k)
and a set's Pass@k is the mean over its tasks; a task with fewer than k valid samples has no
Pass@k estimate and is left out (counted in `tasks_short_of_k`). Pass@1 = mean over tasks of c/n.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable

from pydantic import BaseModel

from rl_engine.outcomes import Outcome
from rl_engine.trace import RolloutRecord, RolloutSummary

VALID_OUTCOMES = (Outcome.GRADED, Outcome.AGENT_ERROR)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of k samples drawn from n (c correct) passes."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def valid_mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that exist; None (not 0) when there are none."""
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def valid_mean_reward(summaries: Iterable[RolloutSummary]) -> float | None:
    """Mean reward over graded and agent-error rollouts; harness errors and cancellations excluded."""
    return valid_mean(s.reward for s in summaries if s.outcome in VALID_OUTCOMES)


def pass_at_k_by_task(summaries: Iterable[RolloutSummary]) -> dict[str, tuple[int, int]]:
    """(n valid samples, c passed) per task."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for summary in summaries:
        if summary.outcome in VALID_OUTCOMES:
            counts[summary.task_name][0] += 1
            counts[summary.task_name][1] += bool(summary.passed)
    return {task: (n, c) for task, (n, c) in counts.items()}


def mean_pass_at_k(per_task: dict[str, tuple[int, int]], k: int) -> tuple[float | None, int]:
    """(mean Pass@k over the tasks with at least k valid samples, number of tasks short of k)."""
    estimates = [pass_at_k(n, c, k) for n, c in per_task.values() if n >= k]
    short = sum(n < k for n, _ in per_task.values())
    return valid_mean(estimates), short


class RolloutMetrics(BaseModel):
    rollouts: int
    valid: int
    reward_mean: float | None  # valid rollouts only
    score_mean: float | None  # graded rollouts only
    pass_at: dict[int, float | None]  # k → mean Pass@k over tasks
    tasks_short_of_k: dict[int, int]
    harness_error_rate: float | None
    harness_errors_by_code: dict[str, int]
    agent_error_rate: float | None
    agent_errors_by_code: dict[str, int]
    turns_mean: float | None
    tokens_mean: float | None


def rollout_metrics(finals: list[RolloutSummary], *, ks: Iterable[int] = (1,)) -> RolloutMetrics:
    """A step's (or an evaluation's) rollout metrics from the final attempt of each rollout."""
    per_task = pass_at_k_by_task(finals)
    pass_at: dict[int, float | None] = {}
    short: dict[int, int] = {}
    for k in ks:
        pass_at[k], short[k] = mean_pass_at_k(per_task, k)
    valid = [s for s in finals if s.outcome in VALID_OUTCOMES]
    harness = [s for s in finals if s.outcome == Outcome.HARNESS_ERROR]
    agent = [s for s in finals if s.outcome == Outcome.AGENT_ERROR]
    # Rates are over every final rollout, as in evaluate.summarize, so the two never disagree.
    total = len(finals)
    return RolloutMetrics(
        rollouts=total,
        valid=len(valid),
        reward_mean=valid_mean(s.reward for s in valid),
        score_mean=valid_mean(s.score for s in finals if s.outcome == Outcome.GRADED),
        pass_at=pass_at,
        tasks_short_of_k=short,
        harness_error_rate=len(harness) / total if total else None,
        harness_errors_by_code=dict(Counter(str(s.code) for s in harness)),
        agent_error_rate=len(agent) / total if total else None,
        agent_errors_by_code=dict(Counter(str(s.code) for s in agent)),
        turns_mean=valid_mean(s.turns for s in valid),
        tokens_mean=valid_mean(s.tokens for s in valid),
    )


def tool_calls_by_tool(records: Iterable[RolloutRecord]) -> dict[str, dict[str, int]]:
    """{tool: {"calls", "errors"}} over every attempt's tool calls: a retried attempt's failing call is
    evidence of the tool's health too. An error is a result the harness marked `is_error` (the tool
    refused the arguments, raised, or timed out)."""
    counts: dict[str, dict[str, int]] = {}
    for record in records:
        for turn in record.turns:
            for call in turn.tool_calls:
                entry = counts.setdefault(call.name, {"calls": 0, "errors": 0})
                entry["calls"] += 1
                entry["errors"] += call.is_error
    return counts


class MetricMeans:
    """Weighted means of named scalars over a step's micro-batches (weight: e.g. their token count).

    A value added as None (not measured in that micro-batch) is skipped, not counted as 0.
    """

    def __init__(self) -> None:
        self._sums: dict[str, float] = defaultdict(float)
        self._weights: dict[str, float] = defaultdict(float)

    def add(self, values: dict[str, float | None], weight: float = 1.0) -> None:
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError(f"a metric weight must be finite and not negative, got {weight}")
        for name, value in values.items():
            if value is None:
                continue
            self._sums[name] += float(value) * weight
            self._weights[name] += weight

    def means(self) -> dict[str, float]:
        return {name: self._sums[name] / w for name, w in self._weights.items() if w > 0}
