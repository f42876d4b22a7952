"""Single-turn function-reward tasks: one batched generation, rewards from a Python function, and
samples whose mask covers only the completion; a reward that fails is masked, never a 0."""

from __future__ import annotations

import pytest

from rl_engine.function_tasks import FunctionTask, function_task_step
from rl_engine.inference import SamplingParams
from rl_engine.inference.hf import HFEngine
from rl_engine.runtime import load_model
from rl_engine.spec import AlgorithmSpec
from rl_engine.toy_tasks import build_toy_model


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    tokenizer, model = load_model(
        build_toy_model(tmp_path_factory.mktemp("toy") / "model", hidden_size=32), "cpu"
    )
    return HFEngine(model, tokenizer), tokenizer


def broken(text: str) -> float:
    raise ZeroDivisionError("the task's reward code is wrong")


def test_completions_are_scored_by_the_task_function_and_only_their_tokens_are_trained(engine):
    hf, tokenizer = engine
    tasks = [
        FunctionTask(name="length", prompt="What colour is grass ?", reward=lambda text: len(text) / 100),
        FunctionTask(name="broken", prompt="What colour is sky ?", reward=broken),
    ]
    step = function_task_step(
        tasks,
        engine=hf,
        tokenizer=tokenizer,
        params=SamplingParams(temperature=1.0, max_new_tokens=3, seed=0),
        samples_per_prompt=4,
        algorithm=AlgorithmSpec(zero_variance_filter=False, harness_error_masking="sample"),
    )
    assert len(step.rewards) == 8
    assert all(reward is not None for reward in step.rewards[:4]) and step.rewards[4:] == [None] * 4
    assert step.counts["masked_samples"] == 4 and step.counts["masked_groups"] == 1
    assert len(step.samples) == 4 and {sample.group_id for sample in step.samples} == {0}
    prompt_length = len(tokenizer("What colour is grass ?", add_special_tokens=False)["input_ids"])
    for sample in step.samples:
        assert sample.loss_mask[:prompt_length] == [0] * prompt_length
        assert 1 <= sum(sample.loss_mask) <= 3 and all(sample.loss_mask[prompt_length:])
    assert step.completion_tokens >= 8
