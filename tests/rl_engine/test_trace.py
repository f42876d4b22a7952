import math

import pytest
from pydantic import ValidationError

from rl_engine.grading import Verdict
from rl_engine.outcomes import Outcome
from rl_engine.trace import OutputFile, RolloutRecord, RolloutSummary, ToolCallRecord, TurnRecord


def summary(**fields) -> RolloutSummary:
    return RolloutSummary(**{"task_name": "acme/apac-growth", "task_hash": "ab" * 32} | fields)


def test_a_graded_rollout_carries_reward_score_and_passed():
    row = summary(outcome=Outcome.GRADED, reward=0.75, score=0.75, passed=False, turns=4, tokens=900)

    assert (row.reward, row.score, row.passed, row.code) == (0.75, 0.75, False, None)


def test_an_agent_error_carries_its_code_and_the_configured_reward():
    row = summary(outcome=Outcome.AGENT_ERROR, code="TURN_BUDGET", reward=0.0, message="12 turns used")

    assert (row.code, row.reward, row.passed) == ("TURN_BUDGET", 0.0, None)


def test_a_harness_error_keeps_its_code_and_has_no_reward():
    row = summary(outcome=Outcome.HARNESS_ERROR, code="JUDGE", message="judge answered HTTP 500")

    assert row.reward is None and row.code == "JUDGE"


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"outcome": Outcome.HARNESS_ERROR, "code": "JUDGE", "reward": 0.0}, "has no reward"),
        ({"outcome": Outcome.CANCELLED, "reward": 0.0}, "has no reward"),
        ({"outcome": Outcome.GRADED, "score": 1.0, "passed": True}, "needs a finite reward"),
        (
            {"outcome": Outcome.GRADED, "reward": math.nan, "score": 1.0, "passed": True},
            "needs a finite reward",
        ),
        ({"outcome": Outcome.GRADED, "reward": 1.0}, "needs its score and passed"),
        ({"outcome": Outcome.HARNESS_ERROR}, "needs one of"),
        ({"outcome": Outcome.HARNESS_ERROR, "code": "TURN_BUDGET"}, "needs one of"),
        ({"outcome": Outcome.AGENT_ERROR, "code": "JUDGE", "reward": 0.0}, "needs one of"),
        (
            {"outcome": Outcome.AGENT_ERROR, "code": "DEADLINE", "reward": 0.0, "score": 0.0},
            "only a graded rollout",
        ),
        (
            {"outcome": Outcome.GRADED, "code": "JUDGE", "reward": 1.0, "score": 1.0, "passed": True},
            "no error code",
        ),
    ],
)
def test_the_outcome_rules_are_enforced(fields, fragment):
    with pytest.raises(ValidationError, match=fragment):
        summary(**fields)


def test_a_record_round_trips_through_json():
    record = RolloutRecord(
        summary=summary(outcome=Outcome.GRADED, reward=1.0, score=1.0, passed=True, timings={"agent": 1.5}),
        turns=[
            TurnRecord(index=0, role="user", content="What is APAC growth?"),
            TurnRecord(
                index=1,
                role="assistant",
                content="",
                tool_calls=[
                    ToolCallRecord(
                        id="call_1", name="read_text", arguments={"path": "a.txt"}, result_text="x"
                    )
                ],
                prompt_tokens=120,
                completion_tokens=30,
            ),
        ],
        verdicts=[
            Verdict(
                criterion_id="c1", kind="contains", met=True, rationale="found", weight=1.0, required=True
            )
        ],
        final_answer="12.5%",
        output_files=[OutputFile(path="answer.md", size_bytes=5, text="12.5%")],
    )

    assert RolloutRecord.model_validate_json(record.model_dump_json()) == record
