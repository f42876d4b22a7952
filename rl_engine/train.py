"""The training driver: rollouts through the real harness, rewards from the real grader, the
GRPO-family update, weight sync, evaluation, events, checkpoints and resume.

Where the work runs is the `Runtime`'s business (`rl_engine.runtime`): in this process when
`resources.rollout_workers` is 0, on Ray actors otherwise. The step logic below is the same for both.

One step:
1. take `prompts_per_step` tasks from the task stream (a fresh seeded permutation of the task set
   per pass, so the data cursor is just `step · prompts_per_step`);
2. roll each out `samples_per_prompt` times, concurrently, each rollout with its own
   `EnginePolicy` (token sequence recorded) over batched generation;
3. validity from harness errors (whole group or failed sample), the zero-variance filter,
   advantages (all algorithms by name from the spec);
4. the trainer's update on the kept samples, then the new weights go to the inference engine;
5. every `evaluation.every_steps` steps (and before the first, with `at_start`): every eval task
   `samples_per_task` times, Pass@1 and unbiased Pass@k, as a `log` event and `eval_*` metrics;
6. events: one `rollout` per attempt (plus `harness_error`; `split` says train or eval),
   `step_metrics`, and `checkpoint` every `checkpoint.every_steps` steps and at the end.

Between 2 and 4 the health gate (rl_engine.health_gate) judges the last `window_rollouts` final
rollouts: above its harness error threshold the run stops before the update, with the evidence in a
`log` event and in `run_finished`, and `train()` raises `HealthGateTripped` (a pause first writes a
checkpoint of the last completed update, so a resume re-runs the step that tripped).

Resume: the latest complete checkpoint restores the model, optimiser, RNGs and step; the events
file (always written, in the run folder) says which seq came last and which steps were already
reported. Steps between the checkpoint and the crash are trained again but not reported again, so
no step's metrics appear twice and `seq` keeps growing.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rl_engine.bundle import TaskBundle
from rl_engine.checkpoint import latest_checkpoint
from rl_engine.evaluate import load_bundles
from rl_engine.events import EventEmitter, EventSink, JsonlSink
from rl_engine.function_tasks import (
    FunctionTask,
    FunctionTaskError,
    load_function_tasks,
    prompt_ids,
    score_generations,
)
from rl_engine.health_gate import HealthGate, HealthGateTripped
from rl_engine.inference import SamplingParams
from rl_engine.metrics import rollout_metrics, tool_calls_by_tool
from rl_engine.outcomes import Outcome
from rl_engine.rollout import RolloutConfig
from rl_engine.runtime import (
    RolloutRequest,
    RolloutResult,
    Runtime,
    TrainingError,
    create_runtime,
    judge_config,
    load_tokenizer,
    model_folder,
)
from rl_engine.spec import RunSpec
from rl_engine.trainer import TrainingSample, training_samples

T = TypeVar("T")
EVENTS_FILE = "events.jsonl"
CHECKPOINTS = "checkpoints"

__all__ = ["CHECKPOINTS", "EVENTS_FILE", "HealthGateTripped", "TrainingError", "train", "training_samples"]


async def train(
    spec: RunSpec,
    *,
    run_dir: Path,
    run_id: str,
    extra_sink: EventSink | None = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    events_file: Path | None = None,
) -> dict[str, Any]:
    """Run (or resume) a train run in `run_dir` (checkpoints; events in `events_file`, by default
    `run_dir/events.jsonl`); returns the last step's metrics.

    `on_step(step, metrics)` is called after every step (also the re-trained ones after a
    resume) and, with step 0, after an evaluation before the first step. Raises
    `HealthGateTripped` when the health gate stopped the run (its events are written by then)."""
    run = _Run(spec, Path(run_dir), run_id, extra_sink, on_step, events_file)
    try:
        await run.open()
        return await run.run()
    finally:
        await run.close()


class _Run:
    def __init__(
        self,
        spec: RunSpec,
        run_dir: Path,
        run_id: str,
        extra_sink: EventSink | None,
        on_step: Callable[[int, dict[str, Any]], None] | None,
        events_file: Path | None = None,
    ) -> None:
        if spec.kind != "train":
            raise TrainingError(f"the driver runs train specs, this one is {spec.kind}")
        self.spec = spec
        self.run_dir = run_dir
        self.events_file = Path(events_file) if events_file is not None else run_dir / EVENTS_FILE
        self.run_id = run_id
        self.on_step = on_step
        self.function_tasks = _load_function_tasks(spec.tasks.function_tasks)
        self.bundles = [] if self.function_tasks else _load_tasks(spec.tasks.train_dir, "tasks.train_dir")
        self.eval_bundles = (
            _load_tasks(spec.tasks.eval_dir, "tasks.eval_dir")
            if spec.tasks.eval_dir and (spec.evaluation.every_steps or spec.evaluation.at_start)
            else []
        )
        self.extra_sink = extra_sink
        self.runtime: Runtime | None = None
        self.emitter: EventEmitter | None = None
        self.extra: EventEmitter | None = None
        self.start_step = 0
        self.resumed_from: Path | None = None
        self.reported_steps: set[int] = set()
        self.tokenizer: Any = None
        # In memory only: a resumed run judges its harness afresh, not by the burst that paused it.
        self.gate = HealthGate(spec.health_gate)
        self.last_metrics: dict[str, Any] = {}

    async def open(self) -> None:
        self.runtime = create_runtime(self.spec, checkpoints=self.run_dir / CHECKPOINTS)
        checkpoint = latest_checkpoint(self.run_dir / CHECKPOINTS)
        if checkpoint is not None:
            info = await self.runtime.restore(checkpoint)
            self.start_step = info["step"]
        self.resumed_from = checkpoint
        last_seq, self.reported_steps = _reported(self.events_file)
        self.emitter = EventEmitter(self.run_id, JsonlSink(self.events_file), start_seq=last_seq + 1)
        if self.extra_sink is not None:
            self.extra = EventEmitter(self.run_id, self.extra_sink, start_seq=last_seq + 1)

    def emit(self, type: str, payload: dict[str, Any]) -> int:
        """Emits to the events file (and the extra sink, same seq); returns the event's seq."""
        assert self.emitter is not None
        event = self.emitter.emit(type, payload)  # type: ignore[arg-type]
        if self.extra is not None:
            self.extra.emit(type, payload)  # type: ignore[arg-type]
        return event.seq

    async def run(self) -> dict[str, Any]:
        spec = self.spec
        assert self.runtime is not None
        runtime = self.runtime.description  # where the work runs: in-process or which Ray cluster
        if self.resumed_from is None:
            self.emit(
                "run_started",
                {
                    "kind": "train",
                    "spec": spec.model_dump(mode="json"),
                    "tasks": len(self.function_tasks or self.bundles),
                    "runtime": runtime,
                },
            )
        else:
            self.emit(
                "log",
                {
                    "message": f"resumed from {self.resumed_from.name}",
                    "step": self.start_step,
                    "runtime": runtime,
                },
            )
        if self.resumed_from is None and spec.sft_warm_start.enabled:
            await self.warm_start()
        if self.resumed_from is None and self.eval_bundles and spec.evaluation.at_start:
            evaluation = await self.evaluate(0)
            if self.on_step is not None:
                self.on_step(0, evaluation)
        metrics: dict[str, Any] = {}
        for step in range(self.start_step + 1, spec.max_steps + 1):
            metrics = await self.step(step)
            self.last_metrics = metrics
            every = spec.evaluation.every_steps
            if self.eval_bundles and every and step % every == 0:
                metrics.update(await self.evaluate(step))
            if self.on_step is not None:
                self.on_step(step, metrics)
            every = spec.checkpoint.every_steps
            if (every and step % every == 0) or step == spec.max_steps:
                path = await self.save(step)
                if step not in self.reported_steps:
                    self.emit("checkpoint", {"step": step, "path": str(path)})
            # Training holds the event loop for whole updates, so the step's events reach the local
            # file before the next step starts: live views stay current and a crash loses no step.
            await self.emitter.flush()
        self.emit("run_finished", {"steps": spec.max_steps, "last": metrics})
        return metrics

    async def warm_start(self) -> None:
        """SFT on oracle demonstrations of the train tasks, once, before RL step 1 (rl_engine.sft)."""
        from rl_engine.sft import collect_demonstrations

        assert self.runtime is not None
        started = time.monotonic()
        demonstrations = await collect_demonstrations(
            self.bundles,
            tokenizer=load_tokenizer(model_folder(self.spec.model)),
            sandbox_config=self.spec.sandbox,
            judge=judge_config(self.spec),
            concurrency=self.spec.resources.sandboxes_per_worker,
        )
        if not demonstrations.sequences:
            problems = "; ".join(f"{task}: {why}" for task, why in demonstrations.rejected.items())
            raise TrainingError(f"sft_warm_start: no oracle trace passed its grader ({problems})")
        metrics = await self.runtime.warm_start(demonstrations.sequences, self.spec.sft_warm_start)
        await self.runtime.sync_weights()
        metrics.update(sft_rejected=demonstrations.rejected, sft_time_sec=time.monotonic() - started)
        self.emit("log", {"message": "sft warm start", "step": 0, "sft": metrics})

    async def step(self, step: int) -> dict[str, Any]:
        if self.function_tasks:
            return await self.function_step(step)
        spec = self.spec
        assert self.runtime is not None
        started = time.monotonic()
        tasks = _tasks_for_step(self.bundles, spec.seed, step, spec.batch.prompts_per_step)
        params = self.sampling(step, spec.sampling.temperature)
        config = self.rollout_config(step)
        n = spec.batch.samples_per_prompt
        requests = [
            RolloutRequest(
                bundle=bundle,
                group=group,
                sample=sample,
                params=params.model_copy(update={"seed": params.seed + group * 101}),
                config=config,
            )
            for group, bundle in enumerate(tasks)
            for sample in range(n)
        ]
        rollouts = await self.runtime.rollouts(requests)
        generated = time.monotonic()
        finals = [result.records[-1].summary for result in rollouts]
        seqs = self.emit_rollouts(rollouts) if step not in self.reported_steps else [None] * len(finals)
        await self.guard(
            step,
            [
                (s.code if s.outcome == Outcome.HARNESS_ERROR else None, seq)
                for s, seq in zip(finals, seqs, strict=True)
            ],
        )
        samples, counts = self.samples(rollouts)
        trainer_metrics = await self.runtime.update(samples)
        await self.runtime.sync_weights()
        summary = rollout_metrics(finals)
        metrics: dict[str, Any] = {
            "step": step,
            "reward_mean": summary.reward_mean,
            "pass_at_1": summary.pass_at[1],
            "score_mean": summary.score_mean,
            "harness_error_rate": summary.harness_error_rate,
            "harness_errors_by_code": summary.harness_errors_by_code,
            "agent_error_rate": summary.agent_error_rate,
            "agent_errors_by_code": summary.agent_errors_by_code,
            "turns_mean": summary.turns_mean,
            "tool_calls_by_tool": tool_calls_by_tool(
                record for result in rollouts for record in result.records
            ),
            "response_tokens_mean": _mean(
                [result.sequence.model_tokens for result in rollouts if result.sequence is not None]
            ),
            **counts,
            **trainer_metrics,
            "time_rollout_sec": generated - started,
            "time_generate_sec": _mean(
                [r.records[-1].summary.timings.get("generate", 0.0) for r in rollouts]
            ),
            "time_grade_sec": _mean([r.records[-1].summary.timings.get("grade", 0.0) for r in rollouts]),
            "time_train_sec": time.monotonic() - generated,
            "data_cursor": step * spec.batch.prompts_per_step,
        }
        if step not in self.reported_steps:
            self.emit("step_metrics", metrics)
        return metrics

    async def function_step(self, step: int) -> dict[str, Any]:
        """One step on single-turn function-reward tasks: one batched generation, no sandbox, no rollout events."""
        spec = self.spec
        assert self.runtime is not None and self.function_tasks
        started = time.monotonic()
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(model_folder(spec.model))
        tasks = _tasks_for_step(self.function_tasks, spec.seed, step, spec.batch.prompts_per_step)
        n = spec.batch.samples_per_prompt
        prompts = prompt_ids(tasks, self.tokenizer, n)
        generations = await self.runtime.generate(prompts, self.sampling(step, spec.sampling.temperature))
        generated = time.monotonic()
        result = score_generations(
            tasks,
            prompts,
            generations,
            samples_per_prompt=n,
            algorithm=spec.algorithm,
            generate_sec=generated - started,
        )
        # A reward function that fails is this task type's harness error (the grader's REWARD_INVALID).
        await self.guard(step, [(None if r is not None else "REWARD_INVALID", None) for r in result.rewards])
        trainer_metrics = await self.runtime.update(result.samples)
        await self.runtime.sync_weights()
        valid = [reward for reward in result.rewards if reward is not None]
        invalid = len(result.rewards) - len(valid)
        metrics: dict[str, Any] = {
            "step": step,
            "reward_mean": _mean(valid),
            "pass_at_1": None,  # a function reward has no pass / fail
            "score_mean": _mean(valid),
            "harness_error_rate": invalid / len(result.rewards),
            "harness_errors_by_code": {"REWARD_INVALID": invalid} if invalid else {},
            "response_tokens_mean": result.completion_tokens / len(generations),
            **result.counts,
            **trainer_metrics,
            "time_rollout_sec": generated - started,
            "time_generate_sec": generated - started,
            "time_train_sec": time.monotonic() - generated,
            "data_cursor": step * spec.batch.prompts_per_step,
        }
        if step not in self.reported_steps:
            self.emit("step_metrics", metrics)
        return metrics

    async def evaluate(self, step: int) -> dict[str, Any]:
        """Pass@1 and unbiased Pass@k on the eval split with the current weights; emitted as a log event."""
        spec = self.spec
        assert self.runtime is not None
        evaluation = spec.evaluation
        temperature = (
            evaluation.temperature if evaluation.temperature is not None else spec.sampling.temperature
        )
        params = self.sampling(step, temperature).model_copy(update={"seed": spec.seed * 31 + step * 7919})
        config = self.rollout_config(step)
        requests = [
            RolloutRequest(
                bundle=bundle,
                group=group,
                sample=sample,
                params=params.model_copy(update={"seed": params.seed + group * 101}),
                config=config,
            )
            for group, bundle in enumerate(self.eval_bundles)
            for sample in range(evaluation.samples_per_task)
        ]
        started = time.monotonic()
        results = await self.runtime.rollouts(requests)
        summary = rollout_metrics(
            [r.records[-1].summary for r in results], ks=sorted({1, *evaluation.pass_at_k})
        )
        metrics: dict[str, Any] = {
            "eval_reward_mean": summary.reward_mean,
            "eval_score_mean": summary.score_mean,
            **{f"eval_pass_at_{k}": value for k, value in summary.pass_at.items()},
            "eval_harness_error_rate": summary.harness_error_rate,
            "eval_rollouts": summary.rollouts,
            "eval_time_sec": time.monotonic() - started,
        }
        if step not in self.reported_steps:
            self.emit_rollouts(results, split="eval")
            self.emit("log", {"message": f"evaluation at step {step}", "step": step, "evaluation": metrics})
        return metrics

    def emit_rollouts(self, results: list[RolloutResult], *, split: str = "train") -> list[int]:
        """Emits every attempt; returns the seq of each result's final `rollout` event."""
        seqs = []
        for result in results:
            for record in result.records:
                payload = {**record.model_dump(mode="json"), "split": split}
                seq = self.emit("rollout", payload)
                if record.summary.outcome == Outcome.HARNESS_ERROR:
                    self.emit("harness_error", payload)
            seqs.append(seq)
        return seqs

    async def guard(self, step: int, observed: list[tuple[str | None, int | None]]) -> None:
        """The health gate, between a step's rollouts and its update: on a trip the run stops here."""
        for code, seq in observed:
            self.gate.observe(step=step, code=code, seq=seq)
        trip = self.gate.check(step)
        if trip is None:
            return
        if trip.action == "pause":
            path = await self.save(step - 1)
            trip.checkpoint, trip.checkpoint_step = str(path), step - 1
            self.emit("checkpoint", {"step": step - 1, "path": str(path)})
        evidence = trip.evidence()
        self.emit("log", {"message": trip.message, "step": step, "health_gate": evidence})
        self.emit(
            "run_finished",
            {
                "steps": step - 1,
                "last": self.last_metrics,
                "stopped_by": "health_gate",
                "health_gate": evidence,
            },
        )
        raise HealthGateTripped(trip)

    def sampling(self, step: int, temperature: float) -> SamplingParams:
        spec = self.spec
        return SamplingParams(
            temperature=temperature,
            top_p=spec.sampling.top_p,
            max_new_tokens=spec.sampling.max_new_tokens_per_turn,
            seed=spec.seed * 1_000_003 + step * 10_007,
        )

    def rollout_config(self, step: int) -> RolloutConfig:
        spec = self.spec
        return RolloutConfig(
            max_attempts=spec.max_attempts,
            agent_error_reward=spec.agent_error_reward,
            step=step,
            retry_backoff_sec=0.1,
        )

    def samples(self, rollouts: list[RolloutResult]) -> tuple[list[TrainingSample], dict]:
        finals = [result.records[-1].summary for result in rollouts]
        failed = [s.outcome in (Outcome.HARNESS_ERROR, Outcome.CANCELLED) or s.reward is None for s in finals]
        return training_samples(
            [result.sequence for result in rollouts],
            [None if bad else s.reward for s, bad in zip(finals, failed, strict=True)],
            samples_per_prompt=self.spec.batch.samples_per_prompt,
            algorithm=self.spec.algorithm,
        )

    async def save(self, step: int) -> Path:
        assert self.runtime is not None
        return await self.runtime.save(
            step,
            {"run_id": self.run_id, "data_cursor": step * self.spec.batch.prompts_per_step},
            keep_last=self.spec.checkpoint.keep_last,
        )

    async def close(self) -> None:
        try:
            if self.runtime is not None:
                await self.runtime.close()
        finally:
            if self.emitter is not None:
                await self.emitter.close()
            if self.extra is not None:
                await self.extra.close()


def _load_tasks(location: str | None, field: str) -> list[TaskBundle]:
    folder = Path(location or "")
    if not folder.is_dir():
        raise TrainingError(f"{field} {folder} is not a folder")
    bundles, invalid = load_bundles(folder)
    if invalid:
        problems = "; ".join(f"{item.path}: {item.problem}" for item in invalid)
        raise TrainingError(f"{len(invalid)} task folders are invalid: {problems}")
    if not bundles:
        raise TrainingError(f"no task bundles in {folder}")
    return bundles


def _load_function_tasks(name: str | None) -> list[FunctionTask] | None:
    if name is None:
        return None
    try:
        return load_function_tasks(name)
    except FunctionTaskError as error:
        raise TrainingError(str(error)) from error


def _tasks_for_step(tasks: list[T], seed: int, step: int, count: int) -> list[T]:
    """Items step·count … step·count + count − 1 of an endless stream of seeded permutations."""
    chosen = []
    for position in range((step - 1) * count, step * count):
        epoch, offset = divmod(position, len(tasks))
        order = list(range(len(tasks)))
        random.Random(seed * 7919 + epoch).shuffle(order)
        chosen.append(tasks[order[offset]])
    return chosen


def _reported(events_file: Path) -> tuple[int, set[int]]:
    """(last seq written, steps whose metrics were already reported) from the run's events file."""
    last_seq, steps = 0, set()
    if not events_file.exists():
        return last_seq, steps
    for line in events_file.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
        last_seq = max(last_seq, event["seq"])
        if event["type"] == "step_metrics":
            steps.add(event["payload"]["step"])
    return last_seq, steps


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
