"""Single-turn function-reward tasks: a prompt and a Python function that scores the completion.

No sandbox, no tools, no grader process: the whole prompt set × group is generated in one engine
call (batched), each completion is scored by the task's function, and the samples go to the same
`training_samples` (masking, zero-variance filter, advantages) and `Trainer` as harness rollouts.
This is the task type of math / format RL recipes and of TRL's `GRPOTrainer` with reward functions,
which is what `bench/trainer.py` compares against. A reward that raises or is not a finite number
makes its sample invalid (masked like a harness error), never a 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rl_engine.inference.base import InferenceEngine, SamplingParams
from rl_engine.sequences import TokenSequence
from rl_engine.spec import AlgorithmSpec
from rl_engine.train import training_samples
from rl_engine.trainer import TrainingSample


@dataclass
class FunctionTask:
    name: str
    prompt: str  # the text the model continues (already in its chat format, if it has one)
    reward: Callable[[str], float]  # completion text → reward


@dataclass
class FunctionStep:
    samples: list[TrainingSample]
    rewards: list[float | None]  # per completion, prompt-group order; None = invalid
    completion_tokens: int
    generate_sec: float
    counts: dict[str, int]


def function_task_step(
    tasks: list[FunctionTask],
    *,
    engine: InferenceEngine,
    tokenizer: Any,
    params: SamplingParams,
    samples_per_prompt: int,
    algorithm: AlgorithmSpec,
) -> FunctionStep:
    """Generate `samples_per_prompt` completions per task in one batch, score them, build samples."""
    prompts = [tokenizer(task.prompt, add_special_tokens=False)["input_ids"] for task in tasks]
    started = time.monotonic()
    generations = engine.generate([ids for ids in prompts for _ in range(samples_per_prompt)], params)
    generate_sec = time.monotonic() - started
    sequences: list[TokenSequence | None] = []
    rewards: list[float | None] = []
    for index, generation in enumerate(generations):
        task = tasks[index // samples_per_prompt]
        sequence = TokenSequence()
        sequence.extend(prompts[index // samples_per_prompt], generated=False)
        sequence.extend(generation.token_ids or [], generated=True, logprobs=generation.logprobs)
        sequences.append(sequence)
        rewards.append(_score(task, generation.text))
    samples, counts = training_samples(
        sequences, rewards, samples_per_prompt=samples_per_prompt, algorithm=algorithm
    )
    return FunctionStep(
        samples=samples,
        rewards=rewards,
        completion_tokens=sum(len(g.token_ids or []) for g in generations),
        generate_sec=generate_sec,
        counts=counts,
    )


def _score(task: FunctionTask, completion: str) -> float | None:
    try:
        value = float(task.reward(completion))
    except Exception:  # the task's own code failed: this sample has no reward
        return None
    return value if math.isfinite(value) else None
