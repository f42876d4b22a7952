"""Built-in models: small random models built offline, never downloaded."""

from rl_engine.models.tiny import (
    BUILTIN_MODELS,
    CHAT_TEMPLATE,
    TinyLlamaConfig,
    build_tiny_model,
    builtin_model,
)

__all__ = ["BUILTIN_MODELS", "CHAT_TEMPLATE", "TinyLlamaConfig", "build_tiny_model", "builtin_model"]
