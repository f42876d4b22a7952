"""One training sequence per rollout, with a mask that is 1 only on the model's own tokens.

A multi-turn episode is kept as a single token sequence that grows turn by turn
(prompt → turn 1 → tool results → turn 2 → ...). The model is always given this exact sequence
to continue, so the tokens it saw while generating are the tokens the trainer scores — no
re-tokenisation of the model's own text ever happens (it could split differently and make the
old and new log-probs describe different sequences).

How the text between two turns is found: the chat template renders the whole conversation each
turn; the previous rendering is a prefix of the new one, followed by the assistant's text as the
template renders it, then the tool results and the next generation prompt. That tail is
tokenised and appended with mask 0. When the model ended its turn with a stop token (end of
turn), that token is already in the sequence, so its text is dropped from the tail. A template
that is not prefix-stable (one that rewrites earlier turns, e.g. strips reasoning) is refused
with a SequenceError rather than silently training on a sequence the model never saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rl_engine.agent.chat_format import ToolSchemaLike, render_prompt
from rl_engine.agent.loop import AgentTrace


class SequenceError(Exception):
    """The conversation cannot be laid out as one token sequence the model really saw."""


@dataclass
class TokenSequence:
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 on tokens the model generated
    logprobs: list[float] = field(default_factory=list)  # the engine's log-prob there, 0.0 elsewhere

    @property
    def model_tokens(self) -> int:
        return sum(self.loss_mask)

    def extend(self, ids: list[int], *, generated: bool, logprobs: list[float] | None = None) -> None:
        self.input_ids.extend(ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


class SequenceBuilder:
    """Grows one episode's sequence: `prompt_ids(messages)` before a turn, `add_turn(...)` after it."""

    def __init__(self, tokenizer: Any, tools: list[ToolSchemaLike]) -> None:
        self.tokenizer = tokenizer
        self.tools = tools
        self.sequence = TokenSequence()
        self._rendered: str | None = None
        self._turn_text = ""
        self._turn_stop_text = ""

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The whole sequence so far plus the new context tokens; what the model must continue."""
        text = render_prompt(messages, self.tools, self.tokenizer)
        if self._rendered is None:
            tail = text
        else:
            tail = self._tail_after_turn(text)
        self.sequence.extend(self._tokenize(tail), generated=False)
        self._rendered = text
        return list(self.sequence.input_ids)

    def add_turn(self, token_ids: list[int], logprobs: list[float] | None, text: str) -> None:
        if self._rendered is None:
            raise SequenceError("a turn was added before any prompt")
        if logprobs is not None and len(logprobs) != len(token_ids):
            raise SequenceError(f"{len(token_ids)} generated tokens but {len(logprobs)} log-probs")
        self.sequence.extend(token_ids, generated=True, logprobs=logprobs)
        self._turn_text = text
        last = token_ids[-1:] if token_ids else []
        special = last and last[0] in set(self.tokenizer.all_special_ids)
        self._turn_stop_text = self.tokenizer.decode(last, skip_special_tokens=False) if special else ""

    def _tail_after_turn(self, text: str) -> str:
        previous = self._rendered or ""
        if not text.startswith(previous):
            raise SequenceError(
                "the chat template rewrote earlier turns (the previous prompt is not a prefix of the new one); "
                "multi-turn training needs a prefix-stable template"
            )
        rest = text[len(previous) :]
        if not rest.startswith(self._turn_text):
            raise SequenceError(
                "the chat template does not render the assistant's turn as the text it generated "
                f"(expected it to start with {self._turn_text[:80]!r}, got {rest[:80]!r})"
            )
        tail = rest[len(self._turn_text) :]
        if self._turn_stop_text and tail.startswith(self._turn_stop_text):
            tail = tail[len(self._turn_stop_text) :]
        return tail

    def _tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def sequence_from_trace(trace: AgentTrace, tokenizer: Any, tools: list[ToolSchemaLike]) -> TokenSequence:
    """Rebuild an episode's sequence from its trace (messages + each turn's token ids and log-probs)."""
    builder = SequenceBuilder(tokenizer, tools)
    turns = iter(trace.turns)
    for index, message in enumerate(trace.messages):
        if message["role"] != "assistant":
            continue
        turn = next(turns)
        if turn.token_ids is None:
            raise SequenceError(
                f"turn {turn.index} has no token ids: it was not generated by a token-level engine"
            )
        prompt = builder.prompt_ids(trace.messages[:index])
        if turn.prompt_tokens and turn.prompt_tokens != len(prompt):
            raise SequenceError(
                f"turn {turn.index} was generated from {turn.prompt_tokens} tokens, the rebuilt prompt has {len(prompt)}"
            )
        builder.add_turn(turn.token_ids, turn.logprobs, turn.text)
    return builder.sequence
