"""Checkpoints: weights, optimiser, RNG states and driver info come back; writes are atomic."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_engine.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from rl_engine.spec import AlgorithmSpec, BatchSpec, OptimizerSpec
from rl_engine.toy_tasks import build_toy_model
from rl_engine.trainer import Trainer, TrainingSample


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_toy_model(tmp_path_factory.mktemp("toy"), hidden_size=32)


def trained(model_dir) -> tuple[torch.nn.Module, Trainer]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = Trainer(model, algorithm=AlgorithmSpec(), optimizer=OptimizerSpec(lr=1e-2), batch=BatchSpec())
    sample = TrainingSample([1, 7, 8, 16, 22], [0, 0, 0, 0, 1], [0.0] * 4 + [-3.0], 1.0, 0)
    other = TrainingSample([1, 7, 8, 16, 23], [0, 0, 0, 0, 1], [0.0] * 4 + [-3.0], -1.0, 0)
    trainer.update([sample, other])
    return model, trainer


def test_a_checkpoint_restores_weights_optimiser_rng_and_info(model_dir, tmp_path):
    model, trainer = trained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    path = save_checkpoint(
        tmp_path, 3, model=model, tokenizer=tokenizer, trainer_state=trainer.state(), info={"data_cursor": 18}
    )
    expected_draws = (random.random(), torch.rand(3))

    fresh = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    fresh_trainer = Trainer(
        fresh, algorithm=AlgorithmSpec(), optimizer=OptimizerSpec(lr=1e-2), batch=BatchSpec()
    )
    state, info = load_checkpoint(latest_checkpoint(tmp_path), model=fresh)
    fresh_trainer.load_state(state)

    assert path.name == "step_000003" and info == {"data_cursor": 18, "step": 3}
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True)
    )
    moments = fresh_trainer.optimizer.state_dict()["state"]
    assert moments and all(
        torch.equal(moments[k]["exp_avg"], v["exp_avg"])
        for k, v in trainer.optimizer.state_dict()["state"].items()
    )
    assert (random.random(), torch.rand(3)) == (expected_draws[0], pytest.approx(expected_draws[1]))
    assert AutoModelForCausalLM.from_pretrained(path) is not None  # a checkpoint is a model folder too


def test_only_the_last_checkpoints_are_kept(model_dir, tmp_path):
    model, trainer = trained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for step in (1, 2, 3):
        save_checkpoint(
            tmp_path,
            step,
            model=model,
            tokenizer=tokenizer,
            trainer_state=trainer.state(),
            info={},
            keep_last=2,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002", "step_000003"]


def test_a_failed_write_leaves_the_previous_checkpoint_as_the_latest(model_dir, tmp_path):
    model, trainer = trained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    save_checkpoint(tmp_path, 1, model=model, tokenizer=tokenizer, trainer_state=trainer.state(), info={})

    class BrokenTokenizer:
        def save_pretrained(self, folder):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(
            tmp_path, 2, model=model, tokenizer=BrokenTokenizer(), trainer_state=trainer.state(), info={}
        )
    assert latest_checkpoint(tmp_path).name == "step_000001"
    assert [p.name for p in tmp_path.iterdir()] == ["step_000001"]
