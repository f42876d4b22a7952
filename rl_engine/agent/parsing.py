"""Tool calls out of an assistant turn: Hermes/Qwen `<tool_call>` blocks or OpenAI `tool_calls`.

Only repairs that cannot change what the model meant are applied, and each one is named on the call
so traces show how often a model needed help:

| repair | what was wrong |
|---|---|
| `code_fence` | the JSON inside the tag was wrapped in a Markdown code fence |
| `unclosed_tag` | the last `<tool_call>` was never closed (generation stopped at the end of the JSON) |
| `trailing_comma` | a comma before `}` or `]` |
| `python_literal` | single quotes / True / False / None: a Python dict literal, read with `ast.literal_eval` |
| `arguments_as_string` | `arguments` was a JSON-encoded string instead of an object |
| `parameters_key` | the arguments were under `parameters` instead of `arguments` |

Anything else is a parse failure with a corrective message that says exactly what was wrong and
shows the expected format; the loop sends it back to the model and retries a bounded number of times.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from pydantic import BaseModel, Field

TOOL_CALL_FORMAT = '<tool_call>\n{"name": "TOOL_NAME", "arguments": {"ARGUMENT": "VALUE"}}\n</tool_call>'

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_CODE_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


class ParsedCall(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any]
    repairs: list[str] = Field(default_factory=list)


class ParseResult(BaseModel):
    calls: list[ParsedCall] = Field(default_factory=list)
    # Set when the turn must be retried; the text is what the model is told.
    error: str | None = None

    @property
    def repairs(self) -> list[str]:
        return [repair for call in self.calls for repair in call.repairs]


class _CallProblem(Exception):
    """A call that no safe repair can fix; the message is shown to the model."""


def parse_turn(text: str, tool_calls: list[dict] | None, available_tools: list[str]) -> ParseResult:
    """Read every tool call of one assistant turn; no call at all is a valid (final-answer) turn."""
    try:
        if tool_calls:
            calls = [_parse_openai_call(index, raw) for index, raw in enumerate(tool_calls)]
        else:
            calls = [
                _parse_hermes_call(index, body, closed) for index, (body, closed) in enumerate(_blocks(text))
            ]
        for call in calls:
            if call.name not in available_tools:
                raise _CallProblem(
                    f"There is no tool named {call.name!r}. Available tools: {', '.join(sorted(available_tools))}."
                )
    except _CallProblem as problem:
        return ParseResult(error=corrective_message(str(problem)))
    return ParseResult(calls=calls)


def corrective_message(problem: str) -> str:
    return (
        f"Your last tool call could not be used: {problem}\n"
        f"Call a tool with exactly this format, one block per call, the arguments as a JSON object:\n"
        f"{TOOL_CALL_FORMAT}\n"
        "To finish, call submit_answer (or reply with your final answer and no tool call)."
    )


def visible_text(text: str) -> str:
    """The turn's text without its reasoning (`<think>` blocks), which is never an answer or a call."""
    return _THINK_BLOCK.sub("", text).strip()


def _blocks(text: str) -> list[tuple[str, bool]]:
    return [
        (match.group(1), match.group(0).endswith("</tool_call>"))
        for match in _TOOL_CALL_BLOCK.finditer(visible_text(text))
    ]


def _parse_hermes_call(index: int, body: str, closed: bool) -> ParsedCall:
    repairs: list[str] = [] if closed else ["unclosed_tag"]
    payload = body.strip()
    fenced = _CODE_FENCE.match(payload)
    if fenced:
        payload = fenced.group(1).strip()
        repairs.append("code_fence")
    if not payload:
        raise _CallProblem("the <tool_call> block is empty.")
    value = _load_object(payload, repairs, what="the <tool_call> block")
    return _call_from_object(f"call_{index}", value, repairs)


def _parse_openai_call(index: int, raw: dict) -> ParsedCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _CallProblem(f"tool call #{index + 1} has no function name.")
    repairs: list[str] = []
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        # The OpenAI wire format sends arguments as a JSON string: decoding it is not a repair.
        arguments = (
            _load_object(arguments, repairs, what=f"the arguments of {function['name']}")
            if arguments.strip()
            else {}
        )
    if not isinstance(arguments, dict):
        raise _CallProblem(
            f"the arguments of {function['name']} must be a JSON object, got {type(arguments).__name__}."
        )
    return ParsedCall(
        id=str(raw.get("id") or f"call_{index}"), name=function["name"], arguments=arguments, repairs=repairs
    )


def _call_from_object(call_id: str, value: dict, repairs: list[str]) -> ParsedCall:
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise _CallProblem('the JSON has no "name" string naming the tool.')
    if "arguments" not in value and "parameters" in value:
        value["arguments"] = value.pop("parameters")
        repairs.append("parameters_key")
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        arguments = (
            _load_object(arguments, repairs, what=f"the arguments of {name}") if arguments.strip() else {}
        )
        repairs.append("arguments_as_string")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise _CallProblem(f'"arguments" of {name} must be a JSON object, got {type(arguments).__name__}.')
    return ParsedCall(id=call_id, name=name, arguments=arguments, repairs=repairs)


def _load_object(payload: str, repairs: list[str], *, what: str) -> dict:
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as first_error:
        value = _repaired(payload, repairs, first_error, what)
    if not isinstance(value, dict):
        raise _CallProblem(f"{what} must be a JSON object, got {type(value).__name__}.")
    return value


def _repaired(payload: str, repairs: list[str], error: json.JSONDecodeError, what: str) -> Any:
    without_commas = _strip_trailing_commas(payload)
    if without_commas != payload:
        try:
            value = json.loads(without_commas)
        except json.JSONDecodeError:
            pass
        else:
            repairs.append("trailing_comma")
            return value
    try:
        value = ast.literal_eval(payload)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _CallProblem(
            f"{what} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})."
        ) from None
    if not _is_json_like(value):
        raise _CallProblem(
            f"{what} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})."
        )
    repairs.append("python_literal")
    return value


def _strip_trailing_commas(payload: str) -> str:
    """Drop commas directly before a closing bracket, leaving string contents untouched."""
    out: list[str] = []
    in_string = False
    escaped = False
    for char in payload:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            out.append(char)
            continue
        if char == '"':
            in_string = True
        elif char in "}]":
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
        out.append(char)
    return "".join(out)


def _is_json_like(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json_like(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(_is_json_like(item) for item in value)
    return value is None or isinstance(value, str | int | float | bool)
