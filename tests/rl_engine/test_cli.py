"""`python -m rl_engine eval` end to end: real bundles written with write_bundle, real subprocesses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import openpyxl
import pytest
from reportlab.pdfgen import canvas

from rl_engine.bundle import Criterion, Rubric, TaskBundle, write_bundle
from tests.rl_engine.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parents[2]

GROWTH_SOLVE_PY = """\
import openpyxl
sheet = openpyxl.load_workbook("sales.xlsx")["Sales"]
previous, current = sheet["B1"].value, sheet["B2"].value
growth = round((current - previous) / previous * 100, 1)
print(f"Adjusted APAC growth is {growth}%, so the 15% target is not met.")
"""


def make_world(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def bundle(name: str, world: Path, criteria: list[Criterion], tools: list[str], **extra) -> TaskBundle:
    return TaskBundle(
        name=name,
        version="1",
        instruction=f"Task {name}: answer from the files.",
        rubric=Rubric(criteria=criteria),
        world_dir=world,
        tools=tools,
        max_turns=8,
        agent_timeout_sec=120,
        **extra,
    )


def pdf_task(tmp_path: Path) -> TaskBundle:
    world = tmp_path / "worlds" / "pdf"
    world.mkdir(parents=True)
    pdf = canvas.Canvas(str(world / "annual-report.pdf"))
    pdf.drawString(72, 720, "Group revenue 2024: $2.8bn, up from $2.5bn.")
    pdf.showPage()
    pdf.save()
    criteria = [
        Criterion(
            id="c1",
            text="States revenue of $2.8bn",
            kind="number_close",
            params={"value": 2.8},
            required=True,
        )
    ]
    tools = ["list_files", "pdf_info", "read_pdf", "submit_answer"]
    return bundle("acme/revenue", world, criteria, tools, golden_answer="Group revenue in 2024 was $2.8bn.")


def workbook_task(tmp_path: Path) -> TaskBundle:
    world = tmp_path / "worlds" / "sales"
    world.mkdir(parents=True)
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Sales"
    sheet["B1"], sheet["B2"] = 80, 90
    workbook.save(world / "sales.xlsx")
    criteria = [
        Criterion(
            id="c1", text="States growth of 12.5%", kind="number_close", params={"value": 12.5}, required=True
        ),
        Criterion(
            id="c2",
            text="Says the target is not met",
            kind="contains",
            params={"value": "not met"},
            required=True,
        ),
    ]
    tools = ["list_files", "list_sheets", "read_spreadsheet", "run_python", "submit_answer"]
    return bundle("acme/growth", world, criteria, tools, solve_py=GROWTH_SOLVE_PY)


@pytest.fixture
def healthy_tasks(tmp_path) -> Path:
    tasks = tmp_path / "tasks"
    write_bundle(pdf_task(tmp_path), tasks / "revenue")
    write_bundle(workbook_task(tmp_path), tasks / "growth")
    return tasks


@pytest.fixture
def mixed_tasks(tmp_path, healthy_tasks) -> Path:
    """The healthy tasks plus one whose oracle crashes, one whose mail tool the server hides, one invalid."""
    world = make_world(
        tmp_path / "worlds" / "inbox", {"mail.eml": "From: cfo@acme.test\nSubject: Q3\n\nRevenue up.\n"}
    )
    criteria = [
        Criterion(id="c1", text="Says revenue is up", kind="contains", params={"value": "up"}, required=True)
    ]
    crashing = bundle(
        "acme/crashing-oracle",
        world,
        criteria,
        ["list_files", "submit_answer"],
        solve_py="raise SystemExit('boom: the solution is broken')\n",
    )
    write_bundle(crashing, healthy_tasks / "crashing")
    hidden = bundle(
        "acme/inbox",
        world,
        criteria,
        ["list_emails", "search_emails", "submit_answer"],
        golden_answer="Revenue is up.",
    )
    write_bundle(hidden, healthy_tasks / "inbox")
    (healthy_tasks / "not-a-task").mkdir()
    (healthy_tasks / "not-a-task" / "notes.txt").write_text("stray folder")
    return healthy_tasks


def run_cli(*args: str, faults: str | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PRACTICUM_FAULTS"}
    if faults:
        env["PRACTICUM_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, "-m", "rl_engine", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def table_value(stdout: str, label: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith(label)]
    return line[len(label) :].strip()


def test_the_oracle_passes_every_healthy_task_and_the_events_are_numbered(healthy_tasks, tmp_path):
    out = tmp_path / "events.jsonl"
    result = run_cli(
        "eval",
        "--tasks",
        str(healthy_tasks),
        "--policy",
        "oracle",
        "--samples",
        "2",
        "--concurrency",
        "3",
        "--out",
        str(out),
        "--isolation",
        "none",
        "--run-id",
        "r-oracle",
    )
    assert result.returncode == 0, result.stderr
    assert table_value(result.stdout, "Pass@1") == "1.000"
    assert table_value(result.stdout, "valid mean reward") == "1.000"
    assert table_value(result.stdout, "outcomes") == "graded=4"
    events = read_events(out)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert {e["run_id"] for e in events} == {"r-oracle"}
    assert [e["type"] for e in events].count("rollout") == 4
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert events[-1]["payload"]["pass_at_1"] == 1.0


def test_the_null_policy_passes_no_task(healthy_tasks, tmp_path):
    result = run_cli(
        "eval",
        "--tasks",
        str(healthy_tasks),
        "--policy",
        "null",
        "--out",
        str(tmp_path / "e.jsonl"),
        "--isolation",
        "none",
    )
    assert result.returncode == 0, result.stderr
    assert table_value(result.stdout, "Pass@1") == "0.000"
    assert table_value(result.stdout, "harness error rate") == "0.000"


def test_broken_bundles_show_up_as_harness_errors_with_their_codes_never_as_zero_reward(
    mixed_tasks, tmp_path
):
    out = tmp_path / "events.jsonl"
    result = run_cli(
        "eval",
        "--tasks",
        str(mixed_tasks),
        "--policy",
        "oracle",
        "--max-attempts",
        "2",
        "--out",
        str(out),
        "--isolation",
        "none",
        faults="hide:search_emails",
    )
    assert result.returncode == 0, result.stderr
    assert table_value(result.stdout, "invalid bundles") == "1"
    assert "not-a-task" in result.stdout and "not-a-task" in result.stderr
    assert table_value(result.stdout, "harness errors").startswith("BUNDLE_INVALID=2, SANDBOX_START=2")
    assert table_value(result.stdout, "outcomes") == "graded=2, harness_error=2"
    assert table_value(result.stdout, "harness error rate") == "0.500"
    assert table_value(result.stdout, "valid mean reward") == "1.000"
    events = read_events(out)
    errors = [e["payload"] for e in events if e["type"] == "harness_error"]
    codes = sorted(p.get("code") or p["summary"]["code"] for p in errors)
    assert codes == ["BUNDLE_INVALID", "BUNDLE_INVALID", "BUNDLE_INVALID", "SANDBOX_START", "SANDBOX_START"]
    crash = next(p for p in errors if "summary" in p and p["summary"]["task_name"] == "acme/crashing-oracle")
    assert "boom: the solution is broken" in crash["error_detail"] and crash["summary"]["reward"] is None
    hidden = next(p for p in errors if "summary" in p and p["summary"]["task_name"] == "acme/inbox")
    assert "search_emails" in hidden["summary"]["message"]


def test_a_scripted_policy_file_and_an_hf_model_folder_both_run(healthy_tasks, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"answer": "2.8bn, 12.5%, not met"}]
        )
    )
    scripted = run_cli(
        "eval",
        "--tasks",
        str(healthy_tasks),
        "--policy",
        f"scripted:{script}",
        "--out",
        str(tmp_path / "s.jsonl"),
        "--isolation",
        "none",
    )
    assert scripted.returncode == 0, scripted.stderr
    assert table_value(scripted.stdout, "Pass@1") == "1.000"
    model = build_tiny_model(tmp_path / "tiny")
    hf = run_cli(
        "eval",
        "--tasks",
        str(healthy_tasks),
        "--policy",
        f"hf:{model}",
        "--out",
        str(tmp_path / "h.jsonl"),
        "--isolation",
        "none",
        "--concurrency",
        "2",
    )
    assert hf.returncode == 0, hf.stderr
    rollouts = [e["payload"] for e in read_events(tmp_path / "h.jsonl") if e["type"] == "rollout"]
    assert len(rollouts) == 2 and all(r["summary"]["outcome"] in ("graded", "agent_error") for r in rollouts)
    assert all(r["summary"]["policy"] == "hf:tiny" for r in rollouts)


@pytest.mark.parametrize(
    ("tasks", "args", "code", "message"),
    [
        ("missing", ["--policy", "oracle"], 1, "does not exist"),
        ("empty", ["--policy", "oracle"], 1, "no loadable task bundle"),
        ("healthy", ["--policy", "gpt5"], 1, "unknown policy 'gpt5'"),
        ("healthy", ["--policy", "hf:/nonexistent/model"], 1, "is not a model folder"),
        ("healthy", ["--policy", "oracle", "--samples", "0"], 2, "must be at least 1"),
    ],
)
def test_a_run_that_cannot_run_exits_non_zero_with_the_reason(
    tmp_path, healthy_tasks, tasks, args, code, message
):
    (tmp_path / "empty").mkdir()
    folder = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "healthy": healthy_tasks}[tasks]
    result = run_cli("eval", "--tasks", str(folder), *args, "--out", str(tmp_path / "e.jsonl"))
    assert result.returncode == code and message in result.stderr


@pytest.mark.parametrize(
    "faults, codes",
    [
        # The pdf task enables read_pdf, the workbook task does not: only the first fails, at sandbox start.
        (["hide:read_pdf"], {"acme/revenue": "SANDBOX_START"}),
        # The oracle submits through submit_answer in both tasks; the killed server is a crash in both.
        (["exit:submit_answer"], {"acme/revenue": "TOOL_SERVER_CRASH", "acme/growth": "TOOL_SERVER_CRASH"}),
    ],
)
def test_a_fault_drill_spec_plants_its_faults_and_the_rollouts_carry_the_code(
    healthy_tasks, tmp_path, faults, codes
):
    spec = tmp_path / "drill.json"
    spec.write_text(
        json.dumps(
            {
                "kind": "eval",
                "agent": "oracle",
                "tasks": {"eval_dir": str(healthy_tasks)},
                "sandbox": {"isolation": "none"},
                "max_attempts": 2,
                "faults": faults,
            }
        )
    )
    out = tmp_path / "events.jsonl"

    result = run_cli("eval", str(spec), "--out", str(out))  # PRACTICUM_FAULTS is not set

    assert result.returncode == 0, result.stderr
    finals = {
        event["payload"]["summary"]["task_name"]: event["payload"]["summary"]
        for event in read_events(out)
        if event["type"] in ("rollout", "harness_error") and "summary" in event["payload"]
    }
    assert {name: s["code"] for name, s in finals.items() if s["outcome"] == "harness_error"} == codes
    assert all(s["passed"] for name, s in finals.items() if name not in codes)
    assert table_value(result.stdout, "harness error rate") == f"{len(codes) / 2:.3f}"
