"""`python -m rl_engine train SPEC.json` and `eval SPEC.json` in real subprocesses, with the toy tasks
and the tiny toy model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_engine.toy_tasks import build_toy_model, write_toy_tasks

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rl_engine", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-toy")
    write_toy_tasks(root / "train", "colours", ["grass", "sky"])
    write_toy_tasks(root / "eval", "colours", ["snow"])
    build_toy_model(root / "model", hidden_size=32)
    return root


def write_spec(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def train_spec(toy: Path) -> dict:
    return {
        "kind": "train",
        "model": {"path": str(toy / "model")},
        "tasks": {"eval_dir": str(toy / "eval")},
        "sampling": {"max_new_tokens_per_turn": 1},
        "batch": {"prompts_per_step": 2, "samples_per_prompt": 2},
        "optimizer": {"lr": 1e-3},
        "evaluation": {"every_steps": 1, "samples_per_task": 2, "pass_at_k": [1, 2]},
        "resources": {"sandboxes_per_worker": 4},
        "max_steps": 2,
    }


def test_train_runs_a_spec_shows_progress_per_step_and_writes_the_events_file(toy, tmp_path):
    spec = write_spec(tmp_path / "spec.json", train_spec(toy))
    out = tmp_path / "events.jsonl"
    args = ["train", str(spec), "--tasks", str(toy / "train"), "--run-dir", str(tmp_path / "run")]
    result = run_cli(*args, "--out", str(out), "--run-id", "cli-run")
    assert result.returncode == 0, result.stderr[-3000:]

    progress = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == ["1/2", "2/2"]
    for label in ("reward", "Pass@1", "harness errors", "eval Pass@1", "ETA"):
        assert all(f"{label} " in line for line in progress), (label, progress)
    assert "eval before training  Pass@1" in result.stdout

    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert {e["run_id"] for e in written} == {"cli-run"}
    assert [e["payload"]["step"] for e in written if e["type"] == "step_metrics"] == [1, 2]
    assert written[0]["payload"]["spec"]["tasks"]["train_dir"] == str(toy / "train")
    assert (tmp_path / "run" / "checkpoints" / "step_000002").is_dir()

    again = run_cli(*args, "--out", str(out))
    assert again.returncode == 1 and "pass --resume to continue it" in again.stderr


def test_a_malformed_spec_is_refused_with_every_problem_listed(tmp_path):
    spec = write_spec(
        tmp_path / "bad.json",
        {
            "kind": "train",
            "model": {"builtin": "tiny-llama"},
            "batch": {"prompts_per_step": 3, "mini_batches": 2},
            "optimizer": {"lr": -1},
            "sampling": {"temprature": 0.7},
        },
    )
    result = run_cli("train", str(spec))
    assert result.returncode == 1
    for problem in (
        "optimizer.lr: Input should be greater than or equal to 0",
        "sampling.temprature: Extra inputs are not permitted",
        "batch.mini_batches: mini_batches (2) must divide prompts_per_step (3)",
        "tasks.train_dir: a train run needs tasks.train_dir",
    ):
        assert problem in result.stderr, result.stderr
    assert "(4 problems)" in result.stderr


def test_eval_takes_a_spec_file_too(toy, tmp_path):
    spec = write_spec(
        tmp_path / "eval.json",
        {
            "kind": "eval",
            "agent": "oracle",
            "tasks": {"eval_dir": str(toy / "train")},
            "evaluation": {"samples_per_task": 2, "pass_at_k": [1, 2]},
        },
    )
    result = run_cli("eval", str(spec), "--out", str(tmp_path / "events.jsonl"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "policy oracle" in result.stdout
    assert (
        "rollouts            4 (4 attempts)" in result.stdout and "Pass@1              1.000" in result.stdout
    )


def test_eval_refuses_a_train_spec(toy, tmp_path):
    spec = write_spec(
        tmp_path / "spec.json",
        {**train_spec(toy), "tasks": {"train_dir": str(toy / "train"), "eval_dir": str(toy / "eval")}},
    )
    result = run_cli("eval", str(spec))
    assert result.returncode == 1 and "is a train spec" in result.stderr
