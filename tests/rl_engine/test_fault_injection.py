"""Every harness error code provoked for real — real sandbox, tool server, grader, HTTP servers — and
the model-side failures that must end as agent errors instead."""

import asyncio
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rl_engine.agent import NullPolicy, OpenAIPolicy, OraclePolicy, ScriptedPolicy
from rl_engine.bundle import Rubric, TaskBundle, load_bundle
from rl_engine.grading import JudgeConfig
from rl_engine.outcomes import AgentErrorCode, HarnessCode, Outcome
from rl_engine.rollout import RolloutConfig, run_rollout
from rl_engine.sandbox import SandboxConfig
from tests.rl_engine.fake_judge import FakeJudge
from tests.rl_engine.sample_bundles import TASK_TOML, write_task

ATTEMPTS = 2
CONFIG = RolloutConfig(max_attempts=ATTEMPTS, retry_backoff_sec=0, max_parse_retries=1)
SANDBOX = SandboxConfig(isolation="none", tool_timeout_sec=20)
LIST_FILES = {"tool_calls": [{"name": "list_files", "arguments": {}}]}
READ_NOTE = {"tool_calls": [{"name": "read_text", "arguments": {"path": "notes/readme.txt"}}]}


def task(
    tmp_path: Path, *, max_turns: int = 12, max_tokens: int = 16000, timeout: int = 300, **kwargs
) -> TaskBundle:
    toml = (
        TASK_TOML.replace("max_turns = 12", f"max_turns = {max_turns}")
        .replace("max_tokens = 16000", f"max_tokens = {max_tokens}")
        .replace("timeout_sec = 300", f"timeout_sec = {timeout}")
    )
    return load_bundle(write_task(tmp_path / "task", task_toml=toml, **kwargs))


def rollout(bundle, policy, *, sandbox=SANDBOX, judge=None):
    return asyncio.run(run_rollout(bundle, policy, sandbox_config=sandbox, judge=judge, config=CONFIG))


def assert_harness_error(records, code: HarnessCode, evidence: str):
    assert len(records) == ATTEMPTS
    assert [r.summary.attempt for r in records] == list(range(1, ATTEMPTS + 1))
    for record in records:
        assert (record.summary.outcome, record.summary.code) == (Outcome.HARNESS_ERROR, code)
        assert record.summary.reward is None and record.summary.passed is None
        assert evidence in record.error_detail or evidence in record.summary.message


def test_a_tool_the_task_enables_but_the_server_hides_is_sandbox_start(tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "hide:read_spreadsheet")
    records = rollout(task(tmp_path), NullPolicy())
    assert_harness_error(records, HarnessCode.SANDBOX_START, "read_spreadsheet")
    assert "offered:" in records[0].error_detail


def test_a_world_folder_that_vanished_is_sandbox_start(tmp_path):
    bundle = task(tmp_path)
    shutil.rmtree(bundle.world_dir)
    assert_harness_error(rollout(bundle, NullPolicy()), HarnessCode.SANDBOX_START, "world")


def test_a_tool_server_killed_mid_episode_is_tool_server_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "exit:list_files")
    records = rollout(task(tmp_path), ScriptedPolicy([READ_NOTE, LIST_FILES, {"answer": "x"}]))
    assert_harness_error(records, HarnessCode.TOOL_SERVER_CRASH, "list_files")
    first_call = records[0].turns[2].tool_calls[0]
    assert (first_call.name, first_call.is_error) == ("read_text", False)


def test_a_tool_that_hangs_past_its_timeout_is_tool_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "hang:list_files")
    sandbox = SandboxConfig(isolation="none", tool_timeout_sec=1)
    records = rollout(task(tmp_path), ScriptedPolicy([LIST_FILES, {"answer": "x"}]), sandbox=sandbox)
    assert_harness_error(records, HarnessCode.TOOL_TIMEOUT, "list_files")


def test_a_tool_that_raises_unexpectedly_is_tool_exception_with_the_servers_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "raise:read_text")
    records = rollout(task(tmp_path), ScriptedPolicy([READ_NOTE, {"answer": "x"}]))
    assert_harness_error(records, HarnessCode.TOOL_EXCEPTION, "injected fault")
    assert "Traceback" in records[0].error_detail


class FailingChatServer:
    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b'{"error": "CUDA out of memory"}')

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_an_inference_server_answering_500_is_inference(tmp_path):
    server = FailingChatServer()
    try:
        records = rollout(task(tmp_path), OpenAIPolicy(server.url, "m"))
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    assert_harness_error(records, HarnessCode.INFERENCE, "CUDA out of memory")


class RaisingPolicy:
    name = "raising"

    async def next_turn(self, messages, tools, *, context):
        raise ConnectionResetError("engine went away")


def test_a_policy_whose_inference_raises_is_inference_with_the_traceback(tmp_path):
    records = rollout(task(tmp_path), RaisingPolicy())
    assert_harness_error(records, HarnessCode.INFERENCE, "engine went away")
    assert "Traceback" in records[0].error_detail


JUDGED_RUBRIC = {
    "criteria": [{"id": "c1", "text": "Says the target is not met", "kind": "llm_judge", "required": True}]
}


@pytest.mark.parametrize(
    "behaviour",
    [("status", 500), ("hang", 3), ("text", "certainly! the criterion holds")],
    ids=["500", "hang", "non-json"],
)
def test_a_judge_that_fails_is_judge_never_a_score_of_zero(tmp_path, behaviour):
    bundle = task(tmp_path, rubric=JUDGED_RUBRIC)
    with FakeJudge(behaviour) as judge:
        config = JudgeConfig(
            base_url=judge.base_url, model="judge", timeout_sec=0.5, retries=2, backoff_sec=0.01
        )
        records = rollout(bundle, OraclePolicy(), judge=config)
    assert_harness_error(records, HarnessCode.JUDGE, "")
    assert records[0].summary.score is None and records[0].final_answer
    assert records[0].summary.message


def test_a_rubric_whose_score_cannot_be_computed_is_reward_invalid(tmp_path):
    bundle = task(tmp_path).model_copy(update={"rubric": Rubric(criteria=[])})
    assert_harness_error(rollout(bundle, OraclePolicy()), HarnessCode.REWARD_INVALID, "not a finite number")


def test_an_oracle_solution_that_crashes_is_bundle_invalid_with_its_stderr(tmp_path):
    bundle = task(
        tmp_path, solve_py="import sys\nprint('partial')\nraise SystemExit('no sales.xlsx in the world')\n"
    )
    assert_harness_error(
        rollout(bundle, OraclePolicy()), HarnessCode.BUNDLE_INVALID, "no sales.xlsx in the world"
    )


@pytest.mark.parametrize(
    ("budget", "script", "code"),
    [
        ({}, [{"text": "<tool_call>{'name': </tool_call>"}], AgentErrorCode.UNPARSEABLE),
        ({"max_turns": 3}, [LIST_FILES], AgentErrorCode.TURN_BUDGET),
        ({"max_tokens": 500}, [{**LIST_FILES, "completion_tokens": 300}], AgentErrorCode.TOKEN_BUDGET),
        ({"timeout": 2}, [LIST_FILES, {"delay_sec": 30, "answer": "late"}], AgentErrorCode.DEADLINE),
    ],
    ids=["unparseable", "turn-budget", "token-budget", "deadline"],
)
def test_model_side_failures_are_agent_errors_with_reward_zero_and_no_retry(tmp_path, budget, script, code):
    (record,) = rollout(task(tmp_path, **budget), ScriptedPolicy(script))
    assert (record.summary.outcome, record.summary.code, record.summary.reward) == (
        Outcome.AGENT_ERROR,
        code,
        0.0,
    )
    assert record.summary.message and record.turns


def test_every_failed_attempt_keeps_its_own_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("PRACTICUM_FAULTS", "raise:read_text")
    records = rollout(task(tmp_path), ScriptedPolicy([LIST_FILES, READ_NOTE, {"answer": "x"}]))
    for record in records:
        names = [call.name for turn in record.turns for call in turn.tool_calls]
        assert names == ["list_files", "read_text"]
    assert json.loads(records[0].model_dump_json())["summary"]["code"] == "TOOL_EXCEPTION"
