"""SFT warm start: supervised fine-tuning on oracle traces before RL step 1 (`sft_warm_start`).

The demonstrations come from the real harness: the oracle policy (the bundle's solve.py or golden
answer) runs on every train task through `run_rollout` (sandbox, MCP tools, agent loop, grader),
but each of its turns is handed to the loop *as the model would write it* — a Hermes `<tool_call>`
block in the turn's text, or, for a final `submit_answer` the model's tokenizer cannot spell, the
answer as plain text (the loop takes a plain-text turn as the final answer, just as it takes a
submission). So the loop parses the demonstration exactly like model output, and only rollouts the
grader passes are kept.

Each demonstration is laid out with the same `SequenceBuilder` as RL rollouts (chat template,
prefix-stable turns, tool results): the loss mask is 1 only on the turn's own tokens plus its end-of-
turn token, so the model learns its own tokens and never the prompt or tool results. Training is
token-mean negative log-likelihood with AdamW (no weight decay) at `lr`, `batch_size` traces per
optimiser step, for `epochs` passes; the trainer's RL optimiser is untouched.

Done once: the driver runs it only when a run starts without a checkpoint; the first checkpoint
holds the fine-tuned weights, so a resumed run never repeats it.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rl_engine.agent.chat_format import END_OF_TURN, _assistant_text
from rl_engine.agent.loop import SUBMIT_TOOL
from rl_engine.agent.policies import OraclePolicy
from rl_engine.agent.policy import AssistantTurn, PolicyContext
from rl_engine.outcomes import Outcome
from rl_engine.rollout import RolloutConfig, run_rollout
from rl_engine.sequences import SequenceBuilder, TokenSequence

if TYPE_CHECKING:
    from rl_engine.bundle import TaskBundle
    from rl_engine.grading import JudgeConfig
    from rl_engine.sandbox import SandboxConfig, ToolSpec


class DemonstrationPolicy:
    """The oracle, speaking in the model's own text format, with its token sequence recorded."""

    name = "oracle-demonstration"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.oracle = OraclePolicy()
        self.builder: SequenceBuilder | None = None
        self.end_of_turn = _end_of_turn_id(tokenizer)

    @property
    def sequence(self) -> TokenSequence | None:
        return self.builder.sequence if self.builder else None

    async def next_turn(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        if context.turn == 0 or self.builder is None:
            self.builder = SequenceBuilder(self.tokenizer, tools)
        prompt = self.builder.prompt_ids(messages)
        turn = await self.oracle.next_turn(messages, tools, context=context)
        text = demonstration_text(turn, self.tokenizer)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.end_of_turn]
        self.builder.add_turn(ids, None, text)
        return AssistantTurn(text=text, prompt_tokens=len(prompt), completion_tokens=len(ids))


def demonstration_text(turn: AssistantTurn, tokenizer: Any) -> str:
    """The turn as the model would generate it: text plus Hermes tool-call blocks.

    A turn that only submits the final answer becomes that answer as plain text when the tokenizer
    cannot spell the tool-call form (a toy word-level vocabulary): the loop accepts both."""
    text = _assistant_text({"content": turn.text, "tool_calls": turn.tool_calls}).lstrip("\n")
    calls = turn.tool_calls or []
    if len(calls) == 1 and calls[0]["function"]["name"] == SUBMIT_TOOL and not _spells(tokenizer, text):
        arguments = json.loads(calls[0]["function"]["arguments"] or "{}")
        return str(arguments.get("answer", ""))
    return text


def _spells(tokenizer: Any, text: str) -> bool:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids, skip_special_tokens=True) == text


def _end_of_turn_id(tokenizer: Any) -> int:
    token = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(token, int) and token != tokenizer.unk_token_id:
        return token
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer has neither {END_OF_TURN} nor an eos token to end a turn with")
    return tokenizer.eos_token_id


@dataclass
class Demonstrations:
    sequences: list[TokenSequence] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)  # the task of each sequence
    rejected: dict[str, str] = field(default_factory=dict)  # task → why its trace is not used


async def collect_demonstrations(
    bundles: list[TaskBundle],
    *,
    tokenizer: Any,
    sandbox_config: SandboxConfig,
    judge: JudgeConfig | None,
    concurrency: int = 4,
) -> Demonstrations:
    """One oracle demonstration per task through the real harness; only graded, passing ones are kept."""
    gate = asyncio.Semaphore(concurrency)

    async def one(bundle: TaskBundle) -> tuple[TaskBundle, DemonstrationPolicy, Any]:
        policy = DemonstrationPolicy(tokenizer)
        async with gate:
            records = await run_rollout(
                bundle, policy, sandbox_config=sandbox_config, judge=judge, config=RolloutConfig()
            )
        return bundle, policy, records[-1].summary

    found = Demonstrations()
    for bundle, policy, summary in await asyncio.gather(*(one(bundle) for bundle in bundles)):
        if summary.outcome != Outcome.GRADED or not summary.passed or policy.sequence is None:
            reason = summary.message or summary.code or f"score {summary.score}"
            found.rejected[bundle.name] = f"{summary.outcome}: {reason}"
            continue
        found.sequences.append(policy.sequence)
        found.tasks.append(bundle.name)
    return found


def sequence_loss(model: torch.nn.Module, sequences: list[TokenSequence], *, pad_token_id: int) -> float:
    """Token-mean negative log-likelihood of the sequences' model tokens."""
    model.eval()
    with torch.no_grad():
        total, count = _nll(model, sequences, pad_token_id)
    return float(total) / max(1, count)


def sft_train(
    model: torch.nn.Module,
    sequences: list[TokenSequence],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    pad_token_id: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Fine-tune `model` in place on the sequences' model tokens; returns the losses for the run's log."""
    if not sequences:
        raise ValueError("no demonstrations to fine-tune on")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    order = list(range(len(sequences)))
    rng = random.Random(seed)
    loss_before = sequence_loss(model, sequences, pad_token_id=pad_token_id)
    per_epoch: list[float] = []
    steps = 0
    model.train()
    for _ in range(epochs):
        rng.shuffle(order)
        total_loss, total_tokens = 0.0, 0
        for start in range(0, len(order), batch_size):
            batch = [sequences[index] for index in order[start : start + batch_size]]
            optimizer.zero_grad(set_to_none=True)
            total, count = _nll(model, batch, pad_token_id)
            (total / max(1, count)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            steps += 1
            total_loss += float(total.detach())
            total_tokens += count
        per_epoch.append(total_loss / max(1, total_tokens))
    model.zero_grad(set_to_none=True)
    return {
        "sft_loss_before": loss_before,
        "sft_loss_after": sequence_loss(model, sequences, pad_token_id=pad_token_id),
        "sft_loss_per_epoch": per_epoch,
        "sft_traces": len(sequences),
        "sft_tokens": sum(sequence.model_tokens for sequence in sequences),
        "sft_optimizer_steps": steps,
    }


def _nll(model: torch.nn.Module, sequences: list[TokenSequence], pad_token_id: int) -> tuple[Any, int]:
    """(summed NLL over the model tokens, their count) for one padded batch."""
    device = next(model.parameters()).device
    width = max(len(sequence.input_ids) for sequence in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.float32)
    for row, sequence in enumerate(sequences):
        length = len(sequence.input_ids)
        ids[row, :length] = torch.tensor(sequence.input_ids)
        attention[row, :length] = 1
        mask[row, :length] = torch.tensor(sequence.loss_mask, dtype=torch.float32)
    ids, attention, mask = ids.to(device), attention.to(device), mask.to(device)
    dtype = torch.bfloat16 if device.type == "cuda" else None
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    log_probs = logits.float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    weights = mask[:, 1:]
    return -(log_probs * weights).sum(), int(weights.sum())
