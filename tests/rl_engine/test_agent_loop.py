import asyncio
from pathlib import Path

import pytest

from rl_engine.agent import AgentConfig, AgentTrace, AssistantTurn, ScriptedPolicy, run_agent
from rl_engine.bundle import Criterion, Rubric, TaskBundle
from rl_engine.outcomes import AgentError, AgentErrorCode, HarnessCode, HarnessError
from rl_engine.sandbox import ToolResult, ToolSpec


def task_bundle(**budget) -> TaskBundle:
    rubric = Rubric(criteria=[Criterion(id="c1", text="Says 7", kind="contains", params={"value": "7"})])
    defaults = {"max_turns": 6, "max_tokens": 1000, "agent_timeout_sec": 30.0}
    return TaskBundle(
        name="acme/notes",
        version="1",
        instruction="What is in notes.txt?",
        rubric=rubric,
        world_dir=Path("/nonexistent"),
        **{**defaults, **budget},
    )


def tool(name: str) -> ToolSpec:
    return ToolSpec(
        name=name, description=f"the {name} tool", input_schema={"type": "object", "properties": {}}
    )


def result(text: str, is_error: bool = False) -> ToolResult:
    return ToolResult(text=text, is_error=is_error)


TOOLS = [tool("read_text"), tool("list_files"), tool("submit_answer")]


class InMemoryTools:
    """A tool executor over a dict of files, standing in for the sandbox."""

    def __init__(self, files: dict[str, str], hang_sec: float = 0.0) -> None:
        self.files = files
        self.hang_sec = hang_sec
        self.calls: list[tuple[str, dict]] = []

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        self.calls.append((name, arguments))
        await asyncio.sleep(self.hang_sec)
        if name == "list_files":
            return result("\n".join(sorted(self.files)))
        if name == "read_text":
            if arguments.get("path") not in self.files:
                return result(f"File not found: {arguments.get('path')}", is_error=True)
            return result(self.files[arguments["path"]])
        if name == "submit_answer":
            return result("Answer submitted.")
        raise HarnessError(HarnessCode.TOOL_EXCEPTION, f"unexpected tool {name}")


def run(policy, *, task=None, tools=None, config=None, executor=None):
    trace = AgentTrace()
    executor = executor or InMemoryTools({"notes.txt": "the code is 7"})
    coroutine = run_agent(task or task_bundle(), policy, executor, tools or TOOLS, trace=trace, config=config)
    try:
        return asyncio.run(coroutine), trace, None
    except (AgentError, HarnessError) as error:
        return None, trace, error


def test_a_submit_answer_call_ends_the_episode_with_its_answer_and_the_trace_holds_every_call():
    policy = ScriptedPolicy(
        [
            {"tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "read_text", "arguments": {"path": "missing.txt"}}]},
            {"tool_calls": [{"name": "read_text", "arguments": {"path": "notes.txt"}}]},
            {"answer": "The code is 7."},
        ]
    )
    answer, trace, error = run(policy)
    assert error is None and answer == "The code is 7." == trace.final_answer
    calls = [call for turn in trace.turns for call in turn.tool_calls]
    assert [(call.name, call.is_error) for call in calls] == [
        ("list_files", False),
        ("read_text", True),
        ("read_text", False),
        ("submit_answer", False),
    ]
    assert calls[2].result == "the code is 7"
    assert all(call.duration_sec >= 0 for call in calls)
    tool_messages = [m for m in trace.messages if m["role"] == "tool"]
    assert len(tool_messages) == 4 and tool_messages[0]["tool_call_id"] == "call_0_0"


def test_every_tool_result_tells_the_agent_its_remaining_turns_and_time():
    policy = ScriptedPolicy([{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"answer": "done"}])
    _, trace, _ = run(policy)
    assert "[Budget: 6 turns and" in trace.messages[1]["content"]
    assert "[Budget: 5 turns and" in trace.messages[3]["content"] and trace.messages[3]["role"] == "tool"


def test_plain_text_without_a_tool_call_is_the_final_answer():
    answer, trace, error = run(ScriptedPolicy([{"text": "<think>hmm</think>It is 7."}]))
    assert (answer, error, len(trace.turns)) == ("It is 7.", None, 1)


def test_an_empty_turn_is_no_answer():
    _, _, error = run(ScriptedPolicy([{"text": "  "}]))
    assert error.code == AgentErrorCode.NO_ANSWER


def test_a_repaired_call_runs_and_its_repair_is_on_the_trace():
    text = "<tool_call>{'name': 'read_text', 'arguments': {'path': 'notes.txt'},}"
    policy = ScriptedPolicy([{"text": text}, {"answer": "7"}])
    answer, trace, error = run(policy)
    assert error is None and answer == "7"
    assert trace.turns[0].tool_calls[0].result == "the code is 7"
    assert trace.repairs == ["unclosed_tag", "python_literal"]


def test_a_bad_call_gets_a_corrective_message_and_the_model_can_recover():
    policy = ScriptedPolicy([{"text": '<tool_call>{"name": "open_file"}</tool_call>'}, {"answer": "7"}])
    answer, trace, error = run(policy)
    assert error is None and answer == "7"
    assert "no tool named 'open_file'" in trace.turns[0].parse_error
    corrective = trace.messages[3]
    assert (
        corrective["role"] == "user"
        and "Available tools: list_files, read_text, submit_answer" in corrective["content"]
    )


def test_unparseable_calls_beyond_the_retry_limit_are_an_agent_error():
    policy = ScriptedPolicy([{"text": "<tool_call>not json at all</tool_call>"}])
    _, trace, error = run(policy, config=AgentConfig(max_parse_retries=2))
    assert error.code == AgentErrorCode.UNPARSEABLE
    assert len(trace.turns) == 3 and all(turn.parse_error for turn in trace.turns)


def test_a_model_that_never_answers_runs_out_of_turns():
    policy = ScriptedPolicy([{"tool_calls": [{"name": "list_files", "arguments": {}}]}])
    _, trace, error = run(policy, task=task_bundle(max_turns=4))
    assert error.code == AgentErrorCode.TURN_BUDGET and len(trace.turns) == 4


def test_completion_tokens_over_the_budget_are_an_agent_error():
    policy = ScriptedPolicy(
        [{"tool_calls": [{"name": "list_files", "arguments": {}}], "completion_tokens": 400}]
    )
    _, trace, error = run(policy, task=task_bundle(max_tokens=1000))
    assert error.code == AgentErrorCode.TOKEN_BUDGET and trace.completion_tokens == 1200


def test_a_slow_model_hits_the_deadline():
    policy = ScriptedPolicy([{"delay_sec": 5, "answer": "late"}])
    _, _, error = run(policy, task=task_bundle(agent_timeout_sec=0.2))
    assert error.code == AgentErrorCode.DEADLINE


def test_a_slow_tool_call_also_counts_against_the_deadline():
    policy = ScriptedPolicy([{"tool_calls": [{"name": "list_files", "arguments": {}}]}])
    _, trace, error = run(
        policy, task=task_bundle(agent_timeout_sec=0.2), executor=InMemoryTools({}, hang_sec=5)
    )
    assert error.code == AgentErrorCode.DEADLINE and trace.turns[0].tool_calls[0].name == "list_files"


class GrowingContextPolicy:
    name = "growing"
    context_window = 1000

    async def next_turn(self, messages, tools, *, context):
        used = 500 + 200 * context.turn
        call = {
            "id": f"c{context.turn}",
            "type": "function",
            "function": {"name": "list_files", "arguments": "{}"},
        }
        return AssistantTurn(text="", tool_calls=[call], prompt_tokens=used, completion_tokens=10)


def test_the_agent_is_warned_when_little_context_is_left_and_stopped_when_it_overflows():
    _, trace, error = run(GrowingContextPolicy(), task=task_bundle(max_turns=10))
    tool_results = [m["content"] for m in trace.messages if m["role"] == "tool"]
    assert "Warning" not in tool_results[1]
    assert "[Warning: only 9% of the context window is left" in tool_results[2]
    assert error.code == AgentErrorCode.CONTEXT_OVERFLOW and len(trace.turns) == 4


def test_a_harness_error_from_a_tool_passes_through_with_the_partial_trace():
    policy = ScriptedPolicy([{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"answer": "x"}])
    _, trace, error = run(policy, tools=[*TOOLS, tool("read_pdf")])
    assert error is None
    policy = ScriptedPolicy([{"tool_calls": [{"name": "read_pdf", "arguments": {}}]}])
    _, trace, error = run(policy, tools=[*TOOLS, tool("read_pdf")])
    assert error.code == HarnessCode.TOOL_EXCEPTION and trace.turns[0].tool_calls[0].name == "read_pdf"


def test_openai_style_calls_are_kept_on_the_assistant_message():
    policy = ScriptedPolicy([{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"answer": "x"}])
    _, trace, _ = run(policy)
    assert trace.messages[2]["tool_calls"][0]["function"] == {"name": "list_files", "arguments": "{}"}


@pytest.mark.parametrize("answer_key", ["answer", "text"])
def test_submit_answer_with_an_unusual_argument_name_still_yields_the_answer(answer_key):
    policy = ScriptedPolicy([{"tool_calls": [{"name": "submit_answer", "arguments": {answer_key: "42"}}]}])
    answer, _, _ = run(policy)
    assert answer == "42"


class CrashingPolicy:
    name = "crashing"

    async def next_turn(self, messages, tools, *, context):
        return {}["missing"]


def test_an_untyped_exception_in_the_policy_becomes_an_inference_harness_error_with_its_traceback():
    _, trace, error = run(CrashingPolicy())
    assert error.code == HarnessCode.INFERENCE and "KeyError" in error.message and "Traceback" in error.detail


class CrashingTools(InMemoryTools):
    async def call_tool(self, name, arguments):
        raise RuntimeError("server state corrupt")


def test_an_untyped_exception_in_a_tool_call_becomes_a_tool_exception_harness_error():
    policy = ScriptedPolicy([{"tool_calls": [{"name": "list_files", "arguments": {}}]}])
    _, trace, error = run(policy, executor=CrashingTools({}))
    assert error.code == HarnessCode.TOOL_EXCEPTION and "server state corrupt" in error.message
    assert trace.turns[0].tool_calls[0].name == "list_files"
