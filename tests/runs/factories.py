"""Rows for the dashboard tests, made directly (no engine, no ingestion): runs, step metrics, rollouts."""

from __future__ import annotations

from django.utils import timezone

from runs.models import Checkpoint, Rollout, RolloutBody, Run, RunEvent, RunTaskVersion, StepMetric
from runs.services.tallies import TALLIED_FIELDS, task_tallies_add
from tasks_authoring.bundles import BUNDLE_ORG
from tasks_authoring.models import TaskSet

TRAIN_SPEC = {
    "kind": "train",
    "agent": "model",
    "model": {"builtin": "tiny-llama", "path": None, "builtin_seed": 0, "dtype": "auto"},
    "batch": {"prompts_per_step": 2, "samples_per_prompt": 4},
    "evaluation": {"pass_at_k": [1, 2], "samples_per_task": 2},
    "optimizer": {"lr": 1e-4},
    "max_steps": 10,
    "agent_error_reward": 0.0,
}
EVAL_SPEC = {
    "kind": "eval",
    "agent": "oracle",
    "model": None,
    "evaluation": {"pass_at_k": [1], "samples_per_task": 1},
}


def make_run(
    *, user, task_set: TaskSet, kind: str = "train", status: str = "running", name: str = "", **fields
) -> Run:
    spec = fields.pop("spec", None) or dict(TRAIN_SPEC if kind == "train" else EVAL_SPEC)
    defaults = {"steps_total": spec.get("max_steps", 0) if kind == "train" else 0, "rollouts_expected": 80}
    now = timezone.now()
    run = Run.objects.create(
        name=name or f"{kind} run",
        kind=kind,
        status=status,
        task_set=task_set,
        split="train" if kind == "train" else "eval",
        spec=spec,
        launched_by=user,
        started_at=None if status == "queued" else now,
        finished_at=now if status in ("succeeded", "failed", "cancelled") else None,
        **{**defaults, **fields},
    )
    RunTaskVersion.objects.bulk_create(
        RunTaskVersion(
            run=run,
            version=member.version,
            split=member.split,
            content_hash=member.version.content_hash or "0" * 64,
            bundle_name=bundle_name(member.version),
        )
        for member in task_set.members.select_related("version__task")
    )
    return run


def bundle_name(version) -> str:
    return f"{BUNDLE_ORG}/{version.task.slug}"


def step_metrics(step: int, *, reward: float, harness: dict[str, int] | None = None) -> dict:
    harness = harness or {}
    return {
        "step": step,
        "reward_mean": reward,
        "pass_at_1": reward,
        "score_mean": reward,
        "harness_error_rate": sum(harness.values()) / 8,
        "harness_errors_by_code": harness,
        "agent_error_rate": 0.125,
        "agent_errors_by_code": {"TURN_BUDGET": 1},
        "turns_mean": 3.0,
        "tool_calls_by_tool": {
            "read_pdf": {"calls": 4, "errors": step % 2},
            "submit_answer": {"calls": 8, "errors": 0},
        },
        "response_tokens_mean": 40.0 + step,
        "samples_trained": 8,
        "masked_groups": 1 if harness else 0,
        "masked_samples": 4 if harness else 0,
        "zero_variance_groups": 0,
        "entropy": 2.0 - step * 0.05,
        "clip_ratio": 0.01,
        "kl": None,
        "ratio_mean": 1.0,
        "policy_loss": 0.1 - step * 0.01,
        "grad_norm": 0.5,
        "lr": 1e-4,
        "tokens": 320.0,
        "optimizer_steps": 1.0,
        "time_rollout_sec": 2.0,
        "time_generate_sec": 1.2,
        "time_grade_sec": 0.1,
        "time_train_sec": 0.7,
        "data_cursor": step * 2,
    }


def add_steps(run: Run, count: int, *, eval_every: int = 0) -> None:
    """`count` training steps with a rising reward and, every `eval_every` steps, an evaluation."""
    rows = [
        StepMetric(
            run=run,
            split="train",
            step=step,
            metrics=step_metrics(
                step, reward=min(1.0, step / count), harness={"TOOL_TIMEOUT": 1} if step == 2 else None
            ),
        )
        for step in range(1, count + 1)
    ]
    if eval_every:
        rows += [
            StepMetric(
                run=run,
                split="eval",
                step=step,
                metrics={
                    "eval_reward_mean": step / count,
                    "eval_pass_at_1": step / count,
                    "eval_pass_at_2": min(1.0, 1.5 * step / count),
                    "eval_harness_error_rate": 0.0,
                    "eval_rollouts": 4,
                },
            )
            for step in range(0, count + 1, eval_every)
        ]
    StepMetric.objects.bulk_create(rows)
    run.steps_done = count
    run.latest_reward = rows[count - 1].metrics["reward_mean"]
    run.latest_pass_at_1 = rows[count - 1].metrics["pass_at_1"]
    run.save(update_fields=["steps_done", "latest_reward", "latest_pass_at_1"])


def add_rollout(
    run: Run,
    version,
    *,
    step: int = 1,
    sample: int = 0,
    outcome: str = "graded",
    passed: bool | None = True,
    reward: float | None = None,
    code: str = "",
    split: str = "train",
    final: bool = True,
    attempt: int = 1,
    turns: list[dict] | None = None,
) -> Rollout:
    graded = outcome == "graded"
    if reward is None and outcome in ("graded", "agent_error"):
        reward = 1.0 if passed else 0.0
    seq = (Rollout.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first() or 0) + 1
    rollout = Rollout.objects.create(
        run=run,
        seq=seq,
        split=split,
        step=step,
        task_version=version,
        task_name=bundle_name(version),
        task_hash=version.content_hash or "0" * 64,
        sample=sample,
        attempt=attempt,
        final=final,
        outcome=outcome,
        error_code=code,
        message=f"{code} happened" if code else "",
        reward=reward,
        passed=passed if graded else None,
        score=reward if graded else None,
        turns=len(turns or []),
        tokens=100,
        duration_sec=1.5,
        timings={"agent": 1.0, "grade": 0.2},
        policy="oracle",
    )
    # As ingestion does: the per-task tables read the tallies, not the rollouts.
    task_tallies_add(
        run_id=run.pk,
        rollouts=[{field: getattr(rollout, field) for field in TALLIED_FIELDS}],
    )
    RolloutBody.objects.create(
        rollout=rollout,
        turns=turns or [],
        verdicts=[
            {
                "criterion_id": "c1",
                "kind": "contains",
                "met": bool(passed),
                "rationale": None,
                "weight": 1,
                "required": True,
            }
        ]
        if graded
        else [],
        final_answer="The answer is 120." if graded else None,
        error_detail="Traceback: the tool server hung" if code and outcome == "harness_error" else "",
    )
    return rollout


def add_event(run: Run, seq: int, type: str, payload: dict) -> None:
    RunEvent.objects.create(run=run, seq=seq, type=type, payload=payload, emitted_at=timezone.now())


def add_log(run: Run, seq: int, message: str) -> None:
    add_event(run, seq, "log", {"message": message})


def add_checkpoint(run: Run, step: int) -> None:
    Checkpoint.objects.create(
        run=run, step=step, path=f"/runs/{run.uuid}/checkpoints/step-{step}", created_at=timezone.now()
    )


def turn(index: int, role: str = "assistant", content: str = "", tool: str | None = None) -> dict:
    calls = (
        [
            {
                "id": f"t{index}",
                "name": tool,
                "arguments": {"path": "notes.txt"},
                "result_text": "Revenue 120",
                "is_error": False,
            }
        ]
        if tool
        else []
    )
    return {"index": index, "role": role, "content": content or f"turn {index}", "tool_calls": calls}


def build_two_task_set(expert, reviewer, researcher) -> TaskSet:
    """Two approved tasks of the expert's, one per split."""
    from tasks_authoring.services.task_sets import task_set_create
    from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

    versions = [approve(draft_with_rubric(expert, title=f"Question {i}"), expert, reviewer) for i in range(2)]
    return task_set_create(
        owner=researcher, name="Two questions", versions=versions, eval_fraction=0.5, seed=7
    )
