"""Pass@k, valid mean reward and step aggregation against values worked out by hand."""

import math

import pytest

from rl_engine.metrics import (
    MetricMeans,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_by_task,
    rollout_metrics,
    tool_calls_by_tool,
    valid_mean,
    valid_mean_reward,
)
from rl_engine.trace import RolloutRecord, RolloutSummary, ToolCallRecord, TurnRecord


def rollout(task: str, outcome: str, *, reward=None, score=None, passed=None, code=None, turns=0, tokens=0):
    return RolloutSummary(
        task_name=task,
        task_hash="h",
        outcome=outcome,
        reward=reward,
        score=score,
        passed=passed,
        code=code,
        turns=turns,
        tokens=tokens,
    )


# task a: passed (1.0), failed (0.25), agent error (0), harness error; task b: passed, harness error, cancelled
FINALS = [
    rollout("org/a", "graded", reward=1.0, score=1.0, passed=True, turns=3, tokens=100),
    rollout("org/a", "graded", reward=0.25, score=0.25, passed=False, turns=5, tokens=300),
    rollout("org/a", "agent_error", reward=0.0, code="TURN_BUDGET", turns=8, tokens=500),
    rollout("org/a", "harness_error", code="TOOL_TIMEOUT", turns=2),
    rollout("org/b", "graded", reward=1.0, score=1.0, passed=True, turns=4, tokens=100),
    rollout("org/b", "harness_error", code="SANDBOX_START"),
    rollout("org/b", "cancelled"),
]


class TestPassAtK:
    def test_it_matches_the_binomial_formula(self):
        assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # 1 − C(3,1)/C(5,1) = 1 − 3/5
        assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 − C(3,2)/C(5,2) = 1 − 3/10
        assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 − C(7,5)/C(10,5)
        assert pass_at_k(4, 0, 2) == 0.0

    def test_it_is_one_when_fewer_than_k_samples_failed(self):
        assert pass_at_k(5, 2, 4) == 1.0  # n − c = 3 < 4: every draw of 4 holds a pass

    def test_pass_at_one_is_the_pass_rate(self):
        assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)

    def test_it_agrees_with_the_product_form_of_the_estimator(self):
        # Chen et al.'s numerically stable form: 1 − Π_{i=n−c+1..n} (1 − k/i)
        n, c, k = 20, 6, 7
        product = math.prod(1 - k / i for i in range(n - c + 1, n + 1))
        assert pass_at_k(n, c, k) == pytest.approx(1 - product)

    @pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
    def test_impossible_counts_are_refused(self, n, c, k):
        with pytest.raises(ValueError, match="need"):
            pass_at_k(n, c, k)

    def test_tasks_with_fewer_than_k_valid_samples_are_left_out(self):
        per_task = pass_at_k_by_task(FINALS)
        assert per_task == {"org/a": (3, 1), "org/b": (1, 1)}
        # Pass@2: a = 1 − C(2,2)/C(3,2) = 2/3; b has 1 valid sample → left out
        assert mean_pass_at_k(per_task, 2) == (pytest.approx(2 / 3), 1)
        assert mean_pass_at_k({}, 1) == (None, 0)


class TestValidMeans:
    def test_harness_errors_and_cancellations_are_left_out_not_averaged_in_as_zero(self):
        # (1 + 0.25 + 0 + 1) / 4 = 0.5625 — the agent error counts, the harness errors do not
        assert valid_mean_reward(FINALS) == pytest.approx(0.5625)

    def test_no_valid_rollout_gives_none_not_zero(self):
        assert valid_mean_reward([FINALS[3], FINALS[5]]) is None
        assert valid_mean([None, None]) is None


class TestRolloutMetrics:
    def test_a_steps_metrics_from_its_final_rollouts(self):
        metrics = rollout_metrics(FINALS, ks=(1, 2))
        assert metrics.rollouts == 7 and metrics.valid == 4
        assert metrics.reward_mean == pytest.approx(0.5625)
        assert metrics.score_mean == pytest.approx(0.75)  # (1 + 0.25 + 1) / 3 graded
        assert metrics.pass_at[1] == pytest.approx((1 / 3 + 1) / 2)  # mean over tasks of c/n
        assert metrics.pass_at[2] == pytest.approx(2 / 3)
        assert metrics.tasks_short_of_k == {1: 0, 2: 1}
        assert metrics.harness_error_rate == pytest.approx(2 / 7)
        assert metrics.harness_errors_by_code == {"TOOL_TIMEOUT": 1, "SANDBOX_START": 1}
        assert metrics.agent_error_rate == pytest.approx(1 / 7)
        assert metrics.agent_errors_by_code == {"TURN_BUDGET": 1}
        assert metrics.turns_mean == pytest.approx((3 + 5 + 8 + 4) / 4)
        assert metrics.tokens_mean == pytest.approx((100 + 300 + 500 + 100) / 4)

    def test_an_empty_step_has_no_rates(self):
        metrics = rollout_metrics([])
        assert (
            metrics.reward_mean is None
            and metrics.harness_error_rate is None
            and metrics.pass_at == {1: None}
        )

    def test_the_metrics_serialise_to_json(self):
        assert '"harness_error_rate"' in rollout_metrics(FINALS).model_dump_json()


class TestMetricMeans:
    def test_it_weights_each_micro_batch_and_skips_unmeasured_values(self):
        means = MetricMeans()
        means.add({"policy_loss": 1.0, "kl": None}, weight=10)
        means.add({"policy_loss": 4.0, "kl": 0.5}, weight=30)
        # policy_loss: (1·10 + 4·30) / 40 = 3.25; kl only measured once → 0.5
        assert means.means() == {"policy_loss": pytest.approx(3.25), "kl": pytest.approx(0.5)}

    def test_a_negative_weight_is_refused(self):
        with pytest.raises(ValueError, match="weight"):
            MetricMeans().add({"x": 1.0}, weight=-1)


def test_tool_calls_are_counted_per_tool_over_every_attempt():
    def record(*calls: tuple[str, bool]) -> RolloutRecord:
        tool_calls = [
            ToolCallRecord(id=str(i), name=name, is_error=error) for i, (name, error) in enumerate(calls)
        ]
        return RolloutRecord(
            summary=rollout("t", "graded", reward=1.0, score=1.0, passed=True),
            turns=[
                TurnRecord(index=0, role="assistant", tool_calls=tool_calls),
                TurnRecord(index=1, role="user"),
            ],
        )

    retried = record(("read_pdf", True))  # the attempt a harness error ended, retried: still evidence
    final = record(("read_pdf", False), ("read_pdf", False), ("submit_answer", False))
    other = record(("search_files", True), ("submit_answer", False))
    assert tool_calls_by_tool([retried, final, other]) == {
        "read_pdf": {"calls": 3, "errors": 1},
        "submit_answer": {"calls": 2, "errors": 0},
        "search_files": {"calls": 1, "errors": 1},
    }
    assert tool_calls_by_tool([]) == {}
