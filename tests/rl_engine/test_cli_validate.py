"""`python -m rl_engine validate SPEC.json` and `eval --run-dir`, in real subprocesses on the toy tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_engine.toy_tasks import write_toy_tasks


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rl_engine", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def job(tmp_path):
    """A job folder as the dispatcher writes it: tasks/eval/<task>/ and spec.json, relative paths."""
    write_toy_tasks(tmp_path / "job" / "tasks" / "eval", "green", ["grass", "leaf"])
    return tmp_path / "job"


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_validate_runs_the_oracle_and_the_null_agent_on_every_task_in_one_stream(job, tmp_path):
    (job / "spec.json").write_text(json.dumps({"kind": "validate", "tasks": {"eval_dir": "tasks/eval"}}))

    result = run_cli(job, "validate", "spec.json", "--run-dir", str(tmp_path / "out"), "--run-id", "v1")

    assert result.returncode == 0, result.stderr[-3000:]
    assert "every task is passed by the oracle and failed by null" in result.stdout
    written = events(tmp_path / "out" / "events.jsonl")
    assert [e["seq"] for e in written] == list(range(1, len(written) + 1))
    assert [e["type"] for e in written if e["type"].startswith("run_")] == ["run_started", "run_finished"]
    rollouts = [e["payload"]["summary"] for e in written if e["type"] == "rollout"]
    assert sorted((r["policy"], r["passed"]) for r in rollouts) == [
        ("null", False),
        ("null", False),
        ("oracle", True),
        ("oracle", True),
    ]
    finished = written[-1]["payload"]
    assert (finished["kind"], finished["pass_at_1"], finished["findings"]) == ("validate", 1.0, [])
    assert finished["by_policy"]["null"]["pass_at_1"] == 0.0


def test_validate_names_a_task_that_the_null_agent_passes(job, tmp_path):
    rubric = job / "tasks" / "eval" / "colour-of-leaf" / "tests" / "rubric.json"
    criteria = json.loads(rubric.read_text())
    criteria["criteria"][0]["params"]["pattern"] = ".*"  # checks nothing
    rubric.write_text(json.dumps(criteria))
    (job / "spec.json").write_text(json.dumps({"kind": "validate", "tasks": {"eval_dir": "tasks/eval"}}))

    result = run_cli(job, "validate", "spec.json", "--run-dir", str(tmp_path / "out"))

    assert result.returncode == 0, result.stderr[-3000:]
    finished = events(tmp_path / "out" / "events.jsonl")[-1]["payload"]
    assert finished["findings"] == [
        {
            "task": "toy/colour-of-leaf",
            "problem": "the null agent passes it (Pass@1 1.00): the rubric checks too little",
        }
    ]


def test_eval_with_a_run_dir_writes_its_events_there_and_nothing_in_the_working_folder(job, tmp_path):
    (job / "spec.json").write_text(
        json.dumps({"kind": "eval", "agent": "oracle", "tasks": {"eval_dir": "tasks/eval"}})
    )
    before = sorted(p.name for p in job.iterdir())

    result = run_cli(job, "eval", "spec.json", "--run-dir", str(tmp_path / "out"))

    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in job.iterdir()) == before
    assert events(tmp_path / "out" / "events.jsonl")[-1]["type"] == "run_finished"


def test_validate_refuses_a_spec_of_another_kind(job, tmp_path):
    (job / "spec.json").write_text(
        json.dumps({"kind": "eval", "agent": "oracle", "tasks": {"eval_dir": "x"}})
    )

    result = run_cli(job, "validate", "spec.json")

    assert result.returncode == 1
    assert "is a eval spec; `validate` runs kind 'validate'" in result.stderr
