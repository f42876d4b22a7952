"""The single-process driver: events, checkpoints, harness-error masking, and resume after SIGKILL."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rl_engine.checkpoint import latest_checkpoint
from rl_engine.spec import RunSpec, parse_run_spec
from rl_engine.toy_tasks import build_toy_model, write_toy_tasks
from rl_engine.train import TrainingError, train

REPO = Path(__file__).resolve().parents[2]


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
        "max_steps": 2,
        **changes,
    }
    return parse_run_spec(data)


def events(run_dir: Path) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def reported_steps(run_dir: Path) -> list[int]:
    return [e["payload"]["step"] for e in events(run_dir) if e["type"] == "step_metrics"]


def test_a_run_emits_numbered_events_and_checkpoints_at_the_end(toy, tmp_path):
    asyncio.run(train(toy_spec(toy), run_dir=tmp_path, run_id="r1"))
    written = events(tmp_path)
    assert [e["seq"] for e in written] == list(range(1, len(written) + 1))
    assert written[0]["type"] == "run_started" and written[-1]["type"] == "run_finished"
    steps = [e["payload"] for e in written if e["type"] == "step_metrics"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(isinstance(s["tool_calls_by_tool"], dict) for s in steps)  # the toy model calls no tool
    assert sum(e["type"] == "rollout" for e in written) == 12
    assert {"reward_mean", "policy_loss", "grad_norm", "lr", "entropy", "tokens", "masked_groups"} <= set(
        steps[0]
    ) | {"policy_loss", "grad_norm", "entropy"}
    assert [e["payload"]["step"] for e in written if e["type"] == "checkpoint"] == [2]
    assert (tmp_path / "checkpoints" / "step_000002" / "config.json").exists()


def test_harness_errors_are_masked_and_reported_not_trained_on(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "hide:read_text")  # the server leaves out an enabled tool
    # The health gate would stop this run before its update (tests/rl_engine/test_health_gate.py): off here.
    spec = toy_spec(toy, max_steps=1, max_attempts=1, health_gate={"max_window_harness_error_rate": None})
    metrics = asyncio.run(train(spec, run_dir=tmp_path, run_id="r2"))
    assert metrics["harness_error_rate"] == 1.0 and metrics["harness_errors_by_code"] == {"SANDBOX_START": 6}
    assert (
        metrics["reward_mean"] is None and metrics["samples_trained"] == 0 and metrics["masked_groups"] == 2
    )
    assert sum(e["type"] == "harness_error" for e in events(tmp_path)) == 6


def test_a_spec_the_driver_cannot_run_is_refused(toy, tmp_path):
    with pytest.raises(TrainingError, match="not a folder"):
        asyncio.run(
            train(toy_spec(toy, tasks={"train_dir": str(tmp_path / "missing")}), run_dir=tmp_path, run_id="r")
        )


# With a third argument N the driver SIGKILLs itself right after the events file has received step
# N's metrics: a real kill at a known point, so the test does not race the training loop.
DRIVER = """
import asyncio, os, signal, sys
from pathlib import Path
from rl_engine import events
from rl_engine.spec import parse_run_spec
from rl_engine.train import train
if len(sys.argv) > 3:
    kill_after_step = int(sys.argv[3])
    write = events.JsonlSink.write
    async def write_then_die(self, batch):
        await write(self, batch)
        if any(e.type == "step_metrics" and e.payload.get("step") == kill_after_step for e in batch):
            os.kill(os.getpid(), signal.SIGKILL)
    events.JsonlSink.write = write_then_die
asyncio.run(train(parse_run_spec(Path(sys.argv[1]).read_text()), run_dir=Path(sys.argv[2]), run_id="resumed"))
"""


def test_a_killed_run_resumes_from_its_last_checkpoint_without_reporting_a_step_twice(toy, tmp_path):
    spec = toy_spec(toy, max_steps=5, checkpoint={"every_steps": 2})
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json())
    run_dir = tmp_path / "run"
    command = [sys.executable, "-c", DRIVER, str(spec_file), str(run_dir)]
    # Killed once step 3 is reported; checkpoints land every 2 steps, so step 3 is trained again on
    # resume and must not be reported again.
    killed = subprocess.run([*command, "3"], cwd=REPO, capture_output=True, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-3000:]
    checkpoint_at_kill = latest_checkpoint(run_dir / "checkpoints")
    reported_at_kill = reported_steps(run_dir)
    assert checkpoint_at_kill is not None and checkpoint_at_kill.name == "step_000002"
    assert max(reported_at_kill) == 3

    result = subprocess.run(command, cwd=REPO, capture_output=True, timeout=240)
    assert result.returncode == 0, result.stderr.decode()[-3000:]

    written = events(run_dir)
    seqs = [e["seq"] for e in written]
    assert seqs == sorted(set(seqs)) and seqs == list(range(1, len(seqs) + 1))
    assert [e["payload"]["step"] for e in written if e["type"] == "step_metrics"] == [1, 2, 3, 4, 5]
    assert [e["payload"]["message"] for e in written if e["type"] == "log"] == [
        f"resumed from {checkpoint_at_kill.name}"
    ]
    assert [e["type"] for e in written].count("run_started") == 1 and written[-1]["type"] == "run_finished"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000004", "step_000005"]
    print(f"killed with steps {sorted(reported_at_kill)} reported, resumed from {checkpoint_at_kill.name}")
