"""The in-run health gate: it trips on a real injected burst of harness errors (the tool server
leaves out an enabled tool from step 2 on), never on a clean run, stops before the corrupted update
with its evidence in the events, and a paused run resumes from its checkpoint with a fresh window."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_engine.health_gate import EXIT_GATE_FAILED, HealthGate, HealthGateTripped
from rl_engine.spec import HealthGateSpec, RunSpec, parse_run_spec
from rl_engine.toy_tasks import build_toy_model, write_toy_tasks
from rl_engine.train import train

REPO = Path(__file__).resolve().parents[2]
BURST = "hide:read_text"  # every sandbox start fails with SANDBOX_START: a real fault of the real server
GATE = {"window_rollouts": 12, "max_window_harness_error_rate": 0.3}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    write_toy_tasks(root / "tasks", "colours", ["grass", "sky", "snow"])
    build_toy_model(root / "model", hidden_size=32)
    return root


def toy_spec(toy: Path, **changes) -> RunSpec:
    data = {
        "kind": "train",
        "model": {"path": str(toy / "model")},
        "tasks": {"train_dir": str(toy / "tasks")},
        "sampling": {"max_new_tokens_per_turn": 1},
        "batch": {"prompts_per_step": 2, "samples_per_prompt": 3, "micro_batch_size": 8},
        "optimizer": {"lr": 1e-3},
        "resources": {"sandboxes_per_worker": 6},
        "max_attempts": 1,
        "max_steps": 3,
        "health_gate": GATE,
        **changes,
    }
    return parse_run_spec(data)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def burst_after_step_1(monkeypatch):
    """on_step hook: from step 2 on every sandbox start fails (faults are read at each start)."""

    def on_step(step: int, metrics: dict) -> None:
        if step == 1:
            monkeypatch.setenv("PRACTICUM_FAULTS", BURST)

    return on_step


class TestWindow:
    def gate(self, **spec) -> HealthGate:
        return HealthGate(HealthGateSpec(**spec))

    def test_it_trips_only_above_the_threshold_over_the_last_n_rollouts(self):
        gate = self.gate(window_rollouts=4, max_window_harness_error_rate=0.5)
        for seq, code in enumerate(["TOOL_TIMEOUT", None, None, "TOOL_TIMEOUT"], start=10):
            gate.observe(step=1, code=code, seq=seq)
        assert gate.check(1) is None  # 2 of 4 is not above 0.5
        gate.observe(step=2, code="JUDGE", seq=20)  # slides out the first timeout: 2 of 4 again
        assert gate.check(2) is None
        gate.observe(step=2, code="JUDGE", seq=21)
        trip = gate.check(2)
        assert trip is not None and (trip.rate, trip.rollouts, trip.harness_errors) == (0.75, 4, 3)
        assert trip.by_code == {"JUDGE": 2, "TOOL_TIMEOUT": 1} and trip.seqs == [13, 20, 21]
        assert (trip.first_step, trip.last_step, trip.action) == (1, 2, "fail")

    def test_a_null_threshold_turns_the_gate_off(self):
        gate = self.gate(max_window_harness_error_rate=None)
        gate.observe(step=1, code="SANDBOX_START")
        assert gate.check(1) is None


def test_a_clean_run_is_never_stopped(toy, tmp_path):
    spec = toy_spec(toy, max_steps=2, health_gate={**GATE, "max_window_harness_error_rate": 0.0})
    asyncio.run(train(spec, run_dir=tmp_path, run_id="clean"))
    written = events(tmp_path)
    assert written[-1]["type"] == "run_finished" and "health_gate" not in written[-1]["payload"]
    assert [e["payload"]["step"] for e in written if e["type"] == "step_metrics"] == [1, 2]


def test_a_burst_fails_the_run_before_the_corrupted_update_with_the_evidence(toy, tmp_path, monkeypatch):
    monkeypatch.delenv("PRACTICUM_FAULTS", raising=False)
    with pytest.raises(HealthGateTripped) as stopped:
        asyncio.run(
            train(toy_spec(toy), run_dir=tmp_path, run_id="burst", on_step=burst_after_step_1(monkeypatch))
        )
    written = events(tmp_path)
    # Step 2's rollouts are reported (they are the evidence), its update and metrics never happen.
    assert [e["payload"]["step"] for e in written if e["type"] == "step_metrics"] == [1]
    offending = [
        e["seq"]
        for e in written
        if e["type"] == "rollout" and e["payload"]["summary"]["outcome"] == "harness_error"
    ]
    assert len(offending) == 6
    log, finished = written[-2], written[-1]
    assert log["type"] == "log" and finished["type"] == "run_finished"
    evidence = log["payload"]["health_gate"]
    assert (
        evidence == finished["payload"]["health_gate"] and finished["payload"]["stopped_by"] == "health_gate"
    )
    assert evidence["action"] == "fail" and evidence["step"] == 2
    assert (evidence["rate"], evidence["threshold"], evidence["rollouts"]) == (0.5, 0.3, 12)
    assert evidence["by_code"] == {"SANDBOX_START": 6} and evidence["seqs"] == offending
    assert (evidence["first_step"], evidence["last_step"], evidence["checkpoint"]) == (1, 2, None)
    assert finished["payload"]["steps"] == 1 and finished["payload"]["last"]["step"] == 1
    assert "6 of the last 12 final rollouts" in str(stopped.value) and "SANDBOX_START 6" in str(stopped.value)
    assert not (tmp_path / "checkpoints").exists()  # fail keeps nothing to resume from


def test_a_paused_run_resumes_from_its_checkpoint_with_a_fresh_window(toy, tmp_path, monkeypatch):
    monkeypatch.delenv("PRACTICUM_FAULTS", raising=False)
    spec = toy_spec(toy, health_gate={**GATE, "on_trip": "pause"})
    with pytest.raises(HealthGateTripped) as stopped:
        asyncio.run(train(spec, run_dir=tmp_path, run_id="pause", on_step=burst_after_step_1(monkeypatch)))
    assert stopped.value.trip.action == "pause" and stopped.value.exit_code == 4
    paused = events(tmp_path)
    checkpoint = [e["payload"] for e in paused if e["type"] == "checkpoint"]
    assert checkpoint == [{"step": 1, "path": str(tmp_path / "checkpoints" / "step_000001")}]
    assert paused[-1]["payload"]["health_gate"]["checkpoint_step"] == 1

    # The harness is fixed; the window that held the burst is gone with the process.
    monkeypatch.delenv("PRACTICUM_FAULTS")
    asyncio.run(train(spec, run_dir=tmp_path, run_id="pause"))
    written = events(tmp_path)
    seqs = [e["seq"] for e in written]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [e["payload"]["step"] for e in written if e["type"] == "step_metrics"] == [1, 2, 3]
    assert [e["type"] for e in written].count("run_started") == 1
    resumed = written[len(paused)]
    assert resumed["type"] == "log" and resumed["payload"]["message"] == "resumed from step_000001"
    assert written[-1]["type"] == "run_finished" and "health_gate" not in written[-1]["payload"]
    # Step 2 ran twice: once into the burst (kept as evidence), once for real.
    step_2 = [e for e in written if e["type"] == "rollout" and e["payload"]["summary"]["step"] == 2]
    assert len(step_2) == 12


def test_the_cli_exits_with_the_gate_code_and_says_why(toy, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(toy_spec(toy, max_steps=2).model_dump_json())
    env = dict(os.environ, PRACTICUM_FAULTS=BURST)
    result = subprocess.run(
        [sys.executable, "-m", "rl_engine", "train", str(spec), "--run-dir", str(tmp_path / "run")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == EXIT_GATE_FAILED, result.stderr[-3000:]
    assert "error: health gate: 6 of the last 6 final rollouts (step 1) were harness errors" in result.stderr
    assert "failed before the update of step 1" in result.stderr
