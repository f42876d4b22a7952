"""Where a train run's work happens: rollouts (sandbox + agent loop + grader over an inference
engine), the policy update, weight sync and checkpoints — in this process, or on Ray actors.

The driver (`rl_engine.train`) owns the step logic (task stream, advantages, masking, metrics,
events, evaluation, resume) and talks to one `Runtime`:

    rollouts(requests) -> results     one RolloutResult per request, in order
    update(samples)    -> metrics     one policy update
    generate(prompts, params)         token-id prompts → Generations (function tasks: no sandbox)
    warm_start(sequences, sft)        the SFT warm start on demonstration sequences (rl_engine.sft)
    sync_weights()                    the trainer's weights into the inference engine(s)
    save(step, info) / restore(path)  checkpoints
    close()

`LocalRuntime` (resources.rollout_workers = 0) keeps the trainer's model and the engine's copy in
this process and runs `sandboxes_per_worker` rollouts at once over one `BatchingEngine`.
`rl_engine.ray_runtime.RayRuntime` (rollout_workers ≥ 1) puts the same pieces in actors; both run a
rollout with `perform_rollout`, so one rollout means the same thing in either.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from rl_engine.bundle import TaskBundle
from rl_engine.checkpoint import load_checkpoint, save_checkpoint
from rl_engine.grading import JudgeConfig
from rl_engine.inference import SamplingParams
from rl_engine.inference.base import Generation
from rl_engine.inference.hf import HFEngine, default_device
from rl_engine.inference.policy import BatchingEngine, EnginePolicy
from rl_engine.rollout import RolloutConfig, run_rollout
from rl_engine.sandbox import SandboxConfig, SandboxPool
from rl_engine.sequences import TokenSequence
from rl_engine.sft import sft_train
from rl_engine.spec import ModelSpec, RunSpec, SftWarmStartSpec
from rl_engine.trace import RolloutRecord
from rl_engine.trainer import Trainer, TrainingSample


class TrainingError(Exception):
    """The run cannot start (no tasks, no model, a backend that cannot train)."""


@dataclass
class RolloutRequest:
    bundle: TaskBundle
    group: int  # the prompt group within the step (or evaluation)
    sample: int
    params: SamplingParams
    config: RolloutConfig


@dataclass
class RolloutResult:
    records: list[RolloutRecord]  # one per attempt; the last is the rollout's result
    sequence: TokenSequence | None  # the episode's tokens (None when no turn was generated)


class Runtime(Protocol):
    description: dict[str, Any]  # where the work runs, for the run's events

    async def rollouts(self, requests: list[RolloutRequest]) -> list[RolloutResult]: ...
    async def update(self, samples: list[TrainingSample]) -> dict[str, float]: ...
    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...
    async def warm_start(self, sequences: list[TokenSequence], sft: SftWarmStartSpec) -> dict[str, Any]: ...
    async def sync_weights(self) -> None: ...
    async def save(self, step: int, info: dict[str, Any], *, keep_last: int) -> Path: ...
    async def restore(self, checkpoint: Path) -> dict[str, Any]: ...
    async def close(self) -> None: ...


class Generator(Protocol):
    async def generate_one(self, prompt_ids: list[int], params: SamplingParams) -> Any: ...


async def perform_rollout(
    request: RolloutRequest,
    *,
    generator: Generator,
    tokenizer: Any,
    name: str,
    sandbox_config: SandboxConfig,
    judge: JudgeConfig | None,
    context_window: int | None,
    pool: SandboxPool | None = None,
) -> RolloutResult:
    """One rollout with a fresh EnginePolicy, its token sequence kept for the trainer."""
    policy = EnginePolicy(
        generator,  # type: ignore[arg-type]
        tokenizer,
        request.params,
        context_window=context_window,
        name=name,
    )
    records = await run_rollout(
        request.bundle,
        policy,
        sandbox_config=sandbox_config,
        judge=judge,
        config=request.config,
        sample=request.sample,
        pool=pool,
    )
    return RolloutResult(records=records, sequence=policy.sequence)


def model_folder(model: ModelSpec | None) -> Path:
    """The local folder of the spec's model: its path, or a built-in model built on first use."""
    from rl_engine.models import ModelUnavailable, builtin_model

    if model is None:
        raise TrainingError("a train run needs a model (model.path or model.builtin)")
    if model.builtin is not None:
        try:
            return builtin_model(model.builtin, seed=model.builtin_seed)
        except ModelUnavailable as error:
            raise TrainingError(str(error)) from error
    path = Path(model.path or "")
    if not path.is_dir():
        raise TrainingError(f"model.path {path} is not a folder")
    return path


def load_model(folder: Path, device: str) -> tuple[Any, Any]:
    """(tokenizer, fp32 model on `device`) from a local folder, never downloading."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # Trainable weights stay fp32 (master weights); bf16 is applied by autocast on CUDA.
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).to(
        device
    )
    return tokenizer, model


def load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def make_trainer(spec: RunSpec, model: Any, tokenizer: Any) -> Trainer:
    return Trainer(
        model,
        algorithm=spec.algorithm,
        optimizer=spec.optimizer,
        batch=spec.batch,
        temperature=spec.sampling.temperature,
        pad_token_id=tokenizer.pad_token_id or 0,
        seed=spec.seed,
    )


def warm_start_trainer(
    trainer: Trainer, sequences: list[TokenSequence], sft: SftWarmStartSpec, *, seed: int
) -> dict[str, Any]:
    return sft_train(
        trainer.model,
        sequences,
        epochs=sft.epochs,
        lr=sft.lr,
        batch_size=sft.batch_size,
        pad_token_id=trainer.pad_token_id,
        seed=seed,
    )


def context_window(model: Any) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def judge_config(spec: RunSpec) -> JudgeConfig | None:
    """The llm_judge endpoint of the spec, its key read from the named environment variable."""
    if spec.judge is None:
        return None
    return JudgeConfig(
        base_url=spec.judge.base_url,
        model=spec.judge.model,
        api_key=os.environ.get(spec.judge.api_key_env, ""),
        timeout_sec=spec.judge.timeout_sec,
        retries=spec.judge.retries,
    )


def save_trainer_checkpoint(
    root: Path, step: int, *, trainer: Trainer, tokenizer: Any, info: dict[str, Any], keep_last: int
) -> Path:
    return save_checkpoint(
        root,
        step,
        model=trainer.model,
        tokenizer=tokenizer,
        trainer_state=trainer.state(),
        info=info,
        keep_last=keep_last,
    )


def restore_trainer_checkpoint(checkpoint: Path, trainer: Trainer) -> dict[str, Any]:
    trainer_state, info = load_checkpoint(checkpoint, model=trainer.model)
    trainer.load_state(trainer_state)
    return info


class LocalRuntime:
    """Trainer, inference engine and sandboxes in this process (the embedded default)."""

    def __init__(self, spec: RunSpec, *, checkpoints: Path) -> None:
        if spec.inference.backend != "hf":
            raise TrainingError(
                f"the in-process runtime generates with the hf backend; {spec.inference.backend} needs "
                "Ray (resources.rollout_workers ≥ 1)"
            )
        self.spec = spec
        self.checkpoints = checkpoints
        folder = model_folder(spec.model)
        device = default_device()
        self.tokenizer, self.model = load_model(folder, device)
        self.trainer = make_trainer(spec, self.model, self.tokenizer)
        _, engine_model = load_model(folder, device)
        self.engine = HFEngine(engine_model, self.tokenizer, max_batch_size=spec.inference.max_batch_size)
        self.batching = BatchingEngine(self.engine)
        self.judge = judge_config(spec)
        self.gate = asyncio.Semaphore(spec.resources.sandboxes_per_worker)
        self.description = {
            "kind": "local",
            "sandboxes": spec.resources.sandboxes_per_worker,
            "inference": self.engine.name,
            "device": device,
        }

    async def rollouts(self, requests: list[RolloutRequest]) -> list[RolloutResult]:
        window = context_window(self.model)

        async def one(request: RolloutRequest) -> RolloutResult:
            async with self.gate:
                return await perform_rollout(
                    request,
                    generator=self.batching,
                    tokenizer=self.tokenizer,
                    name=self.engine.name,
                    sandbox_config=self.spec.sandbox,
                    judge=self.judge,
                    context_window=window,
                )

        return list(await asyncio.gather(*(one(request) for request in requests)))

    async def update(self, samples: list[TrainingSample]) -> dict[str, float]:
        return await asyncio.to_thread(self.trainer.update, samples)

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return await asyncio.to_thread(self.engine.generate, prompts, params)

    async def warm_start(self, sequences: list[TokenSequence], sft: SftWarmStartSpec) -> dict[str, Any]:
        return await asyncio.to_thread(warm_start_trainer, self.trainer, sequences, sft, seed=self.spec.seed)

    async def sync_weights(self) -> None:
        self.engine.sync_from(self.model)

    async def save(self, step: int, info: dict[str, Any], *, keep_last: int) -> Path:
        return await asyncio.to_thread(
            save_trainer_checkpoint,
            self.checkpoints,
            step,
            trainer=self.trainer,
            tokenizer=self.tokenizer,
            info=info,
            keep_last=keep_last,
        )

    async def restore(self, checkpoint: Path) -> dict[str, Any]:
        info = await asyncio.to_thread(restore_trainer_checkpoint, checkpoint, self.trainer)
        self.engine.sync_from(self.model)
        return info

    async def close(self) -> None:
        return None


def create_runtime(spec: RunSpec, *, checkpoints: Path) -> Runtime:
    """In-process when resources.rollout_workers is 0, else on Ray (RAY_ADDRESS or a local cluster)."""
    if spec.resources.rollout_workers == 0:
        return LocalRuntime(spec, checkpoints=checkpoints)
    from rl_engine.ray_runtime import RayRuntime

    return RayRuntime(spec, checkpoints=checkpoints)
