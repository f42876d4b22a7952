"""The state every tool shares: the work folder, the limits, and path checks that keep tools inside it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

OUTPUT_DIR = "output"
ANSWER_FILE = "answer.md"
SUBMITTED_MARKER = ".submitted.json"


@dataclass
class ServerSettings:
    max_result_chars: int = 20000
    python_timeout_sec: float = 30.0
    memory_mb: int = 1024
    max_output_bytes: int = 10_000_000
    isolation: str = "none"  # already resolved by the sandbox: "bwrap" or "none"
    bwrap_path: str | None = None


@dataclass
class Workspace:
    """Filled in once per server; the zygote builds tools before it knows which folder they serve."""

    root: Path = Path(".")
    settings: ServerSettings = field(default_factory=ServerSettings)
    faults: dict[str, str] = field(default_factory=dict)  # tool name -> injected fault, tests only

    def configure(self, root: Path, settings: ServerSettings) -> None:
        self.root = root.resolve()
        self.settings = settings

    def resolve(self, relative: str, *, must_exist: bool = True) -> Path:
        """The real path of `relative` inside the work folder; a path that leaves it is refused."""
        if not isinstance(relative, str) or not relative.strip():
            raise ToolError("path must be a non-empty string relative to the work folder, e.g. 'docs/q3.pdf'")
        if os.path.isabs(relative):
            raise ToolError(
                f"path {relative!r} is absolute; paths are relative to the work folder (try list_files)"
            )
        resolved = (self.root / relative).resolve()
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise ToolError(f"path {relative!r} leads outside the work folder; that is not allowed")
        if must_exist and not resolved.exists():
            raise ToolError(f"no such file or folder: {relative!r} (use list_files to see what exists)")
        return resolved

    def resolve_file(self, relative: str) -> Path:
        path = self.resolve(relative)
        if not path.is_file():
            raise ToolError(f"{relative!r} is a folder, not a file")
        return path

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    def walk_files(self, start: Path) -> list[Path]:
        """Files under `start`, sorted, without following links that leave the work folder."""
        if start.is_file():
            return [start]
        found = []
        for directory, subdirs, files in os.walk(start):
            subdirs.sort()
            for name in sorted(files):
                path = Path(directory) / name
                if path.resolve().is_relative_to(self.root):
                    found.append(path)
        return found

    @property
    def output_dir(self) -> Path:
        return self.root / OUTPUT_DIR


def truncate(text: str, limit: int) -> str:
    """Keep the head and the tail of a long result, and say how much was cut."""
    if len(text) <= limit:
        return text
    notice_room = 60
    keep = max(limit - notice_room, 0)
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :] if tail else ''}"
