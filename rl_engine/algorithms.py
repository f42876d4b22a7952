"""The GRPO family as plain functions over tensors: what the trainer optimises, formula by formula.

Notation. A step rolls out each of G prompts n_g times; sample i has a scalar reward r_i, a group
id g(i) and a validity bit v_i (0 for a harness error: the platform failed, the sample carries no
reward). Token t of sample i has the current policy's log-prob log π_θ, the old policy's log π_old
(the weights that generated the batch, recomputed by the trainer), the rollout engine's own
log π_rollout (vLLM / transformers, may differ numerically from π_old), the frozen reference's
log π_ref, and a loss mask m_it (1 only on the model's own tokens: never prompt, tool-result or
padding tokens, never a masked sample). ℓ_it is a per-token loss, A_i an advantage.

Advantages (outcome rewards, one per sample; computed over the *valid* members of each group,
V_g = {i : g(i) = g, v_i = 1}, k_g = |V_g|; an invalid sample gets A_i = 0 and is not part of any
mean or std; group sizes may differ):
  grpo      A_i = (r_i − mean_{V_g} r) / (std_{V_g} r + ε)     std with Bessel's correction (k−1)
  grpo, norm_by_std=False
            A_i = r_i − mean_{V_g} r                            (Dr. GRPO; the recipe's choice)
  rloo      A_i = (r_i − mean_{V_g} r) · k_g / (k_g − 1)        = r_i − mean of the *other* valid samples
  A group with k_g < 2 has no baseline: its samples get A_i = 0.

Policy losses (per token; r_t = exp(log π_θ − log π_x) with the log-ratio clamped to ±20 before exp
so a stale token cannot overflow; sg = stop-gradient):
  ppo_clip    x = old.   ℓ = −min(r_t·A, clip(r_t, 1−ε_low, 1+ε_high)·A)
              dual clip c > 1 (optional): where A < 0, ℓ = min(ℓ, −c·A)   (bounds the loss of a
              negative-advantage token whose ratio exploded)
              "clipped" = the clipped term was the smaller one: (−clip(r)·A) > (−r·A).
  dppo        Binary-TV DPPO (arXiv 2602.04879, eq. 13; SkyRL's `dppo` with dppo_type=binary_tv):
              x = rollout when its log-probs are given, else old.  Δ_t = π_θ(a_t) − π_x(a_t) (probabilities,
              no gradient).  M_t = 0 if (A > 0 and Δ_t > δ_high) or (A < 0 and −Δ_t > δ_low), else 1.
              ℓ = −M_t·r_t·A.   A token whose probability already moved more than δ in the direction
              its advantage pushes stops contributing; unlike PPO the trust region is measured in
              probability mass (total variation), not in ratio, so rare tokens are not over-clipped.
              "clipped" = M_t = 0.
  rollout_is  x = rollout (required).  w_t = sg(min(r_t, C)) (truncated importance sampling, cap C).
              ℓ = −w_t·A·log π_θ(a_t)   → ∇ℓ = −min(r_t, C)·A·∇log π_θ: the policy gradient corrected
              for the rollout engine's mismatch, the weight capped at C.  Needs no old log-probs.
              SkyRL's `rollout_is` zeroes weights outside (1−ε_low, 1+ε_high) instead; we truncate at C
              as DESIGN.md asks.  "clipped" = r_t > C.

KL to the reference (per token, d = log π_θ − log π_ref; Schulman's estimators), added to ℓ as
β·kl before the reduction:
  k1 = d        k2 = d²/2        k3 = exp(−d) + d − 1   (−d clamped to ±20 before exp)

Loss reductions (scalar from ℓ and m; every reduction is Σ_it w_it·ℓ_it with weights that depend
only on the mask, the group ids and the constant L, so a trainer can compute the weights once per
mini-batch and accumulate micro-batch gradients exactly).  A sequence "takes part" when it has at
least one unmasked token; S = number of sequences taking part, P = number of groups taking part.
A sample masked out entirely (a harness error) is therefore not counted in S or P: it took no part.
  token_mean               Σ mℓ / Σ m                                  over the whole mini-batch
  sequence_mean            (1/S) Σ_i  Σ_t m_it ℓ_it / Σ_t m_it
  seq_mean_token_sum_norm  Σ mℓ / (S·L),  L = max_len (a constant; Dr. GRPO)
  prompt_mean              (1/P) Σ_g  Σ_{i∈g,t} m ℓ / Σ_{i∈g,t} m      (the recipe's best)
A mini-batch with no unmasked token reduces to 0, never NaN.

Filters and masks (boolean, one per sample):
  harness_error_validity   policy "sample": v_i = not error_i;  policy "group": v_i = 0 for every
                           sample of a group that has any harness error.
  zero_variance_keep       keep_i = v_i and (max_{V_g} r − min_{V_g} r > tol): a group whose valid
                           rewards are all equal (or that has < 2 valid samples) gives no signal.

Simplifications: outcome rewards only (no per-token rewards, no critic / GAE); a single sample's
advantage is constant over its tokens; the loss is a sum over tokens with no length penalty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeVar

import torch
from torch import Tensor

LOG_RATIO_LIMIT = 20.0
T = TypeVar("T")


# ----------------------------------------------------------------------------------------------
# Groups


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index 0..G-1 per sample (any integer ids, any order, unequal sizes)."""
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be one id per sample (1-D), got shape {tuple(group_ids.shape)}")
    unique, index = torch.unique(group_ids, return_inverse=True)
    return index, unique.numel()


def _validity(valid: Tensor | None, like: Tensor) -> Tensor:
    if valid is None:
        return torch.ones_like(like, dtype=torch.bool)
    if valid.shape != like.shape:
        raise ValueError(
            f"valid must have one entry per sample {tuple(like.shape)}, got {tuple(valid.shape)}"
        )
    return valid.to(torch.bool)


def _check_samples(rewards: Tensor, group_ids: Tensor) -> None:
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must both be 1-D with one entry per sample, "
            f"got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )


class _GroupStats(NamedTuple):
    count: Tensor  # valid samples in the sample's group
    mean: Tensor  # mean valid reward of the sample's group (0 where count is 0)
    std: Tensor  # Bessel-corrected std of the sample's group (0 where count < 2)


def _group_stats(rewards: Tensor, group_ids: Tensor, valid: Tensor) -> _GroupStats:
    index, groups = _group_index(group_ids)
    weights = valid.to(rewards.dtype)
    values = torch.where(valid, rewards, torch.zeros_like(rewards))
    count = torch.zeros(groups, dtype=rewards.dtype).index_add_(0, index, weights)
    total = torch.zeros(groups, dtype=rewards.dtype).index_add_(0, index, values)
    mean = total / count.clamp(min=1)
    squares = torch.where(valid, (rewards - mean[index]) ** 2, torch.zeros_like(rewards))
    sum_squares = torch.zeros(groups, dtype=rewards.dtype).index_add_(0, index, squares)
    std = torch.sqrt(sum_squares / (count - 1).clamp(min=1))
    return _GroupStats(count[index], mean[index], std[index])


# ----------------------------------------------------------------------------------------------
# Advantages


def grpo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    valid: Tensor | None = None,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> Tensor:
    """(r − mean)/(std + ε) within each group's valid samples; r − mean without std normalisation."""
    _check_samples(rewards, group_ids)
    valid = _validity(valid, rewards)
    stats = _group_stats(rewards, group_ids, valid)
    advantages = rewards - stats.mean
    if norm_by_std:
        advantages = advantages / (stats.std + epsilon)
    return torch.where(valid & (stats.count >= 2), advantages, torch.zeros_like(advantages))


def rloo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    valid: Tensor | None = None,
    *,
    norm_by_std: bool = False,
    epsilon: float = 1e-6,
) -> Tensor:
    """(r − mean)·k/(k − 1) over each group's k valid samples: the leave-one-out baseline.

    `norm_by_std` and `epsilon` belong to GRPO; they are accepted so every estimator has one
    signature, and refused when asked for, since RLOO's baseline is never std-scaled.
    """
    del epsilon
    if norm_by_std:
        raise ValueError("rloo does not normalise by the group's std; set norm_by_std=False")
    _check_samples(rewards, group_ids)
    valid = _validity(valid, rewards)
    stats = _group_stats(rewards, group_ids, valid)
    advantages = (rewards - stats.mean) * stats.count / (stats.count - 1).clamp(min=1)
    return torch.where(valid & (stats.count >= 2), advantages, torch.zeros_like(advantages))


AdvantageFn = Callable[..., Tensor]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {"grpo": grpo_advantages, "rloo": rloo_advantages}


# ----------------------------------------------------------------------------------------------
# Harness-error masking and the zero-variance filter


def harness_error_validity(
    group_ids: Tensor, harness_error: Tensor, *, policy: Literal["group", "sample"]
) -> Tensor:
    """Which samples take part: `sample` drops only the failed ones, `group` drops their whole group."""
    if harness_error.shape != group_ids.shape:
        raise ValueError(
            f"harness_error must have one entry per sample {tuple(group_ids.shape)}, got {tuple(harness_error.shape)}"
        )
    failed = harness_error.to(torch.bool)
    if policy == "sample":
        return ~failed
    if policy == "group":
        index, groups = _group_index(group_ids)
        failures = torch.zeros(groups, dtype=torch.long).index_add_(0, index, failed.long())
        return failures[index] == 0
    raise ValueError(f"unknown harness-error masking policy {policy!r}; known: group, sample")


def zero_variance_keep(
    rewards: Tensor, group_ids: Tensor, valid: Tensor | None = None, *, tol: float = 1e-6
) -> Tensor:
    """Valid samples of groups whose valid rewards differ by more than `tol` (max − min)."""
    _check_samples(rewards, group_ids)
    valid = _validity(valid, rewards)
    index, groups = _group_index(group_ids)
    high = torch.full((groups,), -torch.inf, dtype=rewards.dtype)
    low = torch.full((groups,), torch.inf, dtype=rewards.dtype)
    high = high.scatter_reduce(0, index[valid], rewards[valid], reduce="amax")
    low = low.scatter_reduce(0, index[valid], rewards[valid], reduce="amin")
    spread = high - low  # -inf for a group without valid samples
    return valid & (spread[index] > tol)


# ----------------------------------------------------------------------------------------------
# Policy losses


@dataclass(frozen=True)
class PolicyLossParams:
    eps_clip_low: float = 0.2
    eps_clip_high: float = 0.2
    dual_clip: float | None = None  # c > 1; None = off
    dppo_delta_low: float = 0.15
    dppo_delta_high: float = 0.15
    rollout_is_cap: float = 2.0


class PolicyLossOutput(NamedTuple):
    loss: Tensor  # per token, (B, T); reduce it with a loss reduction
    clipped: Tensor  # per token, bool: the loss's own trust region was active there


def _ratio(log_probs: Tensor, behaviour_log_probs: Tensor) -> Tensor:
    return torch.exp((log_probs - behaviour_log_probs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def _per_token(advantages: Tensor, log_probs: Tensor) -> Tensor:
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.to(log_probs.dtype).expand_as(log_probs)


def ppo_clip_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    rollout_log_probs: Tensor | None = None,
    params: PolicyLossParams = PolicyLossParams(),
) -> PolicyLossOutput:
    advantages = _per_token(advantages, log_probs)
    ratio = _ratio(log_probs, old_log_probs)
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1 - params.eps_clip_low, 1 + params.eps_clip_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    if params.dual_clip is not None:
        if params.dual_clip <= 1:
            raise ValueError(f"dual_clip must be greater than 1, got {params.dual_clip}")
        loss = torch.where(advantages < 0, torch.minimum(loss, -params.dual_clip * advantages), loss)
    return PolicyLossOutput(loss, clipped > unclipped)


def dppo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    rollout_log_probs: Tensor | None = None,
    params: PolicyLossParams = PolicyLossParams(),
) -> PolicyLossOutput:
    advantages = _per_token(advantages, log_probs)
    behaviour = rollout_log_probs if rollout_log_probs is not None else old_log_probs
    ratio = _ratio(log_probs, behaviour)
    with torch.no_grad():
        moved = torch.exp(log_probs) - torch.exp(behaviour)
        outside = ((advantages > 0) & (moved > params.dppo_delta_high)) | (
            (advantages < 0) & (-moved > params.dppo_delta_low)
        )
    loss = -torch.where(outside, torch.zeros_like(ratio), ratio * advantages)
    return PolicyLossOutput(loss, outside)


def rollout_is_loss(
    log_probs: Tensor,
    old_log_probs: Tensor | None,
    advantages: Tensor,
    rollout_log_probs: Tensor | None = None,
    params: PolicyLossParams = PolicyLossParams(),
) -> PolicyLossOutput:
    if rollout_log_probs is None:
        raise ValueError("rollout_is needs the rollout engine's log-probs (rollout_log_probs)")
    advantages = _per_token(advantages, log_probs)
    with torch.no_grad():
        ratio = _ratio(log_probs, rollout_log_probs)
        weight = ratio.clamp(max=params.rollout_is_cap)
    return PolicyLossOutput(-weight * advantages * log_probs, ratio > params.rollout_is_cap)


PolicyLossFn = Callable[..., PolicyLossOutput]
POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "ppo_clip": ppo_clip_loss,
    "dppo": dppo_loss,
    "rollout_is": rollout_is_loss,
}
# The trainer may skip the old-policy forward pass for these.
LOSSES_WITHOUT_OLD_LOG_PROBS = frozenset({"rollout_is"})


# ----------------------------------------------------------------------------------------------
# KL to the reference policy


def kl_k1(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    return log_probs - ref_log_probs


def kl_k2(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    return 0.5 * (log_probs - ref_log_probs) ** 2


def kl_k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    reverse = (ref_log_probs - log_probs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.exp(reverse) - reverse - 1


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


# ----------------------------------------------------------------------------------------------
# Loss reductions, as per-token weights


def _float_mask(mask: Tensor) -> Tensor:
    if mask.dim() != 2:
        raise ValueError(f"the loss mask must be (sequences, tokens), got shape {tuple(mask.shape)}")
    return mask.to(torch.float32) if not mask.is_floating_point() else mask


def token_mean_weights(mask: Tensor, group_ids: Tensor | None = None, max_len: int | None = None) -> Tensor:
    m = _float_mask(mask)
    return m / m.sum().clamp(min=1)


def sequence_mean_weights(
    mask: Tensor, group_ids: Tensor | None = None, max_len: int | None = None
) -> Tensor:
    m = _float_mask(mask)
    tokens = m.sum(dim=1, keepdim=True)
    taking_part = (tokens > 0).sum().clamp(min=1)
    return m / (tokens.clamp(min=1) * taking_part)


def seq_mean_token_sum_norm_weights(
    mask: Tensor, group_ids: Tensor | None = None, max_len: int | None = None
) -> Tensor:
    m = _float_mask(mask)
    length = max_len if max_len is not None else m.shape[1]
    if length < 1:
        raise ValueError(f"max_len must be at least 1, got {length}")
    taking_part = (m.sum(dim=1) > 0).sum().clamp(min=1)
    return m / (taking_part * length)


def prompt_mean_weights(mask: Tensor, group_ids: Tensor | None = None, max_len: int | None = None) -> Tensor:
    if group_ids is None:
        raise ValueError("prompt_mean needs the group id (prompt) of every sequence")
    m = _float_mask(mask)
    if group_ids.shape != (m.shape[0],):
        raise ValueError(
            f"group_ids must have one id per sequence ({m.shape[0]}), got {tuple(group_ids.shape)}"
        )
    index, groups = _group_index(group_ids)
    group_tokens = torch.zeros(groups, dtype=m.dtype).index_add_(0, index, m.sum(dim=1))
    taking_part = (group_tokens > 0).sum().clamp(min=1)
    return m / (group_tokens.clamp(min=1)[index].unsqueeze(1) * taking_part)


ReductionWeightsFn = Callable[[Tensor, Tensor | None, int | None], Tensor]
LOSS_REDUCTIONS: dict[str, ReductionWeightsFn] = {
    "token_mean": token_mean_weights,
    "sequence_mean": sequence_mean_weights,
    "seq_mean_token_sum_norm": seq_mean_token_sum_norm_weights,
    "prompt_mean": prompt_mean_weights,
}


def reduce_loss(
    name: str,
    loss: Tensor,
    mask: Tensor,
    group_ids: Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Σ w·ℓ with the named reduction's weights (masked tokens have weight 0)."""
    weights = registry_get(LOSS_REDUCTIONS, name, "loss reduction")(mask, group_ids, max_len)
    return (weights.to(loss.dtype) * torch.where(weights > 0, loss, torch.zeros_like(loss))).sum()


def registry_get(registry: dict[str, T], name: str, what: str) -> T:
    """Look a name up, or fail naming the known ones."""
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(registry)}") from None
