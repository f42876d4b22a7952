import json

from rl_engine.agent.parsing import TOOL_CALL_FORMAT, parse_turn, visible_text

TOOLS = ["read_text", "list_files", "submit_answer"]


def test_a_turn_without_tool_calls_parses_to_no_calls_and_no_error():
    result = parse_turn("The answer is 42.", None, TOOLS)
    assert result.calls == [] and result.error is None


def test_several_hermes_blocks_in_one_turn_become_calls_in_order_without_repairs():
    text = (
        "Let me look.\n"
        '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>\n'
        '<tool_call>{"name": "read_text", "arguments": {"path": "a.txt"}}</tool_call>'
    )
    result = parse_turn(text, None, TOOLS)
    assert [(call.name, call.arguments) for call in result.calls] == [
        ("list_files", {}),
        ("read_text", {"path": "a.txt"}),
    ]
    assert result.repairs == [] and result.error is None
    assert len({call.id for call in result.calls}) == 2


def test_trailing_commas_are_repaired_and_counted_but_commas_inside_strings_are_kept():
    text = (
        '<tool_call>{"name": "read_text", "arguments": {"path": "a,}.txt", "lines": [1, 2,],},}</tool_call>'
    )
    (call,) = parse_turn(text, None, TOOLS).calls
    assert call.arguments == {"path": "a,}.txt", "lines": [1, 2]}
    assert call.repairs == ["trailing_comma"]


def test_a_python_dict_literal_with_single_quotes_is_read_as_json():
    text = "<tool_call>{'name': 'read_text', 'arguments': {'path': \"it's.txt\", 'all': True}}</tool_call>"
    (call,) = parse_turn(text, None, TOOLS).calls
    assert call.arguments == {"path": "it's.txt", "all": True}
    assert call.repairs == ["python_literal"]


def test_an_unclosed_final_tag_code_fences_and_string_arguments_are_each_recorded():
    arguments = json.dumps({"path": "notes.md"})
    text = f'<tool_call>\n```json\n{{"name": "read_text", "arguments": {json.dumps(arguments)}}}\n```\n'
    (call,) = parse_turn(text, None, TOOLS).calls
    assert call.arguments == {"path": "notes.md"}
    assert call.repairs == ["unclosed_tag", "code_fence", "arguments_as_string"]


def test_arguments_under_a_parameters_key_are_accepted_as_a_repair():
    (call,) = parse_turn(
        '<tool_call>{"name": "list_files", "parameters": {"path": "."}}</tool_call>', None, TOOLS
    ).calls
    assert call.arguments == {"path": "."} and call.repairs == ["parameters_key"]


def test_broken_json_gets_a_corrective_message_naming_the_problem_and_the_expected_format():
    result = parse_turn('<tool_call>{"name": "read_text", "arguments": {"path": </tool_call>', None, TOOLS)
    assert result.calls == []
    assert "not valid JSON" in result.error and "line 1" in result.error
    assert TOOL_CALL_FORMAT in result.error


def test_a_call_without_a_name_is_a_parse_failure():
    result = parse_turn('<tool_call>{"arguments": {}}</tool_call>', None, TOOLS)
    assert 'no "name"' in result.error


def test_arguments_that_are_not_an_object_are_a_parse_failure():
    result = parse_turn('<tool_call>{"name": "read_text", "arguments": [1]}</tool_call>', None, TOOLS)
    assert "must be a JSON object, got list" in result.error


def test_an_unknown_tool_is_a_parse_failure_listing_the_available_tools():
    result = parse_turn('<tool_call>{"name": "browse_web", "arguments": {}}</tool_call>', None, TOOLS)
    assert "no tool named 'browse_web'" in result.error
    assert "list_files, read_text, submit_answer" in result.error


def test_openai_tool_calls_with_json_string_arguments_parse_without_repairs():
    raw = [
        {"id": "c7", "type": "function", "function": {"name": "read_text", "arguments": '{"path": "a.txt"}'}}
    ]
    (call,) = parse_turn("", raw, TOOLS).calls
    assert (call.id, call.name, call.arguments, call.repairs) == ("c7", "read_text", {"path": "a.txt"}, [])


def test_openai_tool_calls_with_broken_arguments_get_a_corrective_message():
    raw = [{"id": "c1", "type": "function", "function": {"name": "read_text", "arguments": '{"path": '}}]
    assert "arguments of read_text is not valid JSON" in parse_turn("", raw, TOOLS).error


def test_tool_calls_inside_reasoning_are_ignored():
    text = '<think>maybe <tool_call>{"name": "list_files", "arguments": {}}</tool_call></think>Final: 3'
    assert parse_turn(text, None, TOOLS).calls == []
    assert visible_text(text) == "Final: 3"
