"""Inference backends behind one interface (`InferenceEngine`): `hf`, `vllm`, `openai`.

See `inference/base.py` for the contract (prompts, sampling parameters, what the log-probs are).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl_engine.inference.base import (
    ChatPrompt,
    FinishReason,
    Generation,
    InferenceEngine,
    InferenceFailure,
    Prompt,
    SamplingParams,
)

BACKENDS = ("hf", "vllm", "openai")


def create_engine(backend: str, *, model: Path | str, **options: Any) -> InferenceEngine:
    """`model` is a local folder for hf / vllm and the served model's name for openai (`base_url` option)."""
    if backend == "hf":
        from rl_engine.inference.hf import HFEngine

        return HFEngine.from_pretrained(model, **options)
    if backend == "vllm":
        from rl_engine.inference.vllm_engine import VLLMEngine

        return VLLMEngine(model, **options)
    if backend == "openai":
        from rl_engine.inference.openai_engine import OpenAIEngine

        if "base_url" not in options:
            raise ValueError("the openai backend needs a base_url option")
        return OpenAIEngine(options.pop("base_url"), str(model), **options)
    raise ValueError(f"unknown inference backend {backend!r}; known: {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "ChatPrompt",
    "FinishReason",
    "Generation",
    "InferenceEngine",
    "InferenceFailure",
    "Prompt",
    "SamplingParams",
    "create_engine",
]
