"""The native tool-call parsers: one case per format and per hazard."""
from __future__ import annotations

import pytest

from colibri.tool_parsers import parse, validate_call

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "code": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get-time__v1", "parameters": {"type": "object", "properties": {}}}}]


def test_glm_xml_typed_values_and_verbatim_strings():
    text = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Høvik</arg_value>\n"
            "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>code</arg_key>\n<arg_value>00123</arg_value>\n"
            "</tool_call>")
    p = parse("glm-xml", text, TOOLS)
    assert p.calls == [{"name": "get_weather", "arguments": {"city": "Høvik", "days": 3, "code": "00123"}}]
    assert p.content == "" and p.problems == []


def test_glm_xml_zero_argument_call_and_two_calls_with_text():
    text = "Sure.\n<tool_call>get-time__v1</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Drassa</arg_value>\n</tool_call>"
    p = parse("glm-xml", text, TOOLS)
    assert [c["name"] for c in p.calls] == ["get-time__v1", "get_weather"]
    assert p.content == "Sure."


def test_json_tags():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Drassa", "days": 2}}\n</tool_call>'
    p = parse("json-tags", text, TOOLS)
    assert p.calls == [{"name": "get_weather", "arguments": {"city": "Drassa", "days": 2}}]


def test_json_tags_arguments_as_string_are_decoded():
    p = parse("json-tags", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"X\\"}"}</tool_call>', TOOLS)
    assert p.calls == [{"name": "get_weather", "arguments": {"city": "X"}}]


def test_qwen_xml():
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nDrassa\n</parameter>\n"
            "<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>")
    p = parse("qwen-xml", text, TOOLS)
    assert p.calls == [{"name": "get_weather", "arguments": {"city": "Drassa", "days": 4}}]


@pytest.mark.parametrize("fmt,text", [
    ("json-tags", '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>'),
    ("glm-xml", "<tool_call>get_weather\n<arg_key>city</arg_key>\nDrassa\n</tool_call>"),
    ("qwen-xml", "<tool_call>\n<function=get_weather>\nDrassa\n</function>\n</tool_call>"),
])
def test_unreadable_blocks_stay_text_and_are_reported(fmt, text):
    p = parse(fmt, text, TOOLS)
    assert p.calls == [] and p.content == text and p.problems


def test_unterminated_block_is_reported():
    p = parse("json-tags", '<tool_call>\n{"name": "get_weather"', TOOLS)
    assert p.calls == [] and p.problems == ["unterminated tool call block"]


def test_prose_mentioning_the_marker_is_not_a_call():
    p = parse("glm-xml", "I would use a <tool_call> block here, but no.", TOOLS)
    assert p.calls == []


def test_validate_call():
    assert validate_call({"name": "get_weather", "arguments": {"city": "x"}}, TOOLS) == []
    assert validate_call({"name": "nope", "arguments": {}}, TOOLS) == ["undeclared tool 'nope'"]
    assert validate_call({"name": "get_weather", "arguments": {"days": "3"}}, TOOLS) == [
        "missing required argument 'city'", "argument 'days' is not a integer"]
    assert validate_call({"name": "get_weather", "arguments": {"city": "x", "zz": 1}}, TOOLS) == [
        "undeclared argument 'zz'"]


@pytest.mark.parametrize("family,fmt", [("glm", "glm-xml"), ("chatml", "json-tags"), ("qwen-xml", "qwen-xml")])
def test_each_family_template_renders_calls_its_parser_reads_back(family, fmt):
    """Renderer and parser of every native format agree: a call rendered into history by the
    family's template parses back to the same call (rule tools.args.typed)."""
    from colibri.chat_template import render
    from colibri.model import Model
    from colibri.spec import load_spec

    row = load_spec().families[family].row
    call = {"name": "get_weather", "arguments": {"city": "Høvik 00123", "days": 3, "code": "00123"}}
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": call}]}]
    text = render(Model().template(row["template"]), msgs, tools=TOOLS, add_generation_prompt=False)
    block = text[text.index("<tool_call>"): text.rindex("</tool_call>") + len("</tool_call>")]
    assert parse(fmt, block, TOOLS).calls == [call]
