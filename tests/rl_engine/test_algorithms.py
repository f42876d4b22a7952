"""Every formula of rl_engine.algorithms against values worked out by hand (the arithmetic is in
the comments), and the quantities TRL also defines against TRL's own GRPO code on the same inputs."""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from rl_engine.algorithms import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_REDUCTIONS,
    POLICY_LOSSES,
    PolicyLossParams,
    dppo_loss,
    grpo_advantages,
    harness_error_validity,
    kl_k1,
    kl_k2,
    kl_k3,
    ppo_clip_loss,
    reduce_loss,
    registry_get,
    rloo_advantages,
    rollout_is_loss,
    zero_variance_keep,
)

LN = math.log


def close(actual: torch.Tensor, expected: list | float, tol: float = 1e-5) -> None:
    expected_tensor = torch.tensor(expected, dtype=actual.dtype)
    assert torch.allclose(actual, expected_tensor, atol=tol, rtol=0), f"{actual.tolist()} != {expected}"


# ---------------------------------------------------------------------------------------------
# Advantages. Groups are interleaved and of unequal size; sample 8 is a harness error (no reward).
#   group 7: r = 1, 0, 1, 0      mean 0.5, Bessel std = sqrt(4·0.25/3) = 0.5773503
#   group 3: r = 1.0, 0.5, 0.0   mean 0.5, Bessel std = sqrt((0.25+0+0.25)/2) = 0.5
#   group 5: r = 0.9, NaN (masked), 0.3   valid k=2, mean 0.6, std = sqrt((0.09+0.09)/1) = 0.4242641
#   group 9: r = 0.7 alone       no baseline → 0
REWARDS = torch.tensor([1.0, 1.0, 0.9, 0.0, 0.5, 1.0, 0.0, 0.0, float("nan"), 0.3, 0.7])
GROUPS = torch.tensor([7, 3, 5, 7, 3, 7, 3, 7, 5, 5, 9])
VALID = torch.tensor([True] * 8 + [False] + [True, True])


class TestAdvantages:
    def test_grpo_divides_by_the_group_std_of_valid_samples_only(self):
        advantages = grpo_advantages(REWARDS, GROUPS, VALID, epsilon=0.0)
        g7 = 0.5 / 0.5773503  # 0.8660254
        g5 = 0.3 / 0.4242641  # 0.7071068
        close(advantages, [g7, 1.0, g5, -g7, 0.0, g7, -1.0, -g7, 0.0, -g5, 0.0])

    def test_grpo_epsilon_is_added_to_the_std(self):
        advantages = grpo_advantages(REWARDS, GROUPS, VALID, epsilon=0.5)
        # group 3: (1.0 − 0.5)/(0.5 + 0.5) = 0.5
        close(advantages[1], 0.5)

    def test_grpo_without_std_normalisation_is_reward_minus_group_mean(self):
        advantages = grpo_advantages(REWARDS, GROUPS, VALID, norm_by_std=False)
        close(advantages, [0.5, 0.5, 0.3, -0.5, 0.0, 0.5, -0.5, -0.5, 0.0, -0.3, 0.0])

    def test_rloo_scales_by_k_over_k_minus_one(self):
        advantages = rloo_advantages(REWARDS, GROUPS, VALID)
        # group 7: ±0.5·4/3 = ±0.6666667 (= 1 − mean(0, 1, 0)); group 3: ±0.5·3/2 = ±0.75, 0·1.5 = 0
        # group 5: ±0.3·2/1 = ±0.6 (= 0.9 − 0.3); the masked sample and the lone sample: 0
        g7 = 2 / 3
        close(advantages, [g7, 0.75, 0.6, -g7, 0.0, g7, -0.75, -g7, 0.0, -0.6, 0.0])

    def test_a_masked_sample_gets_zero_and_does_not_move_its_groups_baseline(self):
        with_failure = grpo_advantages(REWARDS, GROUPS, VALID, norm_by_std=False)
        without = grpo_advantages(REWARDS[VALID], GROUPS[VALID], norm_by_std=False)
        assert with_failure[8] == 0.0
        close(with_failure[VALID], without.tolist())

    def test_all_samples_are_valid_when_no_mask_is_given(self):
        advantages = grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), norm_by_std=False)
        close(advantages, [0.5, -0.5])

    def test_rloo_refuses_std_normalisation(self):
        with pytest.raises(ValueError, match="rloo does not normalise"):
            rloo_advantages(REWARDS, GROUPS, VALID, norm_by_std=True)

    def test_it_refuses_rewards_and_groups_of_different_lengths(self):
        with pytest.raises(ValueError, match="one entry per sample"):
            grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 1]))

    def test_the_registry_names_the_estimators(self):
        assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "rloo"}
        with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'; known: grpo, rloo"):
            registry_get(ADVANTAGE_ESTIMATORS, "ppo", "advantage estimator")


# ---------------------------------------------------------------------------------------------
# Harness-error masking and the zero-variance filter


class TestMasksAndFilters:
    GROUP_IDS = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    FAILED = torch.tensor([False, True, False, False, False, False, True])

    def test_sample_policy_masks_only_the_failed_samples(self):
        valid = harness_error_validity(self.GROUP_IDS, self.FAILED, policy="sample")
        assert valid.tolist() == [True, False, True, True, True, True, False]

    def test_group_policy_masks_every_sample_of_a_group_with_a_failure(self):
        valid = harness_error_validity(self.GROUP_IDS, self.FAILED, policy="group")
        assert valid.tolist() == [False, False, False, True, True, False, False]

    def test_an_unknown_masking_policy_is_refused(self):
        with pytest.raises(ValueError, match="known: group, sample"):
            harness_error_validity(self.GROUP_IDS, self.FAILED, policy="task")

    def test_zero_variance_filter_keeps_exactly_the_groups_with_a_reward_spread(self):
        rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.5, float("nan"), 0.5, 1.0, 0.0, 0.2, 0.2000001])
        groups = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4])
        valid = torch.tensor([True] * 6 + [False] + [True, True, False, True, True])
        # group 0: all 1 → dropped; group 1: 0 vs 1 → kept; group 2: 0.5, 0.5 (+ a masked one) → dropped;
        # group 3: one valid sample → dropped; group 4: spread 1e-7 ≤ tol 1e-6 → dropped
        keep = zero_variance_keep(rewards, groups, valid, tol=1e-6)
        assert keep.tolist() == [False, False, False, True, True] + [False] * 7

    def test_the_zero_variance_filter_never_keeps_a_masked_sample(self):
        keep = zero_variance_keep(
            torch.tensor([0.0, 1.0, 0.5]), torch.tensor([0, 0, 0]), torch.tensor([1, 1, 0])
        )
        assert keep.tolist() == [True, True, False]


# ---------------------------------------------------------------------------------------------
# Policy losses. Log-probs are logs of round probabilities so ratios are exact.


def logs(*probabilities: float) -> torch.Tensor:
    return torch.tensor([[LN(p) for p in probabilities]], dtype=torch.float64)


class TestPpoClip:
    def test_it_takes_the_pessimistic_of_the_clipped_and_unclipped_terms(self):
        current = logs(0.5, 0.5, 0.2, 0.2, 0.3).requires_grad_()
        old = logs(0.4, 0.4, 0.4, 0.4, 0.3)
        advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0, 2.0]], dtype=torch.float64)
        out = ppo_clip_loss(
            current, old, advantages, params=PolicyLossParams(eps_clip_low=0.2, eps_clip_high=0.2)
        )
        # t0 r=1.25 A=+1: max(−1.25, −1.2) = −1.2 (clipped)   t1 r=1.25 A=−1: max(1.25, 1.2) = 1.25
        # t2 r=0.5 A=−1: max(0.5, 0.8) = 0.8 (clipped)        t3 r=0.5 A=+1: max(−0.5, −0.8) = −0.5
        # t4 r=1 A=2: −2
        close(out.loss, [[-1.2, 1.25, 0.8, -0.5, -2.0]])
        assert out.clipped.tolist() == [[True, False, True, False, False]]
        out.loss.sum().backward()
        # d(−r·A)/d log π = −r·A where unclipped, 0 where clipped: 0, 1.25, 0, −0.5, −2
        close(current.grad, [[0.0, 1.25, 0.0, -0.5, -2.0]])

    def test_clip_ranges_are_asymmetric(self):
        out = ppo_clip_loss(
            logs(0.5), logs(0.4), torch.tensor([1.0]), params=PolicyLossParams(eps_clip_high=0.28)
        )
        # r = 1.25 < 1.28: not clipped → −1.25
        close(out.loss, [[-1.25]])

    def test_dual_clip_bounds_the_loss_of_a_negative_advantage_token(self):
        out = ppo_clip_loss(
            logs(0.5, 0.5, 0.5),
            logs(0.1, 0.4, 0.1),
            torch.tensor([[-1.0, -1.0, 1.0]]),
            params=PolicyLossParams(dual_clip=3.0),
        )
        # t0 r=5 A=−1: max(5, 1.2) = 5 → min(5, 3·1) = 3   t1 r=1.25 A=−1: 1.25 (below 3)
        # t2 r=5 A=+1: max(−5, −1.2) = −1.2 (dual clip only acts on A < 0)
        close(out.loss, [[3.0, 1.25, -1.2]])

    def test_a_dual_clip_of_one_or_less_is_refused(self):
        with pytest.raises(ValueError, match="greater than 1"):
            ppo_clip_loss(logs(0.5), logs(0.5), torch.tensor([1.0]), params=PolicyLossParams(dual_clip=1.0))

    def test_a_huge_log_ratio_does_not_overflow(self):
        out = ppo_clip_loss(torch.tensor([[0.0]]), torch.tensor([[-1000.0]]), torch.tensor([-1.0]))
        assert torch.isfinite(out.loss).all()


class TestDppo:
    def test_binary_tv_masks_tokens_whose_probability_moved_past_delta_in_the_advantage_direction(self):
        current = logs(0.5, 0.4, 0.1, 0.2, 0.1, 0.01).requires_grad_()
        behaviour = logs(0.3, 0.3, 0.3, 0.3, 0.3, 0.001)
        advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
        out = dppo_loss(
            current, behaviour, advantages, params=PolicyLossParams(dppo_delta_low=0.15, dppo_delta_high=0.15)
        )
        # t0 A>0, Δ=0.2 > 0.15 → masked, 0         t1 A>0, Δ=0.1 → −(0.4/0.3) = −1.3333333
        # t2 A<0, −Δ=0.2 > 0.15 → masked, 0        t3 A<0, −Δ=0.1 → −(0.2/0.3)(−1) = 0.6666667
        # t4 A>0, Δ=−0.2 (moved against A) → kept: −(0.1/0.3) = −0.3333333
        # t5 a rare token, r = 10 but Δ = 0.009 → kept: −10 (PPO would clip it at −1.2)
        close(out.loss, [[0.0, -4 / 3, 0.0, 2 / 3, -1 / 3, -10.0]])
        assert out.clipped.tolist() == [[True, False, True, False, False, False]]
        out.loss.sum().backward()
        # d(−r·A)/d log π = −r·A where kept, 0 where masked
        close(current.grad, [[0.0, -4 / 3, 0.0, 2 / 3, -1 / 3, -10.0]])

    def test_it_uses_the_rollout_log_probs_when_given(self):
        from_old = dppo_loss(logs(0.5), logs(0.3), torch.tensor([1.0]))
        from_rollout = dppo_loss(logs(0.5), logs(0.3), torch.tensor([1.0]), rollout_log_probs=logs(0.4))
        # against old: Δ = 0.2 → masked; against rollout: Δ = 0.1 → −0.5/0.4 = −1.25
        close(from_old.loss, [[0.0]])
        close(from_rollout.loss, [[-1.25]])


class TestRolloutIs:
    def test_it_weights_the_policy_gradient_by_the_truncated_ratio_to_the_rollout_policy(self):
        current = logs(0.5, 0.5, 0.2).requires_grad_()
        rollout = logs(0.4, 0.1, 0.4)
        advantages = torch.tensor([[1.0, 1.0, -1.0]], dtype=torch.float64)
        out = rollout_is_loss(
            current, None, advantages, rollout_log_probs=rollout, params=PolicyLossParams(rollout_is_cap=2.0)
        )
        # t0 w=1.25: −1.25·1·ln 0.5 = 0.8664340     t1 r=5 → w=2: −2·ln 0.5 = 1.3862944
        # t2 w=0.5 A=−1: 0.5·ln 0.2 = −0.8047190
        close(out.loss, [[0.8664340, 1.3862944, -0.8047190]])
        assert out.clipped.tolist() == [[False, True, False]]
        out.loss.sum().backward()
        # ∇ = −w·A: −1.25, −2, +0.5 (the weight carries no gradient)
        close(current.grad, [[-1.25, -2.0, 0.5]])

    def test_it_needs_the_rollout_log_probs(self):
        with pytest.raises(ValueError, match="rollout_log_probs"):
            rollout_is_loss(logs(0.5), logs(0.5), torch.tensor([1.0]))

    def test_the_registry_names_the_three_losses(self):
        assert set(POLICY_LOSSES) == {"ppo_clip", "dppo", "rollout_is"}


class TestKl:
    def test_k1_k2_k3_for_a_policy_above_and_below_the_reference(self):
        current, reference = logs(0.5, 0.25), logs(0.25, 0.5)
        # d = ±ln 2 = ±0.6931472
        close(kl_k1(current, reference), [[0.6931472, -0.6931472]])
        close(kl_k2(current, reference), [[0.2402265, 0.2402265]])  # ln²2 / 2
        # k3 = e^{−d} + d − 1: 0.5 + 0.6931472 − 1 = 0.1931472; 2 − 0.6931472 − 1 = 0.3068528
        close(kl_k3(current, reference), [[0.1931472, 0.3068528]])

    def test_the_registry_names_the_estimators(self):
        assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}


# ---------------------------------------------------------------------------------------------
# Loss reductions. Groups A (3 sequences), B (2, one of them a masked harness-error sample), C (1).
#   s0 A ℓ=1,2,3,4  m=1,1,1,0  Σmℓ=6  Σm=3  mean 2
#   s1 A ℓ=4,4,4,4  m=1,0,0,0  Σmℓ=4  Σm=1  mean 4
#   s2 B ℓ=2,2,2,2  m=1,1,1,1  Σmℓ=8  Σm=4  mean 2
#   s3 B ℓ=inf,nan,9,9  m=0      (masked sample: takes no part)
#   s4 C ℓ=2,4,5,7  m=1,1,0,0  Σmℓ=6  Σm=2  mean 3
#   s5 A ℓ=0,0,0,6  m=1,1,1,1  Σmℓ=6  Σm=4  mean 1.5
LOSS = torch.tensor(
    [[1, 2, 3, 4], [4, 4, 4, 4], [2, 2, 2, 2], [math.inf, math.nan, 9, 9], [2, 4, 5, 7], [0, 0, 0, 6]],
    dtype=torch.float32,
)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
PROMPTS = torch.tensor([0, 0, 1, 1, 2, 0])


class TestLossReductions:
    def test_token_mean_is_the_masked_sum_over_the_masked_count(self):
        # (6 + 4 + 8 + 6 + 6) / (3 + 1 + 4 + 2 + 4) = 30 / 14
        close(reduce_loss("token_mean", LOSS, MASK), 30 / 14)

    def test_sequence_mean_averages_per_sequence_means_over_the_sequences_that_take_part(self):
        # (2 + 4 + 2 + 3 + 1.5) / 5 = 2.5 — the masked s3 is not a sixth sequence
        close(reduce_loss("sequence_mean", LOSS, MASK), 2.5)

    def test_seq_mean_token_sum_norm_divides_by_sequences_times_max_len(self):
        close(reduce_loss("seq_mean_token_sum_norm", LOSS, MASK, max_len=8), 30 / (5 * 8))  # 0.75
        close(reduce_loss("seq_mean_token_sum_norm", LOSS, MASK), 30 / (5 * 4))  # L defaults to T

    def test_prompt_mean_averages_each_groups_token_mean_with_unequal_groups(self):
        # A: (6 + 4 + 6)/(3 + 1 + 4) = 2.0   B: 8/4 = 2.0   C: 6/2 = 3.0   → (2 + 2 + 3)/3
        close(reduce_loss("prompt_mean", LOSS, MASK, group_ids=PROMPTS), 7 / 3)

    def test_prompt_mean_does_not_count_a_group_masked_out_entirely(self):
        mask = MASK.clone()
        mask[2] = 0  # group B now has no token at all (group masking on a harness error)
        # A: 2.0, C: 3.0 → 2.5
        close(reduce_loss("prompt_mean", LOSS, mask, group_ids=PROMPTS), 2.5)

    def test_prompt_mean_needs_group_ids(self):
        with pytest.raises(ValueError, match="group id"):
            reduce_loss("prompt_mean", LOSS, MASK)

    @pytest.mark.parametrize("name", list(LOSS_REDUCTIONS))
    def test_masked_tokens_never_reach_the_loss_or_the_gradient(self, name):
        loss = LOSS.clone().requires_grad_()
        value = reduce_loss(name, loss, MASK, group_ids=PROMPTS, max_len=8)
        value.backward()
        assert torch.isfinite(value)
        assert (loss.grad[MASK == 0] == 0).all()
        assert (loss.grad[MASK == 1] > 0).all()

    @pytest.mark.parametrize("name", list(LOSS_REDUCTIONS))
    def test_a_batch_without_any_unmasked_token_reduces_to_zero(self, name):
        value = reduce_loss(name, LOSS, torch.zeros_like(MASK), group_ids=PROMPTS)
        assert value.item() == 0.0

    def test_the_weights_of_each_mean_sum_to_one(self):
        for name in ("token_mean", "sequence_mean", "prompt_mean"):
            close(LOSS_REDUCTIONS[name](MASK, PROMPTS, None).sum(), 1.0)

    def test_an_unknown_reduction_is_refused_with_the_known_names(self):
        with pytest.raises(
            ValueError, match="known: token_mean, sequence_mean, seq_mean_token_sum_norm, prompt_mean"
        ):
            reduce_loss("mean", LOSS, MASK)


# ---------------------------------------------------------------------------------------------
# Cross-check against TRL 1.16 (trl/trainer/grpo_trainer.py).


@pytest.fixture(scope="module")
def trl():
    # TRL is a declared dev dependency (imported here, lazily, because it takes seconds to import).
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import nanstd

    return SimpleNamespace(GRPOTrainer=GRPOTrainer, nanstd=nanstd)


class TestAgainstTrl:
    """Advantages: TRL computes them inline in `_generate_and_score_completions`; this reproduces
    its lines for `multi_objective_aggregation="sum_then_normalize"` (NaN marks an unscorable
    completion, `nanstd` is TRL's own, the std is added to 1e-4, NaN advantages become 0) and compares
    with ours (epsilon = 1e-4, the NaNs as our validity mask).

    Losses: `GRPOTrainer._compute_loss` itself runs on a minimal stand-in for the trainer whose
    `_get_per_token_logps_and_entropies` returns our log-probs. TRL's loss types map to ours:
    grpo → sequence_mean, bnpo → token_mean, dr_grpo → seq_mean_token_sum_norm (L =
    max_completion_length), dapo → token_mean over the whole batch (num_items_in_batch = Σm); all
    with the clipped ratio to the old policy (our ppo_clip) and, with beta > 0, + beta·k3. TRL has no
    prompt_mean. They define the same quantity only when every sequence has an unmasked token (TRL
    counts an empty sequence in its mean; we do not), so these inputs have none."""

    @pytest.mark.parametrize("scale_rewards", ["group", "none"])
    def test_grpo_advantages_match_trl(self, trl, scale_rewards):
        num_generations = 4
        generator = torch.Generator().manual_seed(0)
        rewards = torch.rand(5 * num_generations, generator=generator)
        rewards[[1, 6, 7, 8]] = torch.nan  # unscorable; group 1 keeps one valid sample, group 2 two
        rewards[12:16] = 0.25  # a zero-variance group
        # TRL grpo_trainer.py, _generate_and_score_completions:
        mean_grouped = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(
            num_generations
        )
        std = trl.nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
        expected = rewards - mean_grouped
        if scale_rewards != "none":
            expected = expected / (std + 1e-4)
        expected = torch.nan_to_num(expected, nan=0.0)

        groups = torch.arange(5).repeat_interleave(num_generations)
        ours = grpo_advantages(
            rewards, groups, ~torch.isnan(rewards), norm_by_std=scale_rewards != "none", epsilon=1e-4
        )
        assert torch.allclose(ours, expected, atol=1e-5)

    @pytest.mark.parametrize(
        ("loss_type", "reduction"),
        [
            ("grpo", "sequence_mean"),
            ("bnpo", "token_mean"),
            ("dr_grpo", "seq_mean_token_sum_norm"),
            ("dapo", "token_mean"),
        ],
    )
    @pytest.mark.parametrize("beta", [0.0, 0.04])
    def test_clipped_losses_and_their_gradients_match_trl(self, trl, loss_type, reduction, beta):
        batch, length, max_completion_length = 6, 7, 10
        generator = torch.Generator().manual_seed(1)
        old = -torch.rand(batch, length, generator=generator) * 3
        current = (old + torch.randn(batch, length, generator=generator) * 0.3).requires_grad_()
        reference = old + torch.randn(batch, length, generator=generator) * 0.2
        advantages = torch.randn(batch, generator=generator)
        lengths = [7, 3, 5, 1, 6, 4]
        mask = torch.tensor([[1] * n + [0] * (length - n) for n in lengths])

        stand_in = _TrlTrainerStandIn(
            log_probs=current, loss_type=loss_type, beta=beta, max_completion_length=max_completion_length
        )
        inputs = {
            "prompt_ids": torch.zeros(batch, 2, dtype=torch.long),
            "prompt_mask": torch.ones(batch, 2, dtype=torch.long),
            "completion_ids": torch.zeros(batch, length, dtype=torch.long),
            "completion_mask": mask,
            "advantages": advantages,
            "old_per_token_logps": old,
            "ref_per_token_logps": reference,
            "num_items_in_batch": mask.sum(),
        }
        trl_loss = trl.GRPOTrainer._compute_loss(stand_in, None, inputs)
        (trl_grad,) = torch.autograd.grad(trl_loss, current)

        params = PolicyLossParams(eps_clip_low=0.2, eps_clip_high=0.28)
        per_token = ppo_clip_loss(current, old, advantages, params=params).loss
        if beta:
            per_token = per_token + beta * kl_k3(current, reference)
        ours = reduce_loss(reduction, per_token, mask, max_len=max_completion_length)
        (our_grad,) = torch.autograd.grad(ours, current)

        assert abs(ours.item() - trl_loss.item()) < 1e-5
        assert torch.allclose(our_grad, trl_grad, atol=1e-5)


class _TrlTrainerStandIn:
    """The attributes `GRPOTrainer._compute_loss` reads, set to a single-process, no-extras run."""

    def __init__(self, *, log_probs, loss_type, beta, max_completion_length):
        self._log_probs = log_probs
        self.loss_type = loss_type
        self.beta = beta
        self.max_completion_length = max_completion_length
        self.epsilon_low, self.epsilon_high = 0.2, 0.28
        self.args = SimpleNamespace(delta=None, use_bias_correction_kl=False)
        self.aux_loss_enabled = False
        self.top_entropy_quantile = 1.0
        self.off_policy_mask_threshold = None
        self.importance_sampling_level = "token"
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self._entropy_bonus_enabled = False
        self.current_gradient_accumulation_steps = 1
        self.model = SimpleNamespace(training=True)
        self.args.steps_per_generation = 1
        self._metrics = defaultdict(lambda: defaultdict(list))
        self.accelerator = SimpleNamespace(
            num_processes=1,
            sync_gradients=True,
            gather=lambda tensor: tensor,
            gather_for_metrics=lambda tensor: tensor,
            reduce=lambda tensor, reduction: tensor,
        )

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._log_probs, torch.zeros_like(self._log_probs), None
