"""Real task folders on disk for the bundle, grading and Harbor tests, and the Harbor venv check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import openpyxl
import pytest

REPO = Path(__file__).resolve().parents[2]
HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"

TASK_TOML = """\
[task]
name = "acme/apac-growth"
version = "1.0"
description = "Adjusted APAC growth against target"
authors = [{ name = "Ann Expert", email = "ann@example.com" }]
keywords = ["finance", "kpi"]

[metadata]
domain = "finance"
difficulty = "medium"

[agent]
timeout_sec = 300

[environment]
cpus = 1
memory_mb = 1024
network_mode = "no-network"

[verifier]
timeout_sec = 120

[practicum]
max_turns = 12
max_tokens = 16000
tools = ["list_files", "read_text", "read_spreadsheet", "write_file", "submit_answer"]
"""

RUBRIC = {
    "criteria": [
        {
            "id": "c1",
            "text": "States the adjusted APAC growth is 12.5%",
            "kind": "number_close",
            "params": {"value": 12.5, "rel_tol": 0.01},
            "weight": 2.0,
            "required": True,
        },
        {
            "id": "c2",
            "text": "Says the target is not met",
            "kind": "contains",
            "params": {"value": "not met"},
        },
    ]
}

GOLDEN_ANSWER = "Adjusted APAC growth was 12.5%, so the 15% target is not met.\n"


def write_task(
    root: Path,
    *,
    task_toml: str = TASK_TOML,
    rubric: dict | str | None = None,
    instruction: str = "Compute the adjusted APAC growth from the sales workbook and say whether the target is met.\n",
    golden_answer: str | None = GOLDEN_ANSWER,
    solve_py: str | None = None,
    world: dict[str, str] | None = None,
) -> Path:
    """A task folder in DESIGN.md's layout; `world` maps relative paths to text contents."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(task_toml)
    (root / "instruction.md").write_text(instruction)
    (root / "tests").mkdir(exist_ok=True)
    rubric = RUBRIC if rubric is None else rubric
    (root / "tests" / "rubric.json").write_text(rubric if isinstance(rubric, str) else json.dumps(rubric))
    world_dir = root / "environment" / "world"
    world_dir.mkdir(parents=True, exist_ok=True)
    for relative, text in (world or {"notes/readme.txt": "Sales are in sales.xlsx.\n"}).items():
        (world_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (world_dir / relative).write_text(text)
    if golden_answer is not None or solve_py is not None:
        (root / "solution").mkdir(exist_ok=True)
    if golden_answer is not None:
        (root / "solution" / "answer.md").write_text(golden_answer)
    if solve_py is not None:
        (root / "solution" / "solve.py").write_text(solve_py)
    return root


def write_sales_workbook(path: Path) -> None:
    """A workbook whose total is a formula without a cached value, as openpyxl writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Sales"
    sheet["A1"], sheet["B1"] = "2023", 80
    sheet["A2"], sheet["B2"] = "2024", 90
    sheet["B3"] = "=ROUND((B2-B1)/B1*100,1)"
    workbook.save(path)


def harbor_python() -> Path:
    """The Python of the separate Harbor venv (Harbor needs 3.12); skipped here, required in CI."""
    if not HARBOR_PYTHON.exists():
        reason = f"{HARBOR_PYTHON} is missing (a Python 3.12 venv with `harbor` installed)"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"CI requires Harbor: {reason}")
        pytest.skip(reason)
    return HARBOR_PYTHON
