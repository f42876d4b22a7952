"""Single-turn function-reward tasks: one batched generation, rewards from a Python function, and
samples whose mask covers only the completion; a reward that fails is masked, never a 0. A train
spec selects them by built-in name or import path, and `python -m rl_engine train` learns on them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl_engine import spec as spec_module
from rl_engine.function_tasks import (
    BUILTIN_FUNCTION_TASKS,
    FunctionTask,
    FunctionTaskError,
    function_task_step,
    load_function_tasks,
)
from rl_engine.inference import SamplingParams
from rl_engine.inference.hf import HFEngine
from rl_engine.runtime import load_model
from rl_engine.spec import AlgorithmSpec
from rl_engine.toy_tasks import build_toy_model

REPO = Path(__file__).resolve().parents[2]
# For the import-path tests: this module's own task lists.
TASKS = [FunctionTask(name="t", prompt="What colour is grass ?", reward=len)]
NOT_TASKS = ["What colour is grass ?"]


def make_tasks() -> list[FunctionTask]:
    return TASKS * 2


def failing_tasks() -> list[FunctionTask]:
    raise RuntimeError("the reward file is missing")


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


def test_the_spec_offers_exactly_the_builtin_sets():
    assert spec_module.BUILTIN_FUNCTION_TASKS == tuple(BUILTIN_FUNCTION_TASKS)
    tasks = load_function_tasks("toy-colours")
    assert len(tasks) == 6 and tasks[0].prompt.endswith("<|im_start|>assistant\n")
    assert tasks[0].reward("green") == 1.0 and tasks[0].reward("blue") == 0.0


def test_an_import_path_names_a_list_or_a_function_returning_one():
    module = __name__
    assert load_function_tasks(f"{module}:TASKS") == TASKS
    assert load_function_tasks(f"{module}:make_tasks") == TASKS * 2


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_here:TASKS", "cannot import 'no_such_module_here'"),
        (f"{__name__}:MISSING", "has no 'MISSING'"),
        (f"{__name__}:NOT_TASKS", "items [0] of"),
        (f"{__name__}:failing_tasks", "raised RuntimeError: the reward file is missing"),
        (f"{__name__}:REPO", "must be a non-empty list of FunctionTask"),
    ],
)
def test_a_name_that_gives_no_tasks_is_refused_with_the_reason(name, message):
    with pytest.raises(FunctionTaskError, match=re.escape(message)):
        load_function_tasks(name)


def test_the_cli_trains_on_builtin_function_tasks_and_the_reward_rises(tmp_path):
    build_toy_model(tmp_path / "model")
    spec = {
        "kind": "train",
        "model": {"path": str(tmp_path / "model")},
        "tasks": {"function_tasks": "toy-green"},
        "sampling": {"max_new_tokens_per_turn": 1},
        "batch": {"prompts_per_step": 6, "samples_per_prompt": 8, "micro_batch_size": 48},
        "optimizer": {"lr": 5e-3, "weight_decay": 0.0},
        "max_steps": 12,
        "seed": 1,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "rl_engine", "train", str(tmp_path / "spec.json"), "--run-dir", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    steps = [e["payload"] for e in events if e["type"] == "step_metrics"]
    rewards = [step["reward_mean"] for step in steps]
    print("function tasks, reward per step:", [round(r, 3) for r in rewards])
    assert [step["step"] for step in steps] == list(range(1, 13))
    assert rewards[0] <= 0.2 and sum(rewards[-3:]) / 3 >= 0.8
    assert steps[0]["samples_trained"] + 8 * steps[0]["zero_variance_groups"] == 48
    assert events[0]["payload"]["tasks"] == 6 and events[-1]["type"] == "run_finished"
    assert (run_dir / "checkpoints" / "step_000012").is_dir()
