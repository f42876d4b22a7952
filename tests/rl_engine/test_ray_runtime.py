"""Training on Ray: a trainer actor, an inference actor and a rollout worker on a real
`ray start --head` cluster joined through RAY_ADDRESS; evaluation with Pass@k and checkpoints."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rl_engine.spec import parse_run_spec
from rl_engine.toy_tasks import build_toy_model, write_toy_tasks
from rl_engine.train import train


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.mark.timeout(600)
def test_a_two_step_run_on_a_ray_cluster_trains_evaluates_and_checkpoints_through_actors(
    live_ray_cluster, tmp_path, monkeypatch
):
    import ray

    write_toy_tasks(tmp_path / "train", "colours", ["grass", "sky"])
    write_toy_tasks(tmp_path / "eval", "colours", ["snow", "coal"])
    build_toy_model(tmp_path / "model", hidden_size=32)
    spec = parse_run_spec(
        {
            "kind": "train",
            "model": {"path": str(tmp_path / "model")},
            "tasks": {"train_dir": str(tmp_path / "train"), "eval_dir": str(tmp_path / "eval")},
            "sampling": {"max_new_tokens_per_turn": 1},
            "batch": {"prompts_per_step": 2, "samples_per_prompt": 3},
            "optimizer": {"lr": 1e-3},
            # A random model mostly scores 0 everywhere; keep such groups so the update sees tokens.
            "algorithm": {"zero_variance_filter": False},
            "evaluation": {"every_steps": 2, "at_start": False, "samples_per_task": 2, "pass_at_k": [1, 2]},
            "resources": {"rollout_workers": 1, "sandboxes_per_worker": 6},
            "max_steps": 2,
        }
    )
    monkeypatch.setenv("RAY_ADDRESS", live_ray_cluster.gcs_address)
    seen: list[int] = []
    try:
        metrics = asyncio.run(
            train(spec, run_dir=tmp_path / "run", run_id="on-ray", on_step=lambda step, m: seen.append(step))
        )
    finally:
        ray.shutdown()

    written = events(tmp_path / "run")
    assert [e["seq"] for e in written] == list(range(1, len(written) + 1))
    started = written[0]
    assert started["type"] == "run_started" and written[-1]["type"] == "run_finished"
    assert started["payload"]["runtime"]["kind"] == "ray"
    # The cluster reports its node's own IP; the port says it is the head the test started.
    gcs_port = live_ray_cluster.gcs_address.rsplit(":", 1)[1]
    assert started["payload"]["runtime"]["address"].endswith(f":{gcs_port}")
    assert [e["payload"]["step"] for e in written if e["type"] == "step_metrics"] == [1, 2] == seen
    train_rollouts = [e for e in written if e["type"] == "rollout" and e["payload"]["split"] == "train"]
    eval_rollouts = [e for e in written if e["type"] == "rollout" and e["payload"]["split"] == "eval"]
    assert len(train_rollouts) == 12 and len(eval_rollouts) == 4
    assert all(e["payload"]["summary"]["outcome"] in {"graded", "agent_error"} for e in train_rollouts)
    evaluation = next(e["payload"] for e in written if e["type"] == "log" and "evaluation" in e["payload"])
    assert evaluation["step"] == 2 and evaluation["evaluation"]["eval_rollouts"] == 4
    assert 0 <= evaluation["evaluation"]["eval_pass_at_1"] <= evaluation["evaluation"]["eval_pass_at_2"] <= 1
    assert metrics["eval_pass_at_2"] == evaluation["evaluation"]["eval_pass_at_2"]
    assert metrics["samples_trained"] == 6 and metrics["tokens"] == 6 and metrics["optimizer_steps"] == 1
    assert [e["payload"]["step"] for e in written if e["type"] == "checkpoint"] == [2]
    assert (tmp_path / "run" / "checkpoints" / "step_000002" / "trainer_state.pt").exists()
