"""Rule tools.call.offered-only: a turn whose calls name a tool the request did not offer
returns no call; the model's text stays content, as written. Driven through the real text
pipeline (Generation) with the tokens a model would send, so the outcome does not depend on
what the embedded model happens to write."""
from __future__ import annotations

import pytest

from colibri.server.generation import Generation, Spec
from colibri.server.task import Accepted, Done, Task, TokenRecord

CONVERT = [{"type": "function", "function": {"name": "convert_units", "parameters": {"type": "object", "properties": {
    "value": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["value"]}}}]
CALL = ("<tool_call>{name}\n<arg_key>value</arg_key>\n<arg_value>5</arg_value>\n"
        "<arg_key>from</arg_key>\n<arg_value>km</arg_value>\n</tool_call>")


class NoScheduler:
    timing = False

    class profiles:  # noqa: N801 - stands in for the ring
        @staticmethod
        def add(turn) -> None:
            pass


def outcome(text: str, tools=CONVERT, strict: bool = False):
    """The outcome of a turn whose tokens spell `text` (one token per piece of ~5 bytes)."""
    raw = text.encode()
    pieces = [raw[i:i + 5] for i in range(0, len(raw), 5)]
    task = Task(prompt=[1], max_new=1000, end_tokens=frozenset())
    gen = Generation(NoScheduler(), task, pieces, Spec(stops=[], ignore_leading=False, thinking=False, tools=tools,
                                                       tool_format="glm-xml", strict_tools=strict))
    gen.accepted = Accepted(prompt_tokens=1, reused=0, queue_wait=0.0, echo=[])
    for i in range(len(pieces)):
        task.events.put(TokenRecord(i))
    task.events.put(Done("stop"))
    return gen.run()


def test_tools_call_offered_only_a_call_to_an_offered_tool_is_a_call():
    o = outcome(CALL.format(name="convert_units"))
    assert [c["name"] for c in o.tool_calls] == ["convert_units"] and o.finish_reason == "tool_calls"


def test_tools_call_offered_only_a_call_to_another_tool_stays_text():
    text = "Let me convert that.\n" + CALL.format(name="convert_currency")
    o = outcome(text)
    assert o.tool_calls == [] and o.finish_reason == "stop"
    assert o.content == text  # nothing lost: the model's words, as written


def test_tools_call_offered_only_one_stray_call_voids_the_turns_calls():
    o = outcome(CALL.format(name="convert_units") + "\n" + CALL.format(name="convert_currency"))
    assert o.tool_calls == [] and o.finish_reason == "stop" and "convert_currency" in o.content


def test_tools_call_offered_only_under_strict_tool_calls_is_a_502():
    from colibri.server.errors import ApiError

    with pytest.raises(ApiError) as got:
        outcome(CALL.format(name="convert_currency"), strict=True)
    assert (got.value.status, got.value.code) == (502, "invalid_model_tool_call")
