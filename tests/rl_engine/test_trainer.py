"""The policy update on a tiny model: masks, gradient accumulation, learning rate, KL, metrics."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from rl_engine.spec import AlgorithmSpec, BatchSpec, OptimizerSpec
from rl_engine.toy_tasks import build_toy_model
from rl_engine.trainer import Trainer, TrainingSample


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_toy_model(tmp_path_factory.mktemp("toy"), hidden_size=32)


@pytest.fixture
def model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def sample(prompt: list[int], answer: list[int], advantage: float, group: int) -> TrainingSample:
    ids = prompt + answer
    mask = [0] * len(prompt) + [1] * len(answer)
    return TrainingSample(ids, mask, [-3.0 if bit else 0.0 for bit in mask], advantage, group)


def batch() -> list[TrainingSample]:
    return [
        sample([1, 7, 8, 9, 16], [22, 2], 1.0, 0),
        sample([1, 7, 8, 9, 16], [24, 2], -1.0, 0),
        sample([1, 7, 8, 9, 17, 10, 11], [23], 0.5, 1),
        sample([1, 7, 8, 9, 17, 10, 11], [25, 26, 2], -0.5, 1),
        sample([1, 7, 8, 9, 18], [21], 0.7, 2),
        sample([1, 7, 8, 9, 18], [20, 2], -0.7, 2),
    ]


def make_trainer(model, **changes) -> Trainer:
    algorithm = AlgorithmSpec(**changes.pop("algorithm", {}))
    optimizer = OptimizerSpec(**{"lr": 1e-2, "weight_decay": 0.0, **changes.pop("optimizer", {})})
    return Trainer(
        model, algorithm=algorithm, optimizer=optimizer, batch=BatchSpec(**changes.pop("batch", {}))
    )


def sequence_logprob(model, item: TrainingSample) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([item.input_ids])).logits[0, :-1].log_softmax(-1)
    targets = torch.tensor(item.input_ids[1:])
    mask = torch.tensor(item.loss_mask[1:], dtype=torch.bool)
    return float(logits.gather(-1, targets[:, None]).squeeze(-1)[mask].sum())


@pytest.mark.parametrize(
    "reduction", ["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean"]
)
def test_micro_batches_accumulate_to_the_same_gradient_as_one_batch(model, reduction):
    grads = []
    for micro in (1, 6):
        copy_ = copy.deepcopy(model)
        make_trainer(
            copy_, algorithm={"loss_reduction": reduction}, batch={"micro_batch_size": micro}
        ).update(batch())
        grads.append(torch.cat([p.grad.flatten() for p in copy_.parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_running_each_groups_prompt_once_trains_exactly_like_the_padded_batch(model, mini_batches):
    """The shared-prefix forward (one prompt pass per group) against plain padded rows."""
    items = batch() + [
        sample([1, 7, 8, 9, 19], [22, 23, 2], 0.4, 3),  # a group of one: nothing to share
        # A group whose answers start alike: only the prompt is shared, never a trained token.
        sample([1, 7, 10], [22, 2], 0.2, 4),
        sample([1, 7, 10], [22, 24, 2], -0.2, 4),
    ]
    outcomes = []
    for share in (True, False):
        copy_ = copy.deepcopy(model)
        trainer = Trainer(
            copy_,
            algorithm=AlgorithmSpec(),
            optimizer=OptimizerSpec(lr=1e-2, weight_decay=0.0),
            batch=BatchSpec(mini_batches=mini_batches),
            share_prefixes=share,
        )
        metrics = trainer.update(items)
        grads = torch.cat([p.grad.flatten() for p in copy_.parameters() if p.grad is not None])
        weights = torch.cat([p.detach().flatten() for p in copy_.parameters()])
        outcomes.append((metrics, grads, weights))
    (shared, shared_grads, shared_weights), (padded, padded_grads, padded_weights) = outcomes
    assert padded_grads.abs().sum() > 0
    assert torch.allclose(shared_grads, padded_grads, atol=1e-5)
    assert torch.allclose(shared_weights, padded_weights, atol=1e-5)
    for name in ("entropy", "ratio_mean", "policy_loss", "clip_ratio"):
        assert shared[name] == pytest.approx(padded[name], abs=1e-5)


def test_a_positive_advantage_makes_the_sampled_answer_more_likely_and_a_negative_one_less(model):
    items = batch()
    before = [sequence_logprob(model, item) for item in items[:2]]
    trainer = make_trainer(model)
    for _ in range(3):
        trainer.update(items)
    after = [sequence_logprob(model, item) for item in items[:2]]
    assert after[0] > before[0] and after[1] < before[1]


def test_a_learning_rate_of_zero_changes_no_weight(model):
    before = copy.deepcopy(model.state_dict())
    metrics = make_trainer(model, optimizer={"lr": 0.0}).update(batch())
    assert metrics["grad_norm"] > 0
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_samples_without_model_tokens_are_left_out(model):
    masked = [
        TrainingSample(s.input_ids, [0] * len(s.input_ids), s.rollout_logprobs, s.advantage, s.group_id)
        for s in batch()
    ]
    before = copy.deepcopy(model.state_dict())
    metrics = make_trainer(model).update(masked)
    assert metrics["tokens"] == 0 and metrics["optimizer_steps"] == 0
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_the_step_metrics_are_reported(model):
    metrics = make_trainer(model, algorithm={"kl_coef": 0.1}).update(batch())
    assert set(metrics) >= {
        "policy_loss",
        "kl",
        "entropy",
        "clip_ratio",
        "grad_norm",
        "lr",
        "tokens",
        "ratio_mean",
    }
    assert metrics["tokens"] == 11  # every answer token of the six samples
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # the reference is the starting policy
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert 0 < metrics["entropy"] <= torch.log(torch.tensor(float(model.config.vocab_size))) + 1e-4


def test_several_mini_batches_and_epochs_use_the_old_policy_and_clip(model):
    trainer = make_trainer(
        model,
        optimizer={"lr": 5e-2, "grad_clip": 0.5},
        batch={"mini_batches": 3, "update_epochs": 2, "micro_batch_size": 2},
    )
    metrics = trainer.update(batch())
    assert metrics["optimizer_steps"] == 6
    assert metrics["ratio_mean"] != pytest.approx(1.0, abs=1e-9)  # later mini-batches see a moved policy
    assert metrics["clip_ratio"] >= 0


@pytest.mark.parametrize("loss", ["ppo_clip", "dppo", "rollout_is"])
def test_every_policy_loss_trains(model, loss):
    metrics = make_trainer(model, algorithm={"policy_loss": loss}).update(batch())
    assert torch.isfinite(torch.tensor(metrics["policy_loss"])) and metrics["grad_norm"] > 0


def test_warm_up_raises_the_learning_rate_step_by_step(model):
    trainer = make_trainer(model, optimizer={"lr": 1e-2, "warmup_steps": 4})
    rates = [trainer.update(batch())["lr"] for _ in range(5)]
    assert rates == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2])


def test_a_sample_with_mismatched_lengths_is_refused():
    with pytest.raises(ValueError, match="one mask bit and one log-prob per token"):
        TrainingSample([1, 2, 3], [0, 1], [0.0, 0.0, 0.0], 1.0, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 autocast is used on CUDA only; no GPU here")
def test_it_trains_under_bf16_autocast_on_cuda(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda()
    trainer = make_trainer(model)
    assert trainer.autocast_dtype == torch.bfloat16
    assert trainer.update(batch())["grad_norm"] > 0


def test_bf16_autocast_can_be_asked_for_on_a_cpu_and_keeps_fp32_master_weights(model):
    trainer = Trainer(
        model,
        algorithm=AlgorithmSpec(),
        optimizer=OptimizerSpec(lr=1e-2, weight_decay=0.0),
        batch=BatchSpec(),
        autocast_dtype=torch.bfloat16,
    )
    before = copy.deepcopy(model.state_dict())
    metrics = trainer.update(batch())
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(before[name], value) for name, value in model.state_dict().items())
