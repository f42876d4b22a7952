"""Turning the conversation and the tool schemas into the prompt text a causal LM continues.

A tokenizer that ships a chat template is always used through it (`apply_chat_template` with
`tools=`), so a model sees exactly the format it was trained on. Without one, the built-in template
below is used. It is ChatML with Hermes/Qwen tool use, the format most open tool-calling models know:

    <|im_start|>system
    {system message}

    # Tools

    You may call one or more functions to assist with the user query.

    You are provided with function signatures within <tools></tools> XML tags:
    <tools>
    {one OpenAI-style function schema per line}
    </tools>

    For each function call, return a json object with function name and arguments within
    <tool_call></tool_call> XML tags:
    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call><|im_end|>
    <|im_start|>user
    {instruction}<|im_end|>
    <|im_start|>assistant
    {text, including its <tool_call> blocks}<|im_end|>
    <|im_start|>user
    <tool_response>
    {tool result}
    </tool_response><|im_end|>
    <|im_start|>assistant

Consecutive tool results go into one user message, one `<tool_response>` block each, in call order.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

END_OF_TURN = "<|im_end|>"


class ToolSchemaLike(Protocol):
    name: str
    description: str
    input_schema: dict


def openai_tool_schemas(tools: list[ToolSchemaLike]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
        }
        for tool in tools
    ]


def render_prompt(messages: list[dict[str, Any]], tools: list[ToolSchemaLike], tokenizer: Any = None) -> str:
    """The prompt text, ending where the assistant's next turn starts."""
    schemas = openai_tool_schemas(tools)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            _with_decoded_arguments(messages), tools=schemas, add_generation_prompt=True, tokenize=False
        )
    return render_builtin(messages, schemas)


def render_builtin(messages: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    rest = messages
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    if messages and messages[0]["role"] == "system":
        rest = messages[1:]
    parts.append(_block("system", system + _tools_section(schemas) if schemas else system))
    pending_results: list[str] = []
    for message in rest:
        if message["role"] == "tool":
            pending_results.append(f"<tool_response>\n{message['content']}\n</tool_response>")
            continue
        if pending_results:
            parts.append(_block("user", "\n".join(pending_results)))
            pending_results = []
        parts.append(
            _block(
                message["role"],
                _assistant_text(message) if message["role"] == "assistant" else message["content"],
            )
        )
    if pending_results:
        parts.append(_block("user", "\n".join(pending_results)))
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _block(role: str, content: str) -> str:
    return f"<|im_start|>{role}\n{content}{END_OF_TURN}\n"


def _tools_section(schemas: list[dict[str, Any]]) -> str:
    listed = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def _assistant_text(message: dict[str, Any]) -> str:
    """An assistant message whose calls came as OpenAI `tool_calls` is rendered as <tool_call> blocks."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = function["arguments"]
        if isinstance(arguments, str):
            arguments = json.loads(arguments or "{}")
        block = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False)
        text += f"\n<tool_call>\n{block}\n</tool_call>"
    return text


def _with_decoded_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HF chat templates expect tool-call arguments as objects, the OpenAI wire format sends strings."""
    decoded = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = dict(message)
            message["tool_calls"] = [
                {
                    **call,
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": json.loads(call["function"]["arguments"] or "{}")
                        if isinstance(call["function"]["arguments"], str)
                        else call["function"]["arguments"],
                    },
                }
                for call in calls
            ]
        decoded.append(message)
    return decoded
