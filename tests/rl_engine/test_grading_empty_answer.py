"""The harness rule: an `llm_judge` criterion is never met by an empty answer (blank, with no text in
output/), and the judge is not asked. Each judge here fails every request it gets, and records it,
so a call would show as a JUDGE error or a recorded request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rl_engine.bundle import Criterion, Rubric, load_bundle
from rl_engine.grading import JudgeConfig, grade
from rl_engine.grading.checks import EMPTY_EVIDENCE_RATIONALE
from rl_engine.grading.harbor_main import grade_rubric
from rl_engine.toy_tasks import write_toy_tasks
from rl_engine.validate import empty_answer_check
from tests.rl_engine.fake_judge import FakeJudge, verdict_reply

RUBRIC = Rubric(
    criteria=[
        Criterion(id="c1", text="Explains why the target was missed", kind="llm_judge", required=True),
        Criterion(id="c2", text="Names the region", kind="llm_judge", params={"model": "bigger-judge"}),
    ]
)


@pytest.fixture
def failing_judge():
    with FakeJudge(("status", 500)) as judge:
        yield judge


def _config(judge: FakeJudge) -> JudgeConfig:
    return JudgeConfig(base_url=judge.base_url, model="judge-model", retries=0)


def _grade(judge: FakeJudge, answer: str, output_dir: Path):
    return asyncio.run(grade(RUBRIC, final_answer=answer, output_dir=output_dir, judge=_config(judge)))


@pytest.mark.parametrize("answer", ["", "   \n\t "])
def test_a_blank_answer_meets_no_judged_criterion_and_the_judge_is_not_asked(answer, failing_judge, tmp_path):
    result = _grade(failing_judge, answer, tmp_path / "output")

    assert failing_judge.requests == []
    assert [(v.met, v.rationale) for v in result.verdicts] == [(False, EMPTY_EVIDENCE_RATIONALE)] * 2
    assert EMPTY_EVIDENCE_RATIONALE.endswith("the judge was not asked")
    assert (result.score, result.passed) == (0.0, False)


def test_blank_output_files_are_no_evidence_either(failing_judge, tmp_path):
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "notes.md").write_text("\n  \n")
    (tmp_path / "output" / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")

    result = _grade(failing_judge, "", tmp_path / "output")

    assert failing_judge.requests == []
    assert not any(v.met for v in result.verdicts)


def test_a_blank_answer_with_a_written_file_is_still_judged(tmp_path):
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "memo.md").write_text("APAC grew 12.5% against a 15% target: missed.")

    with FakeJudge(("ok", verdict_reply(True, "the memo says it was missed"))) as judge:
        result = _grade(judge, "", tmp_path / "output")

    assert len(judge.requests) == 2
    assert '<file path="output/memo.md">' in judge.requests[0]["body"]["messages"][-1]["content"]
    assert result.verdicts[0].met and result.verdicts[0].rationale == "the memo says it was missed"


def test_a_non_blank_answer_is_judged(failing_judge, tmp_path):
    from rl_engine.outcomes import HarnessCode, HarnessError

    with pytest.raises(HarnessError) as caught:
        _grade(failing_judge, "I don't know.", tmp_path / "output")

    assert caught.value.code == HarnessCode.JUDGE
    assert len(failing_judge.requests) >= 1


def test_the_exported_harbor_grader_applies_the_same_rule(failing_judge, tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_JUDGE_BASE_URL", failing_judge.base_url)
    monkeypatch.setenv("PRACTICUM_JUDGE_MODEL", "judge-model")
    monkeypatch.setenv("PRACTICUM_JUDGE_RETRIES", "0")
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "answer.md").write_text(" \n")
    criteria = [c.model_dump() for c in RUBRIC.criteria]

    rewards = grade_rubric(criteria, tmp_path)

    assert failing_judge.requests == []
    assert rewards == {"reward": 0.0, "passed": 0, "c1": 0, "c2": 0}


def test_validation_finds_no_judged_criterion_met_by_an_empty_answer_without_asking(failing_judge, tmp_path):
    task = write_toy_tasks(tmp_path / "tasks", "green", ["grass"])[0]
    criteria = [
        {"id": "c1", "text": "Says green", "kind": "regex", "params": {"pattern": "green"}, "required": True},
        {"id": "c2", "text": "Explains why grass is green", "kind": "llm_judge", "params": {}},
    ]
    (task / "tests" / "rubric.json").write_text(json.dumps({"criteria": criteria}))

    entry = asyncio.run(empty_answer_check(load_bundle(task), _config(failing_judge)))

    assert failing_judge.requests == []
    assert entry.ok, entry.reason
    assert entry.reason == "no criterion is met by an empty answer"
