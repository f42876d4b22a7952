"""The policy update: old / reference log-probs, masked per-token losses, mini-batches with gradient
accumulation, AdamW with warm-up, weight decay and gradient clipping, bf16 autocast on CUDA.

Each `TrainingSample` is one rollout as a single token sequence (`rl_engine.sequences`) whose loss
mask is 1 only on the model's own tokens. Prompt tokens, tool results, padding and every token of
a masked sample (harness error, filtered group: the driver zeroes their mask) get weight 0, so
they receive no gradient. Token t's log-prob comes from the logits at t − 1, divided by the
sampling temperature so it describes the distribution the engine sampled from.

One update = `update_epochs` passes over the samples; each pass splits the prompt groups into
`mini_batches` (a group is never split: advantages and `prompt_mean` are per group), and each
mini-batch is one optimiser step over micro-batches of `micro_batch_size` sequences. The loss
reduction's per-token weights are computed once per mini-batch (algorithms.py), so the summed
micro-batch gradients equal the mini-batch loss's gradient exactly. With a single optimiser step
per update the old policy *is* the current one, so its log-probs are the current ones detached
(no extra forward pass); otherwise they are computed before the first step.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rl_engine.algorithms import (
    KL_ESTIMATORS,
    LOSS_REDUCTIONS,
    LOSSES_WITHOUT_OLD_LOG_PROBS,
    POLICY_LOSSES,
    PolicyLossParams,
    registry_get,
)
from rl_engine.metrics import MetricMeans
from rl_engine.spec import AlgorithmSpec, BatchSpec, OptimizerSpec


@dataclass
class TrainingSample:
    input_ids: list[int]
    loss_mask: list[int]  # 1 on the model's own tokens
    rollout_logprobs: list[float]  # the engine's log-probs on those tokens (0 elsewhere)
    advantage: float
    group_id: int

    def __post_init__(self) -> None:
        if not (len(self.input_ids) == len(self.loss_mask) == len(self.rollout_logprobs)):
            raise ValueError(
                f"a training sample needs one mask bit and one log-prob per token: {len(self.input_ids)} tokens, "
                f"{len(self.loss_mask)} mask bits, {len(self.rollout_logprobs)} log-probs"
            )


@dataclass
class _Batch:
    """Padded, target-aligned tensors: column t is about token t + 1 of the sequence."""

    input_ids: Tensor  # (B, T)
    attention_mask: Tensor  # (B, T)
    targets: Tensor  # (B, T-1)
    mask: Tensor  # (B, T-1) float
    rollout_logprobs: Tensor  # (B, T-1)
    advantages: Tensor  # (B,)
    group_ids: Tensor  # (B,)


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        *,
        algorithm: AlgorithmSpec,
        optimizer: OptimizerSpec,
        batch: BatchSpec,
        temperature: float = 1.0,
        pad_token_id: int = 0,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.algorithm = algorithm
        self.batch = batch
        self.temperature = temperature if temperature > 0 else 1.0
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.loss_fn = registry_get(POLICY_LOSSES, algorithm.policy_loss, "policy loss")
        self.reduction = registry_get(LOSS_REDUCTIONS, algorithm.loss_reduction, "loss reduction")
        self.kl_fn = registry_get(KL_ESTIMATORS, algorithm.kl_estimator, "KL estimator")
        self.loss_params = PolicyLossParams(
            eps_clip_low=algorithm.eps_clip_low,
            eps_clip_high=algorithm.eps_clip_high,
            dual_clip=algorithm.dual_clip,
            dppo_delta_low=algorithm.dppo_delta_low,
            dppo_delta_high=algorithm.dppo_delta_high,
            rollout_is_cap=algorithm.rollout_is_cap,
        )
        self.grad_clip = optimizer.grad_clip
        self.optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=optimizer.lr,
            betas=optimizer.betas,
            eps=optimizer.eps,
            weight_decay=optimizer.weight_decay,
        )
        warmup = optimizer.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        # The frozen reference exists only when the KL term is on.
        self.reference = copy.deepcopy(model).eval().requires_grad_(False) if algorithm.kl_coef > 0 else None
        self.rng = random.Random(seed)
        self.autocast_dtype = torch.bfloat16 if self.device.type == "cuda" else None

    # ------------------------------------------------------------------------------------------

    def update(self, samples: list[TrainingSample]) -> dict[str, float]:
        """One policy update over a step's samples; returns the step's trainer metrics."""
        samples = [sample for sample in samples if any(sample.loss_mask[1:])]
        means = MetricMeans()
        grad_norms: list[float] = []
        tokens = sum(sum(sample.loss_mask[1:]) for sample in samples)
        if not samples:
            return {"tokens": 0.0, "lr": self.current_lr(), "optimizer_steps": 0.0}
        groups = sorted({sample.group_id for sample in samples})
        n_mini = min(self.batch.mini_batches, len(groups))
        single_step = self.batch.update_epochs == 1 and n_mini == 1
        needs_old = self.algorithm.policy_loss not in LOSSES_WITHOUT_OLD_LOG_PROBS and not single_step
        old = (
            {id(s): lp for s, lp in zip(samples, self._score(samples, self.model), strict=True)}
            if needs_old
            else {}
        )
        ref = (
            {id(s): lp for s, lp in zip(samples, self._score(samples, self.reference), strict=True)}
            if self.reference
            else {}
        )
        self.model.train()
        for _ in range(self.batch.update_epochs):
            order = list(groups)
            self.rng.shuffle(order)
            for part in range(n_mini):
                chosen = set(order[part::n_mini])
                mini = [sample for sample in samples if sample.group_id in chosen]
                grad_norms.append(self._optimizer_step(mini, old, ref, means))
        result = means.means()
        result.update(
            grad_norm=sum(grad_norms) / len(grad_norms),
            lr=self.current_lr(),
            tokens=float(tokens),
            optimizer_steps=float(len(grad_norms)),
        )
        self.scheduler.step()
        return result

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _optimizer_step(
        self,
        mini: list[TrainingSample],
        old: dict[int, Tensor],
        ref: dict[int, Tensor],
        means: MetricMeans,
    ) -> float:
        mini = sorted(mini, key=lambda sample: -len(sample.input_ids))  # less padding per micro-batch
        whole = self._collate(mini)
        max_len = self.algorithm.max_len_for_norm or whole.mask.shape[1]
        # The reductions build per-group tensors on the CPU; the weights then move to the device.
        weights = self.reduction(whole.mask.cpu(), whole.group_ids, max_len)
        self.optimizer.zero_grad(set_to_none=True)
        size = self.batch.micro_batch_size
        step_loss = 0.0
        for start in range(0, len(mini), size):
            micro = mini[start : start + size]
            batch = self._collate(micro)
            width = batch.mask.shape[1]
            micro_weights = weights[start : start + len(micro), :width].to(self.device)
            log_probs, entropy = self._log_probs(self.model, batch, with_entropy=True)
            old_lp = torch.stack([_pad(old[id(s)], width) for s in micro]) if old else log_probs.detach()
            loss_out = self.loss_fn(
                log_probs, old_lp, batch.advantages, batch.rollout_logprobs, params=self.loss_params
            )
            per_token = loss_out.loss
            kl = None
            if ref:
                ref_lp = torch.stack([_pad(ref[id(s)], width) for s in micro])
                kl = self.kl_fn(log_probs, ref_lp)
                per_token = per_token + self.algorithm.kl_coef * kl
            weighted = micro_weights * torch.where(micro_weights > 0, per_token, torch.zeros_like(per_token))
            loss = weighted.sum()
            loss.backward()
            step_loss += float(loss.detach())
            mask = batch.mask
            count = float(mask.sum())
            if count:
                means.add(
                    {
                        "entropy": float((entropy * mask).sum()) / count,
                        "clip_ratio": float((loss_out.clipped.float() * mask).sum()) / count,
                        "kl": float((kl.detach() * mask).sum()) / count if kl is not None else None,
                        "ratio_mean": float((torch.exp(log_probs.detach() - old_lp) * mask).sum()) / count,
                    },
                    weight=count,
                )
        means.add({"policy_loss": step_loss})
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.grad_clip if self.grad_clip is not None else math.inf
        )
        self.optimizer.step()
        return float(grad_norm)

    def _log_probs(
        self, model: torch.nn.Module, batch: _Batch, *, with_entropy: bool
    ) -> tuple[Tensor, Tensor | None]:
        with torch.autocast(
            self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None
        ):
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
        logits = logits.float() / self.temperature
        log_norm = torch.logsumexp(logits, dim=-1)
        log_probs = logits.gather(-1, batch.targets[..., None]).squeeze(-1) - log_norm
        entropy = None
        if with_entropy:
            with torch.no_grad():
                probs = torch.softmax(logits, dim=-1)
                entropy = log_norm - (probs * logits).sum(-1)
        return log_probs, entropy

    @torch.no_grad()
    def _score(self, samples: list[TrainingSample], model: torch.nn.Module) -> list[Tensor]:
        """Per-token log-probs of each sample (target-aligned, unpadded) under a frozen view of `model`."""
        model.eval()
        scored: list[Tensor] = []
        size = self.batch.micro_batch_size
        for start in range(0, len(samples), size):
            micro = samples[start : start + size]
            batch = self._collate(micro)
            log_probs, _ = self._log_probs(model, batch, with_entropy=False)
            scored.extend(log_probs[row, : len(s.input_ids) - 1].detach() for row, s in enumerate(micro))
        return scored

    def _collate(self, samples: list[TrainingSample]) -> _Batch:
        width = max(len(sample.input_ids) for sample in samples)
        rows = len(samples)
        input_ids = torch.full((rows, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((rows, width), dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.float32)
        rollout = torch.zeros((rows, width), dtype=torch.float32)
        for row, sample in enumerate(samples):
            length = len(sample.input_ids)
            input_ids[row, :length] = torch.tensor(sample.input_ids)
            attention[row, :length] = 1
            mask[row, :length] = torch.tensor(sample.loss_mask, dtype=torch.float32)
            rollout[row, :length] = torch.tensor(sample.rollout_logprobs, dtype=torch.float32)
        device = self.device
        return _Batch(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            targets=input_ids[:, 1:].to(device),
            mask=mask[:, 1:].to(device),
            rollout_logprobs=rollout[:, 1:].to(device),
            advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
            group_ids=torch.tensor([s.group_id for s in samples], dtype=torch.long),
        )

    def state(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "trainer_rng": self.rng.getstate(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.rng.setstate(state["trainer_rng"])


def _pad(values: Tensor, width: int) -> Tensor:
    return torch.nn.functional.pad(values, (0, width - values.shape[0]))
