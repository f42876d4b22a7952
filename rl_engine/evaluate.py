"""Evaluate a policy on a folder of task bundles: every task × sample, bounded concurrency, events out.

Each immediate sub-folder of the tasks folder is one bundle (a folder that itself holds `task.toml`
is a single bundle). A folder that fails to load is reported with its BundleError, emitted as a
`harness_error` event with code BUNDLE_INVALID and counted — never skipped silently.

The summary follows DESIGN.md: the mean reward and Pass@1 are over valid rollouts only (graded and
agent_error); a rollout that ended in a harness error or was cancelled has no reward and is never
averaged in as 0; the harness error rate is shown beside them. A rollout's result is its last
attempt; harness errors by code count every attempt, since each one is evidence.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field

from rl_engine.agent.policy import Policy
from rl_engine.bundle import BundleError, TaskBundle, load_bundle
from rl_engine.events import EventEmitter, EventFanout
from rl_engine.grading import JudgeConfig
from rl_engine.outcomes import HarnessCode, Outcome
from rl_engine.rollout import RolloutConfig, run_rollout
from rl_engine.sandbox import SandboxConfig
from rl_engine.trace import RolloutRecord, RolloutSummary


class InvalidBundle(BaseModel):
    path: str
    problem: str


class EvalSummary(BaseModel):
    tasks: int
    invalid_bundles: list[InvalidBundle] = Field(default_factory=list)
    rollouts: int = 0
    attempts: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)
    harness_errors_by_code: dict[str, int] = Field(default_factory=dict)
    agent_errors_by_code: dict[str, int] = Field(default_factory=dict)
    valid_mean_reward: float | None = None
    pass_at_1: float | None = None
    mean_score: float | None = None
    harness_error_rate: float | None = None
    per_task: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)


def find_bundle_folders(tasks_dir: Path) -> list[Path]:
    if (tasks_dir / "task.toml").is_file():
        return [tasks_dir]
    return sorted(path for path in tasks_dir.iterdir() if path.is_dir() and not path.name.startswith("."))


def load_bundles(tasks_dir: Path) -> tuple[list[TaskBundle], list[InvalidBundle]]:
    bundles: list[TaskBundle] = []
    invalid: list[InvalidBundle] = []
    for folder in find_bundle_folders(tasks_dir):
        try:
            bundles.append(load_bundle(folder))
        except BundleError as error:
            invalid.append(InvalidBundle(path=str(folder), problem=str(error)))
    return bundles, invalid


async def evaluate(
    bundles: list[TaskBundle],
    policy: Policy,
    *,
    emitter: EventEmitter | EventFanout,
    samples: int = 1,
    concurrency: int = 4,
    sandbox_config: SandboxConfig | None = None,
    judge: JudgeConfig | None = None,
    rollout_config: RolloutConfig | None = None,
    invalid_bundles: list[InvalidBundle] | None = None,
    cancel: asyncio.Event | None = None,
) -> EvalSummary:
    sandbox_config = sandbox_config or SandboxConfig()
    rollout_config = rollout_config or RolloutConfig()
    invalid_bundles = invalid_bundles or []
    emitter.emit(
        "run_started",
        {
            "kind": "eval",
            "policy": policy.name,
            "tasks": [b.name for b in bundles],
            "samples": samples,
            "concurrency": concurrency,
            "invalid_bundles": len(invalid_bundles),
        },
    )
    for invalid in invalid_bundles:
        emitter.emit(
            "harness_error",
            {"code": HarnessCode.BUNDLE_INVALID, "task": invalid.path, "message": invalid.problem},
        )
    gate = asyncio.Semaphore(concurrency)

    async def one(bundle: TaskBundle, sample: int) -> list[RolloutRecord]:
        async with gate:
            attempts = await run_rollout(
                bundle,
                policy,
                sandbox_config=sandbox_config,
                judge=judge,
                config=rollout_config,
                sample=sample,
                cancel=cancel,
            )
        for record in attempts:
            payload = record.model_dump(mode="json")
            emitter.emit("rollout", payload)
            if record.summary.outcome == Outcome.HARNESS_ERROR:
                emitter.emit("harness_error", payload)
        return attempts

    results = await asyncio.gather(*(one(bundle, sample) for bundle in bundles for sample in range(samples)))
    summary = summarize(results, tasks=len(bundles), invalid_bundles=invalid_bundles)
    emitter.emit("run_finished", summary.model_dump(mode="json"))
    return summary


def summarize(
    results: list[list[RolloutRecord]], *, tasks: int, invalid_bundles: list[InvalidBundle]
) -> EvalSummary:
    finals = [attempts[-1].summary for attempts in results if attempts]
    every_attempt = [record.summary for attempts in results for record in attempts]
    summary = EvalSummary(
        tasks=tasks,
        invalid_bundles=invalid_bundles,
        rollouts=len(finals),
        attempts=len(every_attempt),
        outcomes=dict(Counter(str(record.outcome) for record in finals)),
        harness_errors_by_code=dict(
            Counter(str(r.code) for r in every_attempt if r.outcome == Outcome.HARNESS_ERROR)
        ),
        agent_errors_by_code=dict(Counter(str(r.code) for r in finals if r.outcome == Outcome.AGENT_ERROR)),
    )
    summary.valid_mean_reward, summary.pass_at_1, summary.mean_score = _valid_stats(finals)
    if finals:
        summary.harness_error_rate = sum(r.outcome == Outcome.HARNESS_ERROR for r in finals) / len(finals)
    for task in sorted({record.task_name for record in finals}):
        reward, pass_at_1, score = _valid_stats([r for r in finals if r.task_name == task])
        summary.per_task[task] = {
            "rollouts": sum(r.task_name == task for r in finals),
            "harness_errors": sum(r.task_name == task and r.outcome == Outcome.HARNESS_ERROR for r in finals),
            "mean_reward": reward,
            "pass_at_1": pass_at_1,
            "mean_score": score,
        }
    return summary


def _valid_stats(finals: list[RolloutSummary]) -> tuple[float | None, float | None, float | None]:
    valid = [r for r in finals if r.outcome in (Outcome.GRADED, Outcome.AGENT_ERROR)]
    graded = [r for r in valid if r.outcome == Outcome.GRADED]
    if not valid:
        return None, None, None
    mean_reward = sum(r.reward for r in valid) / len(valid)
    pass_at_1 = sum(bool(r.passed) for r in valid) / len(valid)
    mean_score = sum(r.score for r in graded) / len(graded) if graded else None
    return mean_reward, pass_at_1, mean_score


def format_summary(summary: EvalSummary) -> str:
    def number(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    lines = [
        f"tasks loaded        {summary.tasks}",
        f"invalid bundles     {len(summary.invalid_bundles)}",
        *(f"  {invalid.path}: {invalid.problem}" for invalid in summary.invalid_bundles),
        f"rollouts            {summary.rollouts} ({summary.attempts} attempts)",
        f"valid mean reward   {number(summary.valid_mean_reward)}",
        f"Pass@1              {number(summary.pass_at_1)}",
        f"mean score          {number(summary.mean_score)}",
        f"harness error rate  {number(summary.harness_error_rate)}",
        "outcomes            " + _counts(summary.outcomes),
        "harness errors      " + _counts(summary.harness_errors_by_code) + "  (by code, every attempt)",
        "agent errors        " + _counts(summary.agent_errors_by_code),
        "",
        f"{'task':<40} {'rollouts':>8} {'h.err':>6} {'reward':>7} {'pass@1':>7} {'score':>7}",
    ]
    for task, row in summary.per_task.items():
        lines.append(
            f"{task:<40} {row['rollouts']:>8} {row['harness_errors']:>6} {number(row['mean_reward']):>7} "
            f"{number(row['pass_at_1']):>7} {number(row['mean_score']):>7}"
        )
    return "\n".join(lines)


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(counter.items())) or "none"
