"""Single-turn function-reward tasks: a prompt and a Python function that scores the completion.

No sandbox, no tools, no grader process: the whole prompt set × group is generated in one engine
call (batched), each completion is scored by the task's function, and the samples go to the same
`training_samples` (masking, zero-variance filter, advantages) and `Trainer` as harness rollouts.
This is the task type of math / format RL recipes and of TRL's `GRPOTrainer` with reward functions,
which is what `bench/trainer.py` compares against. A reward that raises or is not a finite number
makes its sample invalid (masked like a harness error), never a 0.

A train spec selects them with `tasks.function_tasks`: a built-in set (`BUILTIN_FUNCTION_TASKS`)
or `"package.module:name"`, where `name` is a list of `FunctionTask` or a function returning one
(`load_function_tasks`).
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rl_engine.inference.base import Generation, InferenceEngine, SamplingParams
from rl_engine.sequences import TokenSequence
from rl_engine.spec import AlgorithmSpec
from rl_engine.toy_tasks import TASK_SETS
from rl_engine.trainer import TrainingSample, training_samples


class FunctionTaskError(Exception):
    """`tasks.function_tasks` does not name a usable list of function tasks."""


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
    prompts = prompt_ids(tasks, tokenizer, samples_per_prompt)
    started = time.monotonic()
    generations = engine.generate(prompts, params)
    return score_generations(
        tasks,
        prompts,
        generations,
        samples_per_prompt=samples_per_prompt,
        algorithm=algorithm,
        generate_sec=time.monotonic() - started,
    )


def prompt_ids(tasks: list[FunctionTask], tokenizer: Any, samples_per_prompt: int) -> list[list[int]]:
    """Each task's prompt tokens, repeated `samples_per_prompt` times (prompt-group order)."""
    ids = [tokenizer(task.prompt, add_special_tokens=False)["input_ids"] for task in tasks]
    return [prompt for prompt in ids for _ in range(samples_per_prompt)]


def score_generations(
    tasks: list[FunctionTask],
    prompts: list[list[int]],
    generations: Sequence[Generation],
    *,
    samples_per_prompt: int,
    algorithm: AlgorithmSpec,
    generate_sec: float,
) -> FunctionStep:
    """Score each completion with its task's function and build the trainer samples."""
    sequences: list[TokenSequence | None] = []
    rewards: list[float | None] = []
    for index, generation in enumerate(generations):
        sequence = TokenSequence()
        sequence.extend(prompts[index], generated=False)
        sequence.extend(generation.token_ids or [], generated=True, logprobs=generation.logprobs)
        sequences.append(sequence)
        rewards.append(_score(tasks[index // samples_per_prompt], generation.text))
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


def toy_colour_tasks(task_set: str) -> list[FunctionTask]:
    """The toy bundles' question as function tasks (ChatML prompt, reward 1 when the answer is the colour)."""
    return [
        FunctionTask(
            name=f"colour-of-{name}",
            prompt=(
                f"<|im_start|>user\nWhat colour is {name} ? Answer with one word .<|im_end|>\n"
                "<|im_start|>assistant\n"
            ),
            reward=_ColourReward(colour),
        )
        for name, colour in TASK_SETS[task_set].items()
    ]


@dataclass
class _ColourReward:
    colour: str

    def __call__(self, completion: str) -> float:
        # The same test as the toy bundles' regex criterion.
        return 1.0 if re.fullmatch(rf"\W*{self.colour}\W*", completion) else 0.0


BUILTIN_FUNCTION_TASKS: dict[str, Callable[[], list[FunctionTask]]] = {
    "toy-green": lambda: toy_colour_tasks("green"),
    "toy-colours": lambda: toy_colour_tasks("colours"),
}


def load_function_tasks(name: str) -> list[FunctionTask]:
    """The tasks a spec's `tasks.function_tasks` names, or a FunctionTaskError saying what is wrong."""
    if name in BUILTIN_FUNCTION_TASKS:
        return BUILTIN_FUNCTION_TASKS[name]()
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise FunctionTaskError(
            f"tasks.function_tasks {name!r} is neither a built-in set ({', '.join(BUILTIN_FUNCTION_TASKS)}) "
            "nor 'package.module:name'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise FunctionTaskError(f"tasks.function_tasks: cannot import {module_name!r}: {error}") from error
    if not hasattr(module, attribute):
        raise FunctionTaskError(f"tasks.function_tasks: module {module_name!r} has no {attribute!r}")
    value = getattr(module, attribute)
    if callable(value):
        try:
            value = value()
        except Exception as error:
            raise FunctionTaskError(
                f"tasks.function_tasks: {name}() raised {type(error).__name__}: {error}"
            ) from error
    if not isinstance(value, list | tuple) or not value:
        raise FunctionTaskError(
            f"tasks.function_tasks: {name} must be a non-empty list of FunctionTask (or a function "
            f"returning one), got {type(value).__name__}"
        )
    wrong = [index for index, task in enumerate(value) if not isinstance(task, FunctionTask)]
    if wrong:
        raise FunctionTaskError(
            f"tasks.function_tasks: items {wrong[:5]} of {name} are not FunctionTask instances"
        )
    return list(value)
