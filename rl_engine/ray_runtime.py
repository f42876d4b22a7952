"""The train run's work on Ray: a trainer actor, an inference-engine actor and rollout-worker actors.

    driver (rl_engine.train, this process)
      ├── TrainerActor        model + optimiser (Trainer), checkpoints        num_gpus = trainer_gpus
      ├── InferenceActor      hf or vllm engine behind a BatchingEngine        num_gpus = gpus_per_engine
      └── RolloutWorker × N   a SandboxPool (own zygote), sandboxes_per_worker rollouts at once,
                              agent loop + grader; generation goes to the InferenceActor

Requests of one step are dealt to the workers in turn; each worker runs `perform_rollout` (the
same function the in-process runtime runs) with a generator that forwards to the inference actor.
The inference actor is an async actor, so concurrent requests from every worker meet in one
`BatchingEngine` and are generated as one batch. After an update the trainer's weights go to the
inference actor through the object store (`load_weights(trainer.state_dict())`, never via the driver).

`connect()`: with RAY_ADDRESS set the driver joins that cluster; otherwise `ray.init()` starts a
local one with an explicit CPU count. Rollout workers ask for one CPU each, the trainer and the
engine only for their GPUs. Task bundles and checkpoints are paths, so on a multi-node cluster
the run folder and the task folders must be on storage every node sees (one node needs nothing).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from rl_engine.grading import JudgeConfig
from rl_engine.inference import SamplingParams
from rl_engine.inference.base import Generation, InferenceFailure
from rl_engine.inference.hf import HFEngine, default_device
from rl_engine.inference.policy import BatchingEngine
from rl_engine.runtime import (
    RolloutRequest,
    RolloutResult,
    TrainingError,
    judge_config,
    load_model,
    load_tokenizer,
    make_trainer,
    model_folder,
    perform_rollout,
    restore_trainer_checkpoint,
    save_trainer_checkpoint,
    warm_start_trainer,
)
from rl_engine.sandbox import SandboxPool
from rl_engine.sequences import TokenSequence
from rl_engine.spec import RunSpec, SftWarmStartSpec
from rl_engine.trainer import TrainingSample

# Environment the actors need from the driver's (fault injection in tests, the model cache, offline hub).
FORWARDED_ENV = ("PRACTICUM_FAULTS", "PRACTICUM_MODEL_CACHE", "HF_HUB_OFFLINE", "HF_HOME")


def connect(*, num_cpus: int | None = None) -> bool:
    """Join RAY_ADDRESS's cluster, or start a local one; True when this call initialised Ray."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level="warning")
    else:
        ray.init(
            num_cpus=num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            logging_level="warning",
        )
    return True


class TrainerActor:
    def __init__(self, spec: RunSpec, checkpoints: str) -> None:
        self.seed = spec.seed
        self.checkpoints = Path(checkpoints)
        self.tokenizer, self.model = load_model(model_folder(spec.model), default_device())
        self.trainer = make_trainer(spec, self.model, self.tokenizer)

    def update(self, samples: list[TrainingSample]) -> dict[str, float]:
        return self.trainer.update(samples)

    def warm_start(self, sequences: list[TokenSequence], sft: SftWarmStartSpec) -> dict[str, Any]:
        return warm_start_trainer(self.trainer, sequences, sft, seed=self.seed)

    def state_dict(self) -> dict[str, Any]:
        return {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}

    def save(self, step: int, info: dict[str, Any], keep_last: int) -> str:
        path = save_trainer_checkpoint(
            self.checkpoints,
            step,
            trainer=self.trainer,
            tokenizer=self.tokenizer,
            info=info,
            keep_last=keep_last,
        )
        return str(path)

    def restore(self, checkpoint: str) -> dict[str, Any]:
        return restore_trainer_checkpoint(Path(checkpoint), self.trainer)


class InferenceActor:
    """One inference engine; concurrent `generate_one` calls from every worker batch together."""

    def __init__(self, spec: RunSpec) -> None:
        folder = model_folder(spec.model)
        options = spec.inference
        if options.backend == "hf":
            self.engine: Any = HFEngine.from_pretrained(folder, max_batch_size=options.max_batch_size)
        elif options.backend == "vllm":
            from rl_engine.inference.vllm_engine import VLLMEngine

            self.engine = VLLMEngine(
                folder,
                gpu_memory_utilization=options.gpu_memory_utilization,
                max_model_len=options.max_model_len,
                seed=spec.seed,
            )
        else:
            raise TrainingError(f"the {options.backend} backend cannot serve the weights being trained")
        self.batching = BatchingEngine(self.engine)

    async def generate_one(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        return await self.batching.generate_one(prompt_ids, params)

    async def load_weights(self, state_dict: dict[str, Any]) -> None:
        await asyncio.to_thread(self.engine.load_weights, state_dict)

    async def name(self) -> str:
        return self.engine.name


class _RemoteGenerator:
    """`generate_one` forwarded to the inference actor; a dead or failing actor is an inference failure."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def generate_one(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        import ray

        try:
            return await self.actor.generate_one.remote(prompt_ids, params)
        except InferenceFailure:
            raise
        except ray.exceptions.RayError as error:
            raise InferenceFailure(f"the inference actor failed: {error}") from error


class RolloutWorker:
    """Owns its sandboxes (a pre-warmed pool with its own zygote) and runs rollouts concurrently."""

    def __init__(self, spec: RunSpec, inference: Any, judge: JudgeConfig | None, engine_name: str) -> None:
        from transformers import AutoConfig

        folder = model_folder(spec.model)
        self.spec = spec
        self.tokenizer = load_tokenizer(folder)
        self.context_window = getattr(
            AutoConfig.from_pretrained(folder, local_files_only=True), "max_position_embeddings", None
        )
        self.generator = _RemoteGenerator(inference)
        self.judge = judge
        self.engine_name = engine_name
        self.pool = SandboxPool()
        self.gate = asyncio.Semaphore(spec.resources.sandboxes_per_worker)

    async def rollout(self, request: RolloutRequest) -> RolloutResult:
        async with self.gate:
            return await perform_rollout(
                request,
                generator=self.generator,
                tokenizer=self.tokenizer,
                name=self.engine_name,
                sandbox_config=self.spec.sandbox,
                judge=self.judge,
                context_window=self.context_window,
                pool=self.pool,
            )

    async def close(self) -> None:
        self.pool.close()


class RayRuntime:
    def __init__(self, spec: RunSpec, *, checkpoints: Path) -> None:
        import ray

        resources = spec.resources
        self.owns_ray = connect(num_cpus=max(os.cpu_count() or 1, resources.rollout_workers))
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        options: dict[str, Any] = {"runtime_env": {"env_vars": env}} if env else {}
        self.trainer = (
            ray.remote(TrainerActor)
            .options(num_cpus=0, num_gpus=resources.trainer_gpus, **options)
            .remote(spec, str(checkpoints))
        )
        self.engine = (
            ray.remote(InferenceActor)
            .options(num_cpus=0, num_gpus=resources.gpus_per_engine, **options)
            .remote(spec)
        )
        engine_name = ray.get(self.engine.name.remote())
        judge = judge_config(spec)
        self.workers = [
            ray.remote(RolloutWorker)
            .options(num_cpus=1, **options)
            .remote(spec, self.engine, judge, engine_name)
            for _ in range(resources.rollout_workers)
        ]
        ray.get(self.trainer.__ray_ready__.remote())
        ray.get([worker.__ray_ready__.remote() for worker in self.workers])
        self.description = {
            "kind": "ray",
            "address": ray.get_runtime_context().gcs_address,
            "rollout_workers": len(self.workers),
            "sandboxes_per_worker": resources.sandboxes_per_worker,
            "inference": engine_name,
        }

    async def rollouts(self, requests: list[RolloutRequest]) -> list[RolloutResult]:
        refs = [
            self.workers[index % len(self.workers)].rollout.remote(request)
            for index, request in enumerate(requests)
        ]
        return list(await asyncio.gather(*(_wait(ref) for ref in refs)))

    async def update(self, samples: list[TrainingSample]) -> dict[str, float]:
        return await _wait(self.trainer.update.remote(samples))

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        raise TrainingError("function tasks run in one process; set resources.rollout_workers to 0")

    async def warm_start(self, sequences: list[TokenSequence], sft: SftWarmStartSpec) -> dict[str, Any]:
        return await _wait(self.trainer.warm_start.remote(sequences, sft))

    async def sync_weights(self) -> None:
        await _wait(self.engine.load_weights.remote(self.trainer.state_dict.remote()))

    async def save(self, step: int, info: dict[str, Any], *, keep_last: int) -> Path:
        return Path(await _wait(self.trainer.save.remote(step, info, keep_last)))

    async def restore(self, checkpoint: Path) -> dict[str, Any]:
        info = await _wait(self.trainer.restore.remote(str(checkpoint)))
        await self.sync_weights()
        return info

    async def close(self) -> None:
        import ray

        try:
            await asyncio.gather(*(_wait(worker.close.remote()) for worker in self.workers))
        finally:
            for actor in [*self.workers, self.engine, self.trainer]:
                ray.kill(actor)
            if self.owns_ray:
                ray.shutdown()


async def _wait(ref: Any) -> Any:
    return await asyncio.wrap_future(ref.future())
