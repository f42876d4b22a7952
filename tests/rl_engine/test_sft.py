"""The SFT warm start: oracle demonstrations through the real harness, laid out like RL sequences
(only the model's own tokens trained), a loss that falls, a pass rate that rises, done once per run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rl_engine.agent.parsing import parse_turn
from rl_engine.agent.policies import answer_turn
from rl_engine.bundle import load_bundle
from rl_engine.models import build_tiny_model
from rl_engine.runtime import load_model
from rl_engine.sandbox import SandboxConfig, ToolSpec
from rl_engine.sft import collect_demonstrations, demonstration_text, sequence_loss, sft_train
from rl_engine.spec import parse_run_spec
from rl_engine.toy_tasks import TASK_SETS, build_toy_model, write_toy_tasks
from rl_engine.train import train

SUBMIT = ToolSpec(name="submit_answer", description="Submit the final answer.", input_schema={})


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-toy")
    write_toy_tasks(root / "tasks", "colours")
    build_toy_model(root / "model")
    return root


def demonstrations(toy: Path, tokenizer):
    bundles = [load_bundle(folder) for folder in sorted((toy / "tasks").iterdir())]
    return asyncio.run(
        collect_demonstrations(bundles, tokenizer=tokenizer, sandbox_config=SandboxConfig(), judge=None)
    )


def test_oracle_demonstrations_train_only_the_answer_and_its_end_of_turn(toy):
    tokenizer, _ = load_model(toy / "model", "cpu")
    found = demonstrations(toy, tokenizer)
    assert found.rejected == {} and len(found.sequences) == 6
    for task, sequence in zip(found.tasks, found.sequences, strict=True):
        colour = TASK_SETS["colours"][task.removeprefix("toy/colour-of-")]
        trained = [token for token, bit in zip(sequence.input_ids, sequence.loss_mask, strict=True) if bit]
        assert tokenizer.convert_ids_to_tokens(trained) == [colour, "<|im_end|>"]
        # The prompt is the one an RL rollout of this task is generated from (the chat template's).
        prompt = tokenizer.decode(sequence.input_ids[: sequence.loss_mask.index(1)])
        assert prompt.startswith("<|im_start|> user") and prompt.endswith("<|im_start|> assistant")


def test_a_tokenizer_that_cannot_spell_a_tool_call_is_shown_the_answer_as_plain_text(toy):
    toy_tokenizer = AutoTokenizer.from_pretrained(toy / "model")
    assert demonstration_text(answer_turn("APAC grew 12.5%", [SUBMIT]), toy_tokenizer) == "APAC grew 12.5%"


def test_the_hermes_form_parses_back_to_the_same_submission(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny"))
    text = demonstration_text(answer_turn("APAC grew 12.5%", [SUBMIT]), tokenizer)
    assert text.startswith("<tool_call>")
    parsed = parse_turn(text, None, ["submit_answer"])
    assert [(call.name, call.arguments) for call in parsed.calls] == [
        ("submit_answer", {"answer": "APAC grew 12.5%"})
    ]


def test_fine_tuning_lowers_the_loss_on_the_oracle_traces(toy):
    tokenizer, model = load_model(toy / "model", "cpu")
    found = demonstrations(toy, tokenizer)
    before = sequence_loss(model, found.sequences, pad_token_id=tokenizer.pad_token_id)
    metrics = sft_train(
        model, found.sequences, epochs=20, lr=1e-2, batch_size=8, pad_token_id=tokenizer.pad_token_id
    )
    after = sequence_loss(model, found.sequences, pad_token_id=tokenizer.pad_token_id)
    print(f"SFT loss on the oracle traces: {before:.3f} → {after:.3f}")
    assert metrics["sft_loss_before"] == pytest.approx(before) and metrics["sft_loss_after"] == pytest.approx(
        after
    )
    assert after < before / 10
    assert metrics["sft_optimizer_steps"] == 20 and metrics["sft_tokens"] == 12


def run_spec(toy: Path, *, warm_start: bool, max_steps: int):
    return parse_run_spec(
        {
            "kind": "train",
            "model": {"path": str(toy / "model")},
            "tasks": {"train_dir": str(toy / "tasks")},
            "sampling": {"max_new_tokens_per_turn": 1},
            "batch": {"prompts_per_step": 6, "samples_per_prompt": 4, "micro_batch_size": 24},
            "optimizer": {"lr": 0.0},  # RL changes nothing: the pass rate is the warm start's
            "resources": {"sandboxes_per_worker": 12},
            "sft_warm_start": {"enabled": warm_start, "epochs": 20, "lr": 1e-2},
            "max_steps": max_steps,
            "seed": 3,
        }
    )


def pass_rates(toy: Path, run_dir: Path, *, warm_start: bool, max_steps: int) -> list[float]:
    rates: list[float] = []
    asyncio.run(
        train(
            run_spec(toy, warm_start=warm_start, max_steps=max_steps),
            run_dir=run_dir,
            run_id="sft",
            on_step=lambda step, metrics: rates.append(metrics["pass_at_1"]),
        )
    )
    return rates


def test_the_warm_start_raises_the_toy_pass_rate_and_is_not_repeated_on_resume(toy, tmp_path):
    cold = pass_rates(toy, tmp_path / "cold", warm_start=False, max_steps=1)
    warm = pass_rates(toy, tmp_path / "warm", warm_start=True, max_steps=1)
    print(f"pass rate at step 1 on the colours set: cold {cold}, after the warm start {warm}")
    assert cold[0] <= 0.2 and warm[0] >= 0.8

    resumed = pass_rates(toy, tmp_path / "warm", warm_start=True, max_steps=2)  # resumes from step 1
    assert resumed[0] >= 0.8  # the checkpoint holds the fine-tuned weights
    events = [json.loads(line) for line in (tmp_path / "warm" / "events.jsonl").read_text().splitlines()]
    logs = [e["payload"] for e in events if e["type"] == "log"]
    assert [log["message"] for log in logs] == ["sft warm start", "resumed from step_000001"]
    sft = logs[0]["sft"]
    assert sft["sft_traces"] == 6 and sft["sft_loss_after"] < sft["sft_loss_before"] / 10
    assert [e["payload"]["step"] for e in events if e["type"] == "step_metrics"] == [1, 2]
