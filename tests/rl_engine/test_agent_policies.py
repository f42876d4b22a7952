import asyncio
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rl_engine.agent import HFPolicy, NullPolicy, OpenAIPolicy, PolicyContext, ScriptedPolicy
from rl_engine.agent.chat_format import render_prompt
from rl_engine.outcomes import AgentError, AgentErrorCode, HarnessCode, HarnessError
from tests.rl_engine.tiny_model import QWEN_LIKE_TEMPLATE, build_tiny_model


@dataclass
class Tool:
    name: str
    description: str = "a tool"
    input_schema: dict = field(
        default_factory=lambda: {"type": "object", "properties": {"path": {"type": "string"}}}
    )


TOOLS = [Tool("read_text"), Tool("submit_answer")]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is in notes.txt?"}]


def context(turn: int = 0, sample: int = 0) -> PolicyContext:
    return PolicyContext(bundle=None, sandbox=None, sample=sample, turn=turn, turns_left=5, seconds_left=60)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def test_the_hf_policy_returns_one_logprob_per_generated_token_and_is_deterministic_when_greedy(tiny_model):
    policy = HFPolicy(tiny_model, max_new_tokens=12)
    first = asyncio.run(policy.next_turn(MESSAGES, TOOLS, context=context()))
    again = asyncio.run(policy.next_turn(MESSAGES, TOOLS, context=context()))
    assert 1 <= first.completion_tokens <= 12
    assert len(first.token_ids) == len(first.logprobs) == first.completion_tokens
    assert all(logprob <= 0 for logprob in first.logprobs)
    assert first.prompt_tokens > 20 and first.token_ids == again.token_ids
    assert policy.context_window == 2048


def test_the_hf_policy_samples_differently_per_sample_when_temperature_is_set(tiny_model):
    policy = HFPolicy(tiny_model, max_new_tokens=16, temperature=1.0)
    turns = [asyncio.run(policy.next_turn(MESSAGES, TOOLS, context=context(sample=s))) for s in range(3)]
    assert len({tuple(turn.token_ids) for turn in turns}) > 1


def test_a_prompt_longer_than_the_context_window_is_context_overflow(tmp_path):
    policy = HFPolicy(build_tiny_model(tmp_path, max_positions=64), max_new_tokens=8)
    long_messages = [{"role": "user", "content": "growth target " * 200}]
    with pytest.raises(AgentError) as caught:
        asyncio.run(policy.next_turn(long_messages, TOOLS, context=context()))
    assert caught.value.code == AgentErrorCode.CONTEXT_OVERFLOW


def test_an_exception_inside_generation_is_an_inference_harness_error(tiny_model):
    policy = HFPolicy(tiny_model, max_new_tokens=4)
    policy.model.config.vocab_size = 0
    policy.model.lm_head = None  # a model broken in memory: generate() raises inside transformers
    with pytest.raises(HarnessError) as caught:
        asyncio.run(policy.next_turn(MESSAGES, TOOLS, context=context()))
    assert caught.value.code == HarnessCode.INFERENCE and "Traceback" in caught.value.detail


def test_without_a_chat_template_the_builtin_chatml_template_lists_tools_and_the_call_format(tiny_model):
    policy = HFPolicy(tiny_model)
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "read_text", "arguments": '{"path": "notes.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "read_text", "content": "the code is 7"},
    ]
    prompt = render_prompt(messages, TOOLS, policy.tokenizer)
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '"name": "read_text"' in prompt and "<tool_call>" in prompt
    assert (
        '<tool_call>\n{"name": "read_text", "arguments": {"path": "notes.txt"}}\n</tool_call><|im_end|>'
        in prompt
    )
    assert "<|im_start|>user\n<tool_response>\nthe code is 7\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_a_tokenizer_with_a_chat_template_is_formatted_through_it_with_the_tools(tmp_path):
    policy = HFPolicy(build_tiny_model(tmp_path, chat_template=QWEN_LIKE_TEMPLATE), max_new_tokens=2)
    prompt = render_prompt(MESSAGES, TOOLS, policy.tokenizer)
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is in notes.txt?<|im_end|>\n"
        "<|im_start|>tools\nread_text\nsubmit_answer\n<|im_end|>\n<|im_start|>assistant\n"
    )
    assert asyncio.run(policy.next_turn(MESSAGES, TOOLS, context=context())).completion_tokens <= 2


def test_the_null_policy_submits_i_dont_know_through_the_submit_tool():
    turn = asyncio.run(NullPolicy().next_turn(MESSAGES, TOOLS, context=context()))
    assert turn.tool_calls[0]["function"] == {
        "name": "submit_answer",
        "arguments": '{"answer": "I don\'t know."}',
    }
    plain = asyncio.run(NullPolicy().next_turn(MESSAGES, [Tool("read_text")], context=context()))
    assert plain.text == "I don't know." and plain.tool_calls is None


def test_a_scripted_policy_reads_its_turns_from_a_json_file_and_repeats_the_last(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "hello", "completion_tokens": 3}, {"answer": "42"}]}))
    policy = ScriptedPolicy.from_file(script)
    turns = [asyncio.run(policy.next_turn(MESSAGES, TOOLS, context=context(turn=t))) for t in range(3)]
    assert (turns[0].text, turns[0].completion_tokens) == ("hello", 3)
    assert (
        turns[1].tool_calls[0]["function"]["arguments"]
        == '{"answer": "42"}'
        == turns[2].tool_calls[0]["function"]["arguments"]
    )


def test_a_script_that_is_not_a_list_of_turns_is_refused_with_the_reason(tmp_path):
    script = tmp_path / "script.json"
    script.write_text('{"steps": 3}')
    with pytest.raises(ValueError, match="expected a JSON list of turn objects"):
        ScriptedPolicy.from_file(script)


class ChatServer:
    """A real OpenAI-compatible endpoint on 127.0.0.1 answering with a queue of (status, body)."""

    def __init__(self, answers: list[tuple[int, str]]) -> None:
        self.answers = answers
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, body = server.answers.pop(0)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_openai_policy_sends_tools_and_reads_tool_calls_and_usage():
    completion = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x1",
                            "type": "function",
                            "function": {"name": "read_text", "arguments": '{"path": "a"}'},
                        }
                    ],
                }
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9},
    }
    server = ChatServer([(200, json.dumps(completion))])
    try:
        turn = asyncio.run(OpenAIPolicy(server.url, "m1").next_turn(MESSAGES, TOOLS, context=context()))
    finally:
        server.close()
    assert turn.tool_calls[0]["id"] == "x1" and (turn.prompt_tokens, turn.completion_tokens) == (50, 9)
    assert server.requests[0]["model"] == "m1"
    assert [tool["function"]["name"] for tool in server.requests[0]["tools"]] == [
        "read_text",
        "submit_answer",
    ]


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, '{"error": "boom"}', "answered HTTP 500"),
        (200, "not json", "not a chat completion"),
        (200, '{"choices": []}', "not a chat completion"),
    ],
)
def test_openai_server_failures_are_inference_harness_errors_with_the_body_kept(status, body, expected):
    server = ChatServer([(status, body)])
    try:
        with pytest.raises(HarnessError) as caught:
            asyncio.run(OpenAIPolicy(server.url).next_turn(MESSAGES, TOOLS, context=context()))
    finally:
        server.close()
    assert caught.value.code == HarnessCode.INFERENCE and expected in caught.value.message
    assert body in caught.value.detail


def test_an_unreachable_openai_server_is_an_inference_harness_error():
    with pytest.raises(HarnessError) as caught:
        asyncio.run(OpenAIPolicy("http://127.0.0.1:9/v1").next_turn(MESSAGES, TOOLS, context=context()))
    assert caught.value.code == HarnessCode.INFERENCE and "could not be reached" in caught.value.message


def test_a_context_length_refusal_from_the_server_is_context_overflow():
    server = ChatServer(
        [(400, '{"error": {"message": "This model\'s maximum context length is 4096 tokens"}}')]
    )
    try:
        with pytest.raises(AgentError) as caught:
            asyncio.run(OpenAIPolicy(server.url).next_turn(MESSAGES, TOOLS, context=context()))
    finally:
        server.close()
    assert caught.value.code == AgentErrorCode.CONTEXT_OVERFLOW
