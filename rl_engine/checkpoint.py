"""Checkpoints: model (save_pretrained layout, so a checkpoint is also a model folder), optimiser
and scheduler, every RNG, the step and the driver's own state (data cursor, event sequence).

A checkpoint is written into a hidden temporary folder next to its final place and renamed into
place when complete; a crash mid-write leaves no folder that looks like a checkpoint (the next
save removes the leftover). Folders are
`step_000012`; the latest complete one is the one to resume from; older ones beyond `keep_last`
are removed after a new one lands.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
INFO_FILE = "checkpoint.json"


def checkpoint_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:06d}"


def save_checkpoint(
    root: Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    trainer_state: dict[str, Any],
    info: dict[str, Any],
    keep_last: int = 2,
) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    # A writer killed mid-write leaves its hidden staging folder; one run has one writer, so any
    # staging folder found here is such a leftover.
    for leftover in root.glob(".step_*"):
        shutil.rmtree(leftover, ignore_errors=True)
    final = checkpoint_dir(root, step)
    staging = Path(tempfile.mkdtemp(prefix=f".step_{step:06d}.", dir=root))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        torch.save({**trainer_state, "rng": rng_state()}, staging / STATE_FILE)
        (staging / INFO_FILE).write_text(json.dumps({**info, "step": step}, indent=2))
        if final.exists():  # the same step written again after a resume: replace it whole
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for old in sorted(_complete(root))[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    complete = sorted(_complete(Path(root)))
    return complete[-1] if complete else None


def load_checkpoint(path: Path, *, model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load the weights into `model` and restore every RNG; returns (trainer_state, info)."""
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=next(model.parameters()).dtype
    )
    model.load_state_dict(saved.state_dict())
    trainer_state = torch.load(Path(path) / STATE_FILE, weights_only=False)
    set_rng_state(trainer_state.pop("rng"))
    return trainer_state, json.loads((Path(path) / INFO_FILE).read_text())


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _complete(root: Path) -> list[Path]:
    if not root.exists():
        return []
    return [p for p in root.iterdir() if p.name.startswith("step_") and (p / INFO_FILE).exists()]
