"""The checklist of a task bundle's validation: is the task sound before anyone trains on it?

`python -m rl_engine validate` runs the oracle and the null agent on every bundle (their rollouts are
the evidence, emitted as usual) and then, per bundle, this checklist (docs/quality.md, "Validation"):

| key | passes when |
|---|---|
| `world_files` | every world file loads with the harness's own document readers (the MCP tools' code) |
| `tools_listed` | every enabled tool is listed by the sandbox's MCP server |
| `tools_answer` | every enabled tool answers a smoke call (an error result is an answer; a crash, a hang or an unexpected exception is not) |
| `oracle_passes` | every oracle rollout is graded with score 1.0 |
| `null_fails` | no null-agent rollout passes |
| `golden_meets_criteria` | each deterministic criterion (every kind but `llm_judge`) is met by the golden answer |
| `empty_answer_fails` | no criterion is met by an empty answer with no output files (`llm_judge` ones too when a judge is configured) |

Each item is `{"key", "label", "ok", "reason", "evidence"}`: `reason` says why it failed (or what was
checked), `evidence` names the policy whose rollout shows it ("oracle", "null") or is null.
A bundle that does not load has one item, `bundle_loads`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from rl_engine.bundle import TaskBundle
from rl_engine.grading import JudgeConfig
from rl_engine.grading.checks import (
    DETERMINISTIC_KINDS,
    Check,
    check_deterministic,
    evaluate_python_subprocess,
)
from rl_engine.grading.judge import judge_criterion
from rl_engine.mcp_server import tools_documents, tools_files, tools_messages
from rl_engine.mcp_server.workspace import Workspace
from rl_engine.outcomes import HarnessError, Outcome
from rl_engine.sandbox import SandboxConfig, create_sandbox
from rl_engine.trace import RolloutRecord

LABELS = {
    "bundle_loads": "The bundle loads",
    "world_files": "World files parse",
    "tools_listed": "Every enabled tool is offered by the tool server",
    "tools_answer": "Every enabled tool answers a smoke call",
    "oracle_passes": "The oracle passes (score 1.0)",
    "null_fails": "The null agent does not pass",
    "golden_meets_criteria": "The golden answer meets each deterministic criterion",
    "empty_answer_fails": "No criterion is met by an empty answer",
}
_PDF_SUFFIXES = (".pdf",)
_WORKBOOK_SUFFIXES = (".xlsx", ".xlsm", ".csv", ".tsv")
_JSON_SUFFIXES = (".json", ".jsonl")
_MAIL_SUFFIXES = (".eml", ".mbox", ".mbx")
_UNREADABLE_TYPES = ("binary", "zip archive", "docx document (zip)")
_REASON_CHARS = 300


class CheckItem(BaseModel):
    key: str
    label: str
    ok: bool
    reason: str
    evidence: str | None = None


class Checklist(BaseModel):
    task: str  # the bundle's name, or the folder of a bundle that did not load
    task_hash: str = ""
    ok: bool
    items: list[CheckItem]


def item(key: str, ok: bool, reason: str, evidence: str | None = None) -> CheckItem:
    return CheckItem(key=key, label=LABELS[key], ok=ok, reason=reason, evidence=evidence)


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


# ---- world files ------------------------------------------------------------------------------


def world_file_problem(ws: Workspace, relative: str) -> str | None:
    """Why the harness cannot read this world file, or None: each type goes through its tool's reader."""
    path = ws.root / relative
    suffix = path.suffix.lower()
    try:
        kind = tools_files.detect_type(path)
        if suffix in _PDF_SUFFIXES or kind == "pdf":
            tools_documents.pdf_info(ws, relative)
            tools_documents.read_pdf(ws, relative, 1, 1)
        elif suffix in _WORKBOOK_SUFFIXES or kind == "xlsx workbook (zip)":
            tools_documents.list_sheets(ws, relative)
        elif suffix in _JSON_SUFFIXES:
            text = path.read_text(encoding="utf-8")
            lines = [line for line in text.splitlines() if line.strip()] if suffix == ".jsonl" else [text]
            for number, line in enumerate(lines, 1):
                try:
                    json.loads(line)
                except json.JSONDecodeError as error:
                    where = f"line {number}: " if suffix == ".jsonl" else ""
                    return f"not valid JSON ({where}{error})"
        elif suffix in _MAIL_SUFFIXES:
            if not tools_messages.load_mail(ws, relative):
                return "no e-mail could be read from it"
        elif kind in _UNREADABLE_TYPES:
            return f"no tool can read it (its content is {kind})"
        else:
            path.read_bytes().decode("utf-8")
    except ToolError as error:
        return str(error)
    except UnicodeDecodeError as error:
        return f"not UTF-8 text (byte {error.start}); the agent would see replacement characters"
    except Exception as error:  # a reader's own crash is exactly what this check is for
        return f"{type(error).__name__}: {error}"
    return None


def world_files_check(bundle: TaskBundle) -> CheckItem:
    world = Path(bundle.world_dir)
    ws = Workspace()
    ws.root = world.resolve()
    files = sorted(p.relative_to(world).as_posix() for p in world.rglob("*") if p.is_file())
    problems = [f"{name}: {problem}" for name in files if (problem := world_file_problem(ws, name))]
    if problems:
        return item("world_files", False, _clip("; ".join(problems)))
    return item("world_files", True, f"{len(files)} file(s) read" if files else "the world has no files")


# ---- tools -------------------------------------------------------------------------------------


def smoke_arguments(name: str, world_files: list[str]) -> dict[str, Any]:
    """Arguments a tool accepts, aimed at a world file of its kind when there is one."""

    def first(*suffixes: str) -> str:
        chosen = [f for f in world_files if f.lower().endswith(suffixes)] if suffixes else world_files
        return (chosen or world_files or ["missing.txt"])[0]

    return {
        "file_info": {"path": first()},
        "read_text": {"path": first(".txt", ".md", ".csv", ".json", ".eml")},
        "search_files": {"query": "the"},
        "pdf_info": {"path": first(".pdf")},
        "read_pdf": {"path": first(".pdf")},
        "search_pdf": {"query": "the"},
        "list_sheets": {"path": first(".xlsx", ".xlsm", ".csv")},
        "read_spreadsheet": {"path": first(".xlsx", ".xlsm", ".csv")},
        "search_emails": {"query": "the"},
        "read_email": {"id": first(".eml", ".mbox")},
        "write_file": {"path": "validation-smoke.txt", "content": "smoke test"},
        "run_python": {"code": "print(1 + 1)"},
        "submit_answer": {"answer": "smoke test"},
    }.get(name, {})


async def tool_checks(bundle: TaskBundle, sandbox_config: SandboxConfig) -> list[CheckItem]:
    """Start a sandbox (it refuses one whose server lacks an enabled tool), then call each tool once."""
    enabled = bundle.enabled_tools()
    world = Path(bundle.world_dir)
    files = sorted(p.relative_to(world).as_posix() for p in world.rglob("*") if p.is_file())
    sandbox = create_sandbox(bundle, sandbox_config)
    try:
        await sandbox.start()
    except HarnessError as error:
        listed = item("tools_listed", False, _clip(f"{error.code}: {error.message}"))
        return [listed, item("tools_answer", False, "not checked: the sandbox did not start")]
    try:
        offered = {tool.name for tool in await sandbox.list_tools()}
        listed = item("tools_listed", True, f"{len(enabled)} enabled tool(s) listed: {', '.join(enabled)}")
        failures, error_results = [], []
        for name in enabled:
            if name not in offered:
                continue
            try:
                result = await sandbox.call_tool(name, smoke_arguments(name, files))
            except HarnessError as error:
                failures.append(f"{name}: {error.code}: {error.message}")
                if error.code == "TOOL_SERVER_CRASH":
                    break  # the server is gone; the tools after this one cannot be asked
                continue
            if result.is_error:
                error_results.append(name)
        if failures:
            return [listed, item("tools_answer", False, _clip("; ".join(failures)))]
        note = f" ({', '.join(error_results)} answered with an error result)" if error_results else ""
        return [listed, item("tools_answer", True, f"{len(enabled)} tool(s) answered{note}")]
    finally:
        await sandbox.close()


# ---- rollouts ----------------------------------------------------------------------------------


def _finals(records: list[RolloutRecord]) -> list[RolloutRecord]:
    """The attempt that counts for each sample: the last one."""
    by_sample: dict[int, RolloutRecord] = {}
    for record in records:
        previous = by_sample.get(record.summary.sample)
        if previous is None or record.summary.attempt >= previous.summary.attempt:
            by_sample[record.summary.sample] = record
    return [by_sample[sample] for sample in sorted(by_sample)]


def _unmet(record: RolloutRecord) -> str:
    return "; ".join(
        f"{v.criterion_id} not met ({v.rationale or 'no rationale'})" for v in record.verdicts if not v.met
    )


def oracle_check(records: list[RolloutRecord]) -> CheckItem:
    finals = _finals(records)
    if not finals:
        return item("oracle_passes", False, "the oracle made no rollout", "oracle")
    for record in finals:
        s = record.summary
        if s.outcome != Outcome.GRADED:
            return item("oracle_passes", False, _clip(f"{s.outcome} {s.code or ''}: {s.message}"), "oracle")
        if s.score is None or s.score < 1.0:
            return item("oracle_passes", False, _clip(f"score {s.score:.2f}: {_unmet(record)}"), "oracle")
    return item("oracle_passes", True, f"score 1.0 in {len(finals)} rollout(s)", "oracle")


def null_check(records: list[RolloutRecord]) -> CheckItem:
    finals = _finals(records)
    if not finals:
        return item("null_fails", False, "the null agent made no rollout", "null")
    for record in finals:
        s = record.summary
        if s.outcome == Outcome.HARNESS_ERROR:
            return item("null_fails", False, _clip(f"harness error {s.code}: {s.message}"), "null")
        if s.passed:
            met = ", ".join(v.criterion_id for v in record.verdicts if v.met)
            return item(
                "null_fails",
                False,
                _clip(f"the answer {record.final_answer!r} passes (criteria met: {met or 'none'})"),
                "null",
            )
    return item("null_fails", True, f"fails in {len(finals)} rollout(s)", "null")


async def _python(expression: str, answer: str) -> Check:
    return await asyncio.to_thread(evaluate_python_subprocess, expression, answer, {})


def golden_criteria_check(bundle: TaskBundle, oracle_records: list[RolloutRecord]) -> CheckItem:
    """From the oracle's verdicts when it was graded (its answer and files); else the golden answer alone
    (a bundle without solve.py cannot write output files, so its file criteria are rightly unmet)."""
    deterministic = [c for c in bundle.rubric.criteria if c.kind != "llm_judge"]
    if not deterministic:
        return item("golden_meets_criteria", True, "the rubric has no deterministic criteria")
    graded = [r for r in _finals(oracle_records) if r.summary.outcome == Outcome.GRADED]
    if graded:
        verdicts = {v.criterion_id: v for v in graded[0].verdicts}
        unmet = [
            f"{c.id} ({c.kind}): {verdicts[c.id].rationale}"
            for c in deterministic
            if c.id in verdicts and not verdicts[c.id].met
        ]
        evidence = "oracle"
    else:
        if bundle.solve_py or bundle.golden_answer is None:
            # The answer and files are what solve.py makes, which only the oracle's rollout shows.
            return item("golden_meets_criteria", False, "not checked: the oracle's rollout was not graded")
        unmet = []
        with tempfile.TemporaryDirectory(prefix="practicum-golden-") as empty:
            for c in deterministic:
                check = _check_alone(c.kind, c.params, bundle.golden_answer, Path(empty))
                if not check.met:
                    unmet.append(f"{c.id} ({c.kind}): {check.rationale}")
        evidence = None
    if unmet:
        return item("golden_meets_criteria", False, _clip("; ".join(unmet)), evidence)
    return item("golden_meets_criteria", True, f"{len(deterministic)} criterion/criteria met", evidence)


def _check_alone(kind: str, params: dict[str, Any], answer: str, output_dir: Path) -> Check:
    if kind == "python":
        return evaluate_python_subprocess(params["expression"], answer, {})
    return check_deterministic(kind, params, answer, output_dir)


async def empty_answer_check(bundle: TaskBundle, judge: JudgeConfig | None) -> CheckItem:
    """Grade "" with no output files, criterion by criterion: a criterion it meets checks nothing."""
    met, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="practicum-empty-") as empty:
        for c in bundle.rubric.criteria:
            if c.kind == "llm_judge":
                if judge is None:
                    skipped.append(c.id)
                    continue
                try:
                    async with httpx.AsyncClient() as client:
                        check = await judge_criterion(
                            client, judge, criterion=c.text, answer="", files={}, model=c.params.get("model")
                        )
                except HarnessError as error:
                    return item("empty_answer_fails", False, _clip(f"{c.id}: the judge failed: {error}"))
            elif c.kind == "python":
                check = await _python(c.params["expression"], "")
            elif c.kind in DETERMINISTIC_KINDS:
                check = check_deterministic(c.kind, c.params, "", Path(empty))
            else:
                continue
            if check.met:
                met.append(f"{c.id} ({c.kind}): {check.rationale}")
    note = f"; not judged without a judge: {', '.join(skipped)}" if skipped else ""
    if met:
        return item("empty_answer_fails", False, _clip("met by an empty answer: " + "; ".join(met) + note))
    return item("empty_answer_fails", True, f"no criterion is met by an empty answer{note}")


# ---- the checklist -----------------------------------------------------------------------------


async def bundle_checklist(
    bundle: TaskBundle,
    *,
    oracle: list[RolloutRecord],
    null: list[RolloutRecord],
    sandbox_config: SandboxConfig,
    judge: JudgeConfig | None,
) -> Checklist:
    """Every item for one bundle; `oracle` and `null` are its rollouts (every attempt) by those policies."""
    items = [
        world_files_check(bundle),
        *await tool_checks(bundle, sandbox_config),
        oracle_check(oracle),
        null_check(null),
        golden_criteria_check(bundle, oracle),
        await empty_answer_check(bundle, judge),
    ]
    return Checklist(
        task=bundle.name, task_hash=bundle.content_hash, ok=all(i.ok for i in items), items=items
    )


def invalid_bundle_checklist(path: str, problem: str) -> Checklist:
    return Checklist(task=path, ok=False, items=[item("bundle_loads", False, _clip(problem))])


def format_checklist(checklist: Checklist) -> str:
    lines = [f"{checklist.task}: {'sound' if checklist.ok else 'NOT SOUND'}"]
    for entry in checklist.items:
        lines.append(f"  [{'ok' if entry.ok else 'FAIL'}] {entry.label}: {entry.reason}")
    return "\n".join(lines)
