"""The single-process training driver: rollouts through the real harness, rewards from the real
grader, the GRPO-family update, weight sync, events, checkpoints and resume.

One step:
1. take `prompts_per_step` tasks from the task stream (a fresh seeded permutation of the task set
   per pass, so the data cursor is just `step · prompts_per_step`);
2. roll each out `samples_per_prompt` times, concurrently, each rollout with its own
   `EnginePolicy` (token sequence recorded) over one shared `BatchingEngine`;
3. validity from harness errors (whole group or failed sample), the zero-variance filter,
   advantages (all algorithms by name from the spec);
4. the trainer's update on the kept samples, then the new weights go to the inference engine;
5. events: one `rollout` per attempt (plus `harness_error`), `step_metrics`, and `checkpoint`
   every `checkpoint.every_steps` steps and at the end.

Resume: the latest complete checkpoint restores the model, optimiser, RNGs and step; the events
file (always written, in the run folder) says which seq came last and which steps were already
reported. Steps between the checkpoint and the crash are trained again but not reported again, so
no step's metrics appear twice and `seq` keeps growing.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rl_engine.algorithms import (
    ADVANTAGE_ESTIMATORS,
    harness_error_validity,
    registry_get,
    zero_variance_keep,
)
from rl_engine.bundle import TaskBundle
from rl_engine.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from rl_engine.evaluate import load_bundles
from rl_engine.events import EventEmitter, EventSink, JsonlSink
from rl_engine.inference import SamplingParams
from rl_engine.inference.hf import HFEngine, default_device
from rl_engine.inference.policy import BatchingEngine, EnginePolicy
from rl_engine.metrics import rollout_metrics
from rl_engine.outcomes import Outcome
from rl_engine.rollout import RolloutConfig, run_rollout
from rl_engine.spec import RunSpec
from rl_engine.trace import RolloutRecord
from rl_engine.trainer import Trainer, TrainingSample

EVENTS_FILE = "events.jsonl"
CHECKPOINTS = "checkpoints"


class TrainingError(Exception):
    """The run cannot start (no tasks, no model, a backend that cannot train)."""


async def train(
    spec: RunSpec,
    *,
    run_dir: Path,
    run_id: str,
    extra_sink: EventSink | None = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) a train run; returns the last step's metrics."""
    run = _Run(spec, Path(run_dir), run_id, extra_sink, on_step)
    try:
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
    ) -> None:
        if spec.kind != "train":
            raise TrainingError(f"the driver runs train specs, this one is {spec.kind}")
        if spec.inference.backend != "hf":
            raise TrainingError(
                f"the single-process driver trains with the hf backend; {spec.inference.backend} runs on Ray"
            )
        if spec.sft_warm_start.enabled:
            raise TrainingError("sft_warm_start is not available in the single-process driver yet")
        self.spec = spec
        self.run_dir = run_dir
        self.run_id = run_id
        self.on_step = on_step
        self.bundles = _load_tasks(spec)
        self.device = default_device()
        self.tokenizer, self.model = _load_model(spec, self.device)
        self.trainer = Trainer(
            self.model,
            algorithm=spec.algorithm,
            optimizer=spec.optimizer,
            batch=spec.batch,
            temperature=spec.sampling.temperature,
            pad_token_id=self.tokenizer.pad_token_id or 0,
            seed=spec.seed,
        )
        _, engine_model = _load_model(spec, self.device)
        self.engine = HFEngine(engine_model, self.tokenizer, max_batch_size=spec.inference.max_batch_size)
        self.batching = BatchingEngine(self.engine)
        self.start_step = 0
        checkpoint = latest_checkpoint(run_dir / CHECKPOINTS)
        if checkpoint is not None:
            trainer_state, info = load_checkpoint(checkpoint, model=self.model)
            self.trainer.load_state(trainer_state)
            self.engine.sync_from(self.model)
            self.start_step = info["step"]
        self.resumed_from = checkpoint
        last_seq, self.reported_steps = _reported(run_dir / EVENTS_FILE)
        self.emitter = EventEmitter(run_id, JsonlSink(run_dir / EVENTS_FILE), start_seq=last_seq + 1)
        self.extra = EventEmitter(run_id, extra_sink, start_seq=last_seq + 1) if extra_sink else None

    def emit(self, type: str, payload: dict[str, Any]) -> None:
        self.emitter.emit(type, payload)  # type: ignore[arg-type]
        if self.extra is not None:
            self.extra.emit(type, payload)  # type: ignore[arg-type]

    async def run(self) -> dict[str, Any]:
        spec = self.spec
        if self.resumed_from is None:
            self.emit(
                "run_started",
                {"kind": "train", "spec": spec.model_dump(mode="json"), "tasks": len(self.bundles)},
            )
        else:
            self.emit("log", {"message": f"resumed from {self.resumed_from.name}", "step": self.start_step})
        metrics: dict[str, Any] = {}
        for step in range(self.start_step + 1, spec.max_steps + 1):
            metrics = await self.step(step)
            if self.on_step is not None:
                self.on_step(step, metrics)
            every = spec.checkpoint.every_steps
            if (every and step % every == 0) or step == spec.max_steps:
                path = await asyncio.to_thread(self.save, step)
                if step not in self.reported_steps:
                    self.emit("checkpoint", {"step": step, "path": str(path)})
        self.emit("run_finished", {"steps": spec.max_steps, "last": metrics})
        return metrics

    async def step(self, step: int) -> dict[str, Any]:
        spec = self.spec
        started = time.monotonic()
        tasks = _tasks_for_step(self.bundles, spec.seed, step, spec.batch.prompts_per_step)
        rollouts = await self.rollouts(tasks, step)
        generated = time.monotonic()
        samples, counts = self.samples(rollouts)
        trainer_metrics = await asyncio.to_thread(self.trainer.update, samples)
        self.engine.sync_from(self.model)
        finals = [records[-1].summary for records, _ in rollouts]
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
            "response_tokens_mean": _mean(
                [sum(policy.sequence.loss_mask) for _, policy in rollouts if policy.sequence is not None]
            ),
            **counts,
            **trainer_metrics,
            "time_rollout_sec": generated - started,
            "time_generate_sec": _mean([r[-1].summary.timings.get("generate", 0.0) for r, _ in rollouts]),
            "time_grade_sec": _mean([r[-1].summary.timings.get("grade", 0.0) for r, _ in rollouts]),
            "time_train_sec": time.monotonic() - generated,
            "data_cursor": step * spec.batch.prompts_per_step,
        }
        if step not in self.reported_steps:
            for records, _ in rollouts:
                for record in records:
                    payload = record.model_dump(mode="json")
                    self.emit("rollout", payload)
                    if record.summary.outcome == Outcome.HARNESS_ERROR:
                        self.emit("harness_error", payload)
            self.emit("step_metrics", metrics)
        return metrics

    async def rollouts(
        self, tasks: list[TaskBundle], step: int
    ) -> list[tuple[list[RolloutRecord], EnginePolicy]]:
        spec = self.spec
        params = SamplingParams(
            temperature=spec.sampling.temperature,
            top_p=spec.sampling.top_p,
            max_new_tokens=spec.sampling.max_new_tokens_per_turn,
            seed=spec.seed * 1_000_003 + step * 10_007,
        )
        config = RolloutConfig(
            max_attempts=spec.max_attempts,
            agent_error_reward=spec.agent_error_reward,
            step=step,
            retry_backoff_sec=0.1,
        )
        gate = asyncio.Semaphore(spec.resources.rollout_workers * spec.resources.sandboxes_per_worker)
        window = getattr(self.model.config, "max_position_embeddings", None)

        async def one(
            group: int, bundle: TaskBundle, sample: int
        ) -> tuple[list[RolloutRecord], EnginePolicy]:
            policy = EnginePolicy(
                self.batching,
                self.tokenizer,
                params.model_copy(update={"seed": params.seed + group * 101}),
                context_window=window,
            )
            async with gate:
                records = await run_rollout(
                    bundle, policy, sandbox_config=spec.sandbox, judge=None, config=config, sample=sample
                )
            return records, policy

        n = spec.batch.samples_per_prompt
        return await asyncio.gather(
            *(one(group, bundle, sample) for group, bundle in enumerate(tasks) for sample in range(n))
        )

    def samples(
        self, rollouts: list[tuple[list[RolloutRecord], EnginePolicy]]
    ) -> tuple[list[TrainingSample], dict]:
        algorithm = self.spec.algorithm
        n = self.spec.batch.samples_per_prompt
        group_ids = torch.tensor([index // n for index in range(len(rollouts))])
        finals = [records[-1].summary for records, _ in rollouts]
        failed = torch.tensor(
            [s.outcome in (Outcome.HARNESS_ERROR, Outcome.CANCELLED) or s.reward is None for s in finals]
        )
        rewards = torch.tensor(
            [s.reward if s.reward is not None else 0.0 for s in finals], dtype=torch.float32
        )
        valid = harness_error_validity(group_ids, failed, policy=algorithm.harness_error_masking)
        keep = (
            zero_variance_keep(rewards, group_ids, valid, tol=algorithm.zero_variance_tol)
            if algorithm.zero_variance_filter
            else valid
        )
        estimator = registry_get(ADVANTAGE_ESTIMATORS, algorithm.advantage_estimator, "advantage estimator")
        advantages = estimator(
            rewards,
            group_ids,
            valid,
            norm_by_std=algorithm.norm_adv_by_std,
            epsilon=algorithm.advantage_epsilon,
        )
        samples = []
        for index, (_, policy) in enumerate(rollouts):
            sequence = policy.sequence
            if not keep[index] or sequence is None or not sequence.model_tokens:
                continue
            samples.append(
                TrainingSample(
                    input_ids=sequence.input_ids,
                    loss_mask=sequence.loss_mask,
                    rollout_logprobs=sequence.logprobs,
                    advantage=float(advantages[index]),
                    group_id=int(group_ids[index]),
                )
            )
        groups = int(group_ids.max()) + 1
        counts = {
            "samples_trained": len(samples),
            "masked_groups": groups - len(set(group_ids[valid].tolist())),
            "masked_samples": int((~valid).sum()),
            "zero_variance_groups": len(set(group_ids[valid].tolist())) - len(set(group_ids[keep].tolist())),
        }
        return samples, counts

    def save(self, step: int) -> Path:
        return save_checkpoint(
            self.run_dir / CHECKPOINTS,
            step,
            model=self.model,
            tokenizer=self.tokenizer,
            trainer_state=self.trainer.state(),
            info={"run_id": self.run_id, "data_cursor": step * self.spec.batch.prompts_per_step},
            keep_last=self.spec.checkpoint.keep_last,
        )

    async def close(self) -> None:
        await self.emitter.close()
        if self.extra is not None:
            await self.extra.close()


def _load_tasks(spec: RunSpec) -> list[TaskBundle]:
    folder = Path(spec.tasks.train_dir or "")
    if not folder.is_dir():
        raise TrainingError(f"tasks.train_dir {folder} is not a folder")
    bundles, invalid = load_bundles(folder)
    if invalid:
        problems = "; ".join(f"{item.path}: {item.problem}" for item in invalid)
        raise TrainingError(f"{len(invalid)} task folders are invalid: {problems}")
    if not bundles:
        raise TrainingError(f"no task bundles in {folder}")
    return bundles


def _load_model(spec: RunSpec, device: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec.model is None or spec.model.path is None:
        raise TrainingError("the single-process driver needs model.path (a local model folder)")
    path = Path(spec.model.path)
    if not path.is_dir():
        raise TrainingError(f"model.path {path} is not a folder")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    # Trainable weights stay fp32 (master weights); bf16 is applied by autocast on CUDA.
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32).to(device)
    return tokenizer, model


def _tasks_for_step(bundles: list[TaskBundle], seed: int, step: int, count: int) -> list[TaskBundle]:
    """Items step·count … step·count + count − 1 of an endless stream of seeded permutations."""
    chosen = []
    for position in range((step - 1) * count, step * count):
        epoch, offset = divmod(position, len(bundles))
        order = list(range(len(bundles)))
        random.Random(seed * 7919 + epoch).shuffle(order)
        chosen.append(bundles[order[offset]])
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
