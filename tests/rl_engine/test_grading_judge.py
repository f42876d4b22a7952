import asyncio
from pathlib import Path

import pytest

from rl_engine.bundle import Criterion, Rubric
from rl_engine.grading import JudgeConfig, grade
from rl_engine.outcomes import HarnessCode, HarnessError
from tests.rl_engine.fake_judge import FakeJudge, verdict_reply

JUDGED = Rubric(
    criteria=[
        Criterion(id="c1", text="Says the target is not met", kind="llm_judge", required=True),
        Criterion(id="c2", text="Mentions 12.5%", kind="contains", params={"value": "12.5%"}),
    ]
)


def config(judge: FakeJudge, **overrides) -> JudgeConfig:
    return JudgeConfig(
        **{
            "base_url": judge.base_url,
            "model": "judge-model",
            "api_key": "k",
            "retries": 2,
            "backoff_sec": 0.01,
        }
        | overrides
    )


def run(
    judge_config: JudgeConfig | None, output_dir: Path, rubric: Rubric = JUDGED, answer: str = "Growth 12.5%."
):
    return asyncio.run(grade(rubric, final_answer=answer, output_dir=output_dir, judge=judge_config))


def judge_failure(judge_config: JudgeConfig, output_dir: Path) -> HarnessError:
    with pytest.raises(HarnessError) as caught:
        run(judge_config, output_dir)
    assert caught.value.code == HarnessCode.JUDGE
    return caught.value


def test_a_valid_verdict_becomes_the_criterion_verdict(tmp_path):
    (tmp_path / "notes.md").write_text("APAC: 12.5% vs 15% target")
    with FakeJudge(("ok", verdict_reply(True, "12.5% is below the 15% target"))) as judge:
        result = run(config(judge), tmp_path)

    assert (result.score, result.passed) == (1.0, True)
    assert result.verdicts[0].rationale == "12.5% is below the 15% target"
    [request] = judge.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer k"
    assert request["body"]["model"] == "judge-model"
    assert request["body"]["response_format"]["type"] == "json_schema"
    prompt = request["body"]["messages"][-1]["content"]
    assert "Criterion: Says the target is not met" in prompt
    assert "Growth 12.5%." in prompt
    assert '<file path="output/notes.md">\nAPAC: 12.5% vs 15% target' in prompt


def test_a_false_verdict_fails_the_required_criterion(tmp_path):
    with FakeJudge(("ok", verdict_reply(False, "it never mentions the target"))) as judge:
        result = run(config(judge), tmp_path)

    assert result.verdicts[0].met is False
    assert (result.score, result.passed) == (0.5, False)


def test_a_fenced_json_verdict_is_accepted(tmp_path):
    with FakeJudge(("ok", verdict_reply(True, fenced=True))) as judge:
        assert run(config(judge), tmp_path).verdicts[0].met


def test_a_criterion_can_name_its_own_judge_model(tmp_path):
    rubric = Rubric(
        criteria=[Criterion(id="c1", text="t", kind="llm_judge", params={"model": "bigger-judge"})]
    )
    with FakeJudge(("ok", verdict_reply(True))) as judge:
        run(config(judge), tmp_path, rubric=rubric)

    assert judge.requests[0]["body"]["model"] == "bigger-judge"


def test_a_judge_that_recovers_after_a_500_is_retried_and_used(tmp_path):
    with FakeJudge(("status", 500), ("ok", verdict_reply(True))) as judge:
        result = run(config(judge), tmp_path)

    assert result.verdicts[0].met
    assert len(judge.requests) == 2


def test_a_judge_that_keeps_answering_500_is_a_judge_error_after_its_retries(tmp_path):
    with FakeJudge(("status", 500)) as judge:
        error = judge_failure(config(judge, retries=2), tmp_path)

    assert len(judge.requests) == 3
    assert "answered HTTP 500 (3 attempts)" in error.message
    assert error.detail == '{"error": "boom"}'


def test_a_judge_that_hangs_past_its_timeout_is_a_judge_error(tmp_path):
    with FakeJudge(("hang", 1.5)) as judge:
        error = judge_failure(config(judge, timeout_sec=0.3, retries=1), tmp_path)

    assert len(judge.requests) == 2
    assert "timed out after 0.3 s (2 attempts)" in error.message


def test_a_judge_that_answers_garbage_is_a_judge_error(tmp_path):
    with FakeJudge(("text", "I think it is fine, probably.")) as judge:
        error = judge_failure(config(judge, retries=1), tmp_path)

    assert len(judge.requests) == 2
    assert "answered garbage" in error.message
    assert error.detail == "I think it is fine, probably."


def test_a_verdict_with_the_wrong_shape_is_garbage(tmp_path):
    body = '{"choices": [{"message": {"content": "{\\"verdict\\": \\"yes\\"}"}}]}'
    with FakeJudge(("ok", body)) as judge:
        error = judge_failure(config(judge, retries=0), tmp_path)

    assert len(judge.requests) == 1 and "garbage" in error.message


def test_a_client_error_is_not_retried(tmp_path):
    with FakeJudge(("status", 401)) as judge:
        error = judge_failure(config(judge, retries=3), tmp_path)

    assert len(judge.requests) == 1
    assert "answered HTTP 401 (1 attempt)" in error.message


def test_an_unreachable_judge_is_a_judge_error(tmp_path):
    with FakeJudge(("ok", verdict_reply(True))) as judge:
        base_url = judge.base_url
    error = judge_failure(JudgeConfig(base_url=base_url, model="m", retries=1, backoff_sec=0.01), tmp_path)

    assert "request failed (ConnectError" in error.message


def test_llm_judge_criteria_without_a_judge_are_a_judge_error(tmp_path):
    with pytest.raises(HarnessError) as caught:
        run(None, tmp_path)

    assert caught.value.code == HarnessCode.JUDGE and "no judge endpoint" in caught.value.message
