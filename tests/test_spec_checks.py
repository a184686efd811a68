"""The check-kind table: each kind's semantics, null handling, conditions, and load errors."""
from __future__ import annotations

import pytest

from colibri.spec.checks import KINDS, Context, SpecError, compile_check

CTX = Context(family={"roles": ["user", "assistant"], "tools": False, "reasoning": "none", "continuation": True},
              settings={"model_id": "m", "kv_slots": 2, "continue_assistant": True})


def run(check, body, endpoints=("chat",)):
    c = compile_check("t.rule", check, list(endpoints))
    f = c.run(body, CTX, {"invalid_value": "bad {param}"})
    return (f.code, f.param) if f else None


def test_type_treats_bool_and_decimal_literals_apart_from_integers():
    """req.integer.literal: 2.0 is a number, not the integer 2 (unlike JSON Schema)."""
    chk = {"field": "n", "type": ["integer"], "error": "invalid_type"}
    assert run(chk, {"n": True}) == ("invalid_type", "n")
    assert run(chk, {"n": 2}) is None
    assert run(chk, {"n": 2.0}) == ("invalid_type", "n")
    assert run(chk, {"n": 2.5}) == ("invalid_type", "n")
    assert run({"field": "n", "type": ["number"], "error": "invalid_type"}, {"n": 2}) is None


def test_null_means_absent_by_default_and_can_be_refused():
    assert run({"field": "n", "type": ["integer"], "error": "invalid_type"}, {"n": None}) is None
    assert run({"field": "n", "type": ["integer"], "error": "invalid_type", "null": "refuse"}, {"n": None}) \
        == ("invalid_type", "n")


def test_wildcards_report_the_concrete_path():
    chk = {"field": "messages.*.role", "enum": ["user"], "error": "unsupported_role"}
    body = {"messages": [{"role": "user"}, {"role": "bot"}]}
    assert run(chk, body) == ("unsupported_role", "messages.1.role")


def test_last_item_index():
    chk = {"field": "messages.-1.content", "no_trailing_space": True, "error": "invalid_value"}
    assert run(chk, {"messages": [{"content": "a "}, {"content": "b "}]}) == ("invalid_value", "messages.1.content")


def test_required_checks_each_parent_and_honours_relative_conditions():
    chk = {"field": "messages.*.content", "required": True, "error": "missing_required_parameter",
           "when": {"field": "@.role", "not_equals": "assistant"}}
    assert run(chk, {"messages": [{"role": "assistant"}, {"role": "user"}]}) == \
        ("missing_required_parameter", "messages.1.content")


def test_refuse_allow_is_type_aware():
    chk = {"field": "logprobs", "refuse": {"allow": [False]}, "error": "invalid_type"}
    assert run(chk, {"logprobs": 0}) == ("invalid_type", "logprobs")
    assert run(chk, {"logprobs": False}) is None


def test_requires_and_conflicts_use_truthiness_of_the_field():
    req = {"field": "echo", "requires": {"field": "logprobs", "truthy": True}, "error": "invalid_value"}
    assert run(req, {"echo": True, "logprobs": 0}) == ("invalid_value", "echo")
    assert run(req, {"echo": False}) is None
    con = {"field": "logprobs", "conflicts": {"field": "stream", "equals": True}, "error": "invalid_value"}
    assert run(con, {"logprobs": 3, "stream": True}) == ("invalid_value", "logprobs")
    assert run(con, {"logprobs": 0, "stream": True}) is None


def test_member_of_and_keys_and_settings():
    mem = {"field": "tool_choice.function.name", "member_of": "tools.*.function.name", "error": "invalid_value"}
    body = {"tools": [{"function": {"name": "f"}}], "tool_choice": {"function": {"name": "g"}}}
    assert run(mem, body) == ("invalid_value", "tool_choice.function.name")
    assert run({"field": "$", "keys": ["a"], "error": "invalid_value"}, {"a": 1, "zz": 2}) == ("invalid_value", "zz")
    assert run({"field": "model", "equals_setting": "model_id", "error": "invalid_value"}, {"model": "x"}) == \
        ("invalid_value", "model")
    rng = {"field": "cache_slot", "range": {"min": 0, "exclusive_max_setting": "kv_slots"}, "error": "invalid_value"}
    assert run(rng, {"cache_slot": 2}) == ("invalid_value", "cache_slot")
    assert run(rng, {"cache_slot": 1}) is None


def test_capability_word_none_counts_as_off():
    chk = {"field": "reasoning_effort", "capability": "reasoning", "error": "invalid_value"}
    assert run(chk, {"reasoning_effort": "high"}) == ("invalid_value", "reasoning_effort")


def test_continuation_condition():
    chk = {"field": "tools", "forbidden": True, "error": "invalid_value", "when": {"continuation": True}}
    cont = {"tools": [1], "messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}
    assert run(chk, cont) == ("invalid_value", "tools")
    assert run(chk, dict(cont, messages=[{"role": "user"}])) is None


def test_unknown_kind_is_a_load_error():
    with pytest.raises(SpecError, match="unknown check kind 'shape'"):
        compile_check("t.rule", {"field": "x", "shape": 1, "error": "e"}, ["chat"])


def test_two_kinds_in_one_check_is_a_load_error():
    with pytest.raises(SpecError, match="exactly one kind"):
        compile_check("t.rule", {"field": "x", "type": ["string"], "enum": ["a"], "error": "e"}, ["chat"])


def test_check_endpoint_outside_rule_is_a_load_error():
    with pytest.raises(SpecError, match="does not list"):
        compile_check("t.rule", {"field": "x", "type": ["string"], "error": "e", "endpoints": ["messages"]}, ["chat"])


def test_every_kind_is_documented_in_the_meta_schema():
    import json

    from colibri.paths import data_dir

    props = json.loads((data_dir("schemas") / "spec.schema.json").read_text())["$defs"]["check"]["properties"]
    assert set(KINDS) <= set(props)
