"""The inference interface every backend implements: prompts in, generated tokens and log-probs out.

A prompt is either token ids (what training uses: the trainer must see exactly the tokens the
model saw) or a `ChatPrompt` (messages + tool schemas), which token backends render with the
model's chat template and which is the only kind an OpenAI-compatible endpoint accepts.

Log-probs: for each generated token, its log-probability under the distribution it was actually
sampled from — the model's logits divided by the temperature and, when top-p < 1, renormalised
over the nucleus. Greedy decoding (temperature 0) reports the raw (temperature 1) log-softmax.
The trainer divides its logits by the same temperature, so with top-p = 1 its old log-probs and
these rollout log-probs describe the same distribution up to numerics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

FinishReason = Literal["stop", "length"]


class SamplingParams(BaseModel):
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=256, ge=1)
    # None: not reproducible; an int seeds the batch (one generator for the whole batch).
    seed: int | None = None
    # Generation stops after any of these (the tokenizer's end-of-sequence / end-of-turn tokens are added).
    stop_token_ids: list[int] = Field(default_factory=list)


class ChatPrompt(BaseModel):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list)  # OpenAI-style function schemas


Prompt = list[int] | ChatPrompt


class Generation(BaseModel):
    text: str
    finish_reason: FinishReason
    # None only where the backend cannot give them (an OpenAI endpoint that hides token ids).
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI endpoints that split calls out
    prompt_tokens: int = 0


class InferenceEngine(Protocol):
    name: str
    # Whether `generate` takes token-id prompts and returns token ids (hf, vllm: yes; openai: no).
    token_level: bool

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        """One generation per prompt, in order. Raises InferenceFailure when the backend fails."""
        ...

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Replace the engine's weights (names as in the trainer's model) after a policy update."""
        ...

    def sync_from(self, model: Any) -> None:
        """Copy the weights of the trainer's model (a torch module) into the engine."""
        ...


class InferenceFailure(Exception):
    """The backend could not generate (server down, CUDA error, bad answer): the platform's fault."""


def check_prompts(prompts: Sequence[Prompt], *, token_level: bool, backend: str) -> None:
    for index, prompt in enumerate(prompts):
        if isinstance(prompt, ChatPrompt):
            continue
        if not token_level:
            raise ValueError(
                f"prompt {index}: the {backend} backend takes chat prompts (ChatPrompt), not token ids"
            )
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
            raise ValueError(
                f"prompt {index}: expected a non-empty list of token ids, got {type(prompt).__name__}"
            )
