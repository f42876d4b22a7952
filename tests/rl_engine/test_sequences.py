"""Multi-turn training sequences: built from a real episode (real sandbox, real MCP tools), the
mask is 1 exactly on the model's own tokens, and tool-result tokens never receive gradient."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
import torch

from rl_engine.agent.loop import AgentTrace, run_agent
from rl_engine.bundle import load_bundle
from rl_engine.inference import Generation, SamplingParams
from rl_engine.inference.hf import HFEngine
from rl_engine.inference.policy import BatchingEngine, EnginePolicy
from rl_engine.sandbox import SandboxConfig, create_sandbox
from rl_engine.sequences import SequenceBuilder, SequenceError, sequence_from_trace
from rl_engine.spec import AlgorithmSpec, BatchSpec, OptimizerSpec
from rl_engine.trainer import Trainer, TrainingSample
from tests.rl_engine.sample_bundles import write_task
from tests.rl_engine.tiny_model import QWEN_LIKE_TEMPLATE, build_tiny_model

NOTES = "Adjusted APAC growth: 12.5 percent, target 15 percent.\n"
TURNS = [
    '<tool_call>\n{"name": "read_text", "arguments": {"path": "notes.txt"}}\n</tool_call>',
    '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": "12.5% and not met"}}\n</tool_call>',
]


@dataclass
class TeacherForcedEngine:
    """Generates the given turns (each closed by the end-of-turn token) and scores them with the real
    model, so every other part of the episode — sandbox, tools, sequence, trainer — is the real one."""

    inner: HFEngine
    turns: list[str]
    name: str = "teacher-forced"
    token_level: bool = True

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        results = []
        for prompt in prompts:
            turn = len([t for t in self.turns if t is None])
            text = self.turns[turn]
            self.turns[turn] = None
            tokenizer = self.inner.tokenizer
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            with torch.no_grad():
                logits = self.inner.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
            logprobs = logits.log_softmax(-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
            results.append(
                Generation(text=text, finish_reason="stop", token_ids=ids, logprobs=logprobs.tolist())
            )
        return results

    def load_weights(self, state_dict) -> None:
        self.inner.load_weights(state_dict)

    def sync_from(self, model) -> None:
        self.inner.sync_from(model)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def episode(model_dir, tmp_path_factory):
    """One real two-turn episode: read_text on notes.txt, then submit_answer."""
    bundle = load_bundle(write_task(tmp_path_factory.mktemp("task") / "task", world={"notes.txt": NOTES}))
    hf = HFEngine.from_pretrained(model_dir, device="cpu")
    engine = TeacherForcedEngine(hf, list(TURNS))

    async def run():
        policy = EnginePolicy(BatchingEngine(engine), hf.tokenizer, SamplingParams(max_new_tokens=64))
        trace = AgentTrace()
        async with create_sandbox(bundle, SandboxConfig()) as sandbox:
            tools = await sandbox.list_tools()
            answer = await run_agent(bundle, policy, sandbox, tools, trace=trace)
        return policy, trace, tools, answer

    policy, trace, tools, answer = asyncio.run(run())
    return {"policy": policy, "trace": trace, "tools": tools, "answer": answer, "hf": hf}


def test_the_episode_ran_both_tools_for_real(episode):
    assert episode["answer"] == "12.5% and not met"
    assert NOTES.strip() in episode["trace"].turns[0].tool_calls[0].result


def test_the_mask_covers_exactly_the_models_own_turns(episode):
    sequence = episode["policy"].sequence
    tokenizer = episode["hf"].tokenizer
    own = [token for token, bit in zip(sequence.input_ids, sequence.loss_mask, strict=True) if bit]
    expected = []
    for text in TURNS:
        expected += tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert own == expected
    context = tokenizer.decode(
        [t for t, bit in zip(sequence.input_ids, sequence.loss_mask, strict=True) if not bit]
    )
    assert "Adjusted APAC growth" in context and "<tool_response>" in context and "read_text" in context


def test_the_log_probs_sit_on_the_models_tokens_only(episode):
    sequence = episode["policy"].sequence
    assert all(lp == 0.0 for lp, bit in zip(sequence.logprobs, sequence.loss_mask, strict=True) if not bit)
    assert all(lp < 0.0 for lp, bit in zip(sequence.logprobs, sequence.loss_mask, strict=True) if bit)


def test_each_turn_was_generated_from_the_sequence_so_far(episode):
    sequence = episode["policy"].sequence
    first_turn_end = sequence.loss_mask.index(1) + len(episode["trace"].turns[0].token_ids)
    assert episode["trace"].turns[1].prompt_tokens > first_turn_end
    assert sequence.loss_mask[first_turn_end : episode["trace"].turns[1].prompt_tokens] == [0] * (
        episode["trace"].turns[1].prompt_tokens - first_turn_end
    )


def test_rebuilding_from_the_trace_gives_the_same_sequence(episode):
    rebuilt = sequence_from_trace(episode["trace"], episode["hf"].tokenizer, episode["tools"])
    assert rebuilt == episode["policy"].sequence


def test_tool_result_tokens_never_receive_gradient(episode):
    """The loss's gradient w.r.t. the logits is exactly 0 wherever the next token is not the model's."""
    sequence = episode["policy"].sequence
    model = HFEngine.from_pretrained(episode["hf"].model.name_or_path, device="cpu").model
    trainer = Trainer(
        model,
        algorithm=AlgorithmSpec(loss_reduction="token_mean"),
        optimizer=OptimizerSpec(lr=1e-3),
        batch=BatchSpec(micro_batch_size=4),
    )
    captured = []

    def keep_logits(module, inputs, output):
        output.retain_grad()
        captured.append(output)

    model.lm_head.register_forward_hook(keep_logits)
    samples = [
        TrainingSample(sequence.input_ids, sequence.loss_mask, sequence.logprobs, advantage=1.0, group_id=0),
        TrainingSample(sequence.input_ids, sequence.loss_mask, sequence.logprobs, advantage=-1.0, group_id=0),
    ]
    samples[1].advantage = -0.5
    trainer.update(samples)
    # Both rows are one group, so the trainer runs the prompt before the model's first token once
    # (shared prefix); the last lm_head call covers the rest of the sequence, tool results included.
    logits_grad = captured[-1].grad[0]
    shared = len(sequence.input_ids) - logits_grad.shape[0]
    assert shared == sequence.loss_mask.index(1) - 1
    next_is_own = torch.tensor(sequence.loss_mask[1:] + [0], dtype=torch.bool)
    assert torch.all(logits_grad[~next_is_own[shared:]] == 0)
    assert torch.all(logits_grad[next_is_own[shared:]].abs().sum(-1) > 0)
    tool_result_start = episode["hf"].tokenizer.decode(sequence.input_ids).index("Adjusted APAC")
    assert tool_result_start > 0 and (~next_is_own[shared:]).sum() > next_is_own.sum()


def test_a_template_that_rewrites_earlier_turns_is_refused(model_dir, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = QWEN_LIKE_TEMPLATE  # lists the tools after the conversation
    builder = SequenceBuilder(tokenizer, [_Tool("read_text")])
    messages = [{"role": "user", "content": "hi"}]
    builder.prompt_ids(messages)
    builder.add_turn([5, 6], [-1.0, -1.0], tokenizer.decode([5, 6]))
    messages += [
        {"role": "assistant", "content": tokenizer.decode([5, 6])},
        {"role": "user", "content": "more"},
    ]
    with pytest.raises(SequenceError, match="prefix-stable"):
        builder.prompt_ids(messages)


@dataclass
class _Tool:
    name: str
    description: str = "a tool"
    input_schema: dict | None = None
