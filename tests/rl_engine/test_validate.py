"""A task version's validation checklist (rl_engine/validate.py) catches each planted defect, with its reason."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_engine.agent import NullPolicy, OraclePolicy
from rl_engine.bundle import load_bundle
from rl_engine.rollout import RolloutConfig, run_rollout
from rl_engine.sandbox import SandboxConfig
from rl_engine.toy_tasks import write_toy_tasks
from rl_engine.validate import bundle_checklist, empty_answer_check, golden_criteria_check, world_files_check

CONFIG = SandboxConfig()


@pytest.fixture
def task(tmp_path) -> Path:
    """A sound toy task: world answer.txt, a regex criterion, the golden answer "green"."""
    return write_toy_tasks(tmp_path / "tasks", "green", ["grass"])[0]


def rubric(folder: Path, *criteria: dict) -> None:
    (folder / "tests" / "rubric.json").write_text(json.dumps({"criteria": list(criteria)}))


GREEN = {
    "id": "c1",
    "text": "Says green",
    "kind": "regex",
    "params": {"pattern": r"^\W*green\W*$"},
    "required": True,
}


def checklist(folder: Path):
    bundle = load_bundle(folder)

    async def run():
        oracle = await run_rollout(
            bundle, OraclePolicy(), sandbox_config=CONFIG, judge=None, config=RolloutConfig(max_attempts=1)
        )
        null = await run_rollout(
            bundle, NullPolicy(), sandbox_config=CONFIG, judge=None, config=RolloutConfig(max_attempts=1)
        )
        return await bundle_checklist(bundle, oracle=oracle, null=null, sandbox_config=CONFIG, judge=None)

    return asyncio.run(run())


def by_key(result) -> dict:
    return {entry.key: entry for entry in result.items}


def test_a_sound_task_passes_every_item(task):
    result = checklist(task)

    assert result.ok, [(i.key, i.reason) for i in result.items if not i.ok]
    assert [i.key for i in result.items] == [
        "world_files",
        "tools_listed",
        "tools_answer",
        "oracle_passes",
        "null_fails",
        "golden_meets_criteria",
        "empty_answer_fails",
    ]
    assert by_key(result)["oracle_passes"].evidence == "oracle"
    assert by_key(result)["null_fails"].evidence == "null"


def test_an_unreadable_world_file_is_named_with_the_readers_reason(task):
    world = task / "environment" / "world"
    (world / "q3-report.pdf").write_text("this is not a PDF at all\n")
    (world / "chat.json").write_text('{"messages": [')

    entry = world_files_check(load_bundle(task))

    assert not entry.ok
    assert "q3-report.pdf: 'q3-report.pdf' is not a readable PDF" in entry.reason
    assert "chat.json: not valid JSON" in entry.reason


def test_a_tool_missing_from_the_server_fails_the_tools_item(task, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "hide:read_text")

    entries = by_key(checklist(task))

    assert not entries["tools_listed"].ok
    assert "does not offer enabled tool(s): read_text" in entries["tools_listed"].reason
    assert entries["tools_answer"].reason == "not checked: the sandbox did not start"


def test_a_tool_that_crashes_on_its_smoke_call_is_named(task, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "raise:read_text")
    bundle = load_bundle(task)
    from rl_engine.validate import tool_checks

    listed, answered = asyncio.run(tool_checks(bundle, CONFIG))

    assert listed.ok
    assert not answered.ok
    assert answered.reason.startswith("read_text: TOOL_EXCEPTION")


def test_an_oracle_that_fails_says_which_criterion_it_missed(task):
    (task / "solution" / "answer.md").write_text("blue\n")

    entries = by_key(checklist(task))

    assert not entries["oracle_passes"].ok
    assert entries["oracle_passes"].reason.startswith("score 0.00: c1 not met")
    assert not entries["golden_meets_criteria"].ok
    assert entries["null_fails"].ok


def test_a_criterion_that_an_empty_answer_meets_is_flagged(task):
    loose = {"id": "c2", "text": "Mentions anything", "kind": "regex", "params": {"pattern": ".*"}}
    rubric(task, GREEN, loose)

    entry = asyncio.run(empty_answer_check(load_bundle(task), None))

    assert not entry.ok
    assert entry.reason.startswith("met by an empty answer: c2 (regex)")
    assert "c1" not in entry.reason


def test_llm_judge_criteria_are_left_out_of_the_empty_answer_check_without_a_judge(task):
    rubric(task, GREEN, {"id": "c2", "text": "Explains why", "kind": "llm_judge", "params": {}})

    entry = asyncio.run(empty_answer_check(load_bundle(task), None))

    assert entry.ok
    assert entry.reason.endswith("not judged without a judge: c2")


def test_a_regex_criterion_the_golden_answer_does_not_meet_is_named(task):
    rubric(
        task,
        GREEN,
        {"id": "c2", "text": "Gives the hex code", "kind": "regex", "params": {"pattern": "#00ff00"}},
    )

    entries = by_key(checklist(task))

    assert not entries["golden_meets_criteria"].ok
    assert entries["golden_meets_criteria"].reason.startswith(
        "c2 (regex): the pattern '#00ff00' does not match"
    )
    assert entries["golden_meets_criteria"].evidence == "oracle"
    assert not entries["oracle_passes"].ok


def test_the_golden_answer_is_checked_alone_when_the_oracle_was_not_graded(task):
    rubric(task, {**GREEN, "params": {"pattern": "blue"}})

    entry = golden_criteria_check(load_bundle(task), [])

    assert not entry.ok
    assert entry.evidence is None
    assert "c1 (regex): the pattern 'blue' does not match" in entry.reason


def test_the_validate_command_puts_every_checklist_in_run_finished(tmp_path):
    tasks = tmp_path / "job" / "tasks" / "eval"
    good, bad = write_toy_tasks(tasks, "green", ["grass", "leaf"])
    rubric(bad, {**GREEN, "params": {"pattern": "#00ff00"}})
    (tmp_path / "job" / "spec.json").write_text(
        json.dumps({"kind": "validate", "tasks": {"eval_dir": "tasks/eval"}})
    )

    result = subprocess.run(
        [sys.executable, "-m", "rl_engine", "validate", "spec.json", "--run-dir", str(tmp_path / "out")],
        cwd=tmp_path / "job",
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert "toy/colour-of-leaf: NOT SOUND" in result.stdout
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    checklists = {c["task"]: c for c in events[-1]["payload"]["checklists"]}
    assert checklists["toy/colour-of-grass"]["ok"] is True
    leaf = checklists["toy/colour-of-leaf"]
    assert leaf["ok"] is False
    assert leaf["task_hash"] == load_bundle(bad).content_hash
    failed = {i["key"]: i["reason"] for i in leaf["items"] if not i["ok"]}
    assert set(failed) == {"oracle_passes", "golden_meets_criteria"}
