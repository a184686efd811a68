"""What a load run sends: the suite's behaviour-neutral vectors, each in the modes it runs in.

A vector is behaviour-neutral when its verdict cannot depend on what the model writes or on
server state a load would disturb: a wire rule's valid request (expected 200) to a generating
endpoint, needing no server settings, no raw body, no extra headers, and at most checks that
read only the response itself. Those are the requests a load may repeat thousands of times and
still judge each answer by the rule's own expectations. A plan travels from a Locust master to
its workers as keys (`rule[vector]~mode`): each worker rebuilds the vectors from its own spec/.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from colibri.spec.model import Vector

from ..runner import official_skip, prepare
from ..suite import Selection, skip_reason, variants, vector_skip

#: Endpoints whose answers are generated text (what a load exercises).
GENERATING = ("chat", "completions", "messages", "responses")
#: Named checks that read only the response judged: safe to run on every answer of a load.
#: Everything else (resends, /metrics reads, stored-response look-ups, what the model chose to
#: write) stays out of a load plan.
RESPONSE_ONLY_CHECKS = frozenset({
    "response_schema", "usage_arithmetic", "one_finish_reason", "role_first", "done_sentinel", "sse_framing",
    "usage_chunk_last", "stream_one_id", "anthropic_event_order", "anthropic_usage", "request_id_header",
    "finish_consistent", "finish_matches_usage", "budget_respected", "no_replacement_char", "error_envelope",
    "no_server_error"})
#: The request a disconnecting client sends and leaves after its first event: long enough that
#: it is still generating when the client goes (the ops.cancel.disconnect vector's prompt).
DISCONNECT_REQUEST = {"messages": [{"role": "user", "content": "Count from 1 to 60."}], "max_tokens": 200,
                      "stream": True, "temperature": 0}


@dataclass
class Item:
    """One request of the plan: a vector in one mode, ready to send."""

    key: str
    rule: Any
    vector: Vector
    mode: str
    greedy: bool


@dataclass
class Plan:
    items: list[Item]
    excluded: dict[str, str] = field(default_factory=dict)  # key -> why it stays out

    def keys(self) -> list[str]:
        return [i.key for i in self.items]


def key_of(vector: Vector, mode: str) -> str:
    return f"{vector.id}~{mode}"


def neutral_reason(spec: Any, rule: Any, vector: Vector, sel: Selection) -> str | None:
    """Why a selected rule's vector is not behaviour-neutral (or not for this contract), or None."""
    if rule.kind != "wire":
        return "a behaviour rule: its verdict depends on what the model writes"
    if vector.endpoint not in GENERATING or vector.method != "POST":
        return f"not a generating endpoint ({vector.endpoint})"
    if int(vector.expect.get("status", 0)) != 200:
        return "a refusal vector: it judges the request, not the server under load"
    if vector.server or vector.raw_body is not None or vector.headers or vector.invalid:
        return "needs server settings, a raw body or headers of its own"
    other = set(vector.expect.get("checks", [])) - RESPONSE_ONLY_CHECKS
    if other:
        return f"checks that read more than the response: {', '.join(sorted(other))}"
    why = vector_skip(vector, sel.remote, sel.api_key)
    if why is None and not sel.strict_contract:
        why = official_skip(spec, rule, vector, sel.profiles)
    return why


def is_greedy(spec: Any, vector: Vector, model: str) -> bool:
    body = prepare(spec, vector, model).body or {}
    return body.get("temperature") == 0 and body.get("n", 1) == 1


def build(spec: Any, sel: Selection, model: str, gate: Any = None) -> Plan:
    """The plan for a selection: every neutral vector of a selected rule, in each mode the
    suite runs it in, minus what discovery found not served (`gate`, Capabilities.gate)."""
    plan = Plan([])
    for rule in spec.rules:
        if skip_reason(rule, sel) is not None:
            continue
        for vector in rule.vectors:
            why = neutral_reason(spec, rule, vector, sel)
            for mode, v in variants(rule, vector):
                key = key_of(v, mode)
                gated = gate(v, mode) if gate and why is None else None
                if why or gated is not None:
                    plan.excluded[key] = why or (gated.reason if gated is not None else "")
                    continue
                plan.items.append(Item(key, rule, v, mode, is_greedy(spec, v, model)))
    return plan


def from_keys(spec: Any, keys: list[str], model: str) -> Plan:
    """The plan a master sent as keys, rebuilt from this process's spec/ (a worker)."""
    wanted = set(keys)
    found: dict[str, Item] = {}
    for rule in spec.rules:
        for vector in rule.vectors:
            for mode, v in variants(rule, vector):
                key = key_of(v, mode)
                if key in wanted:
                    found[key] = Item(key, rule, v, mode, is_greedy(spec, v, model))
    missing = wanted - found.keys()
    if missing:
        raise ValueError(f"this worker's spec/ lacks {len(missing)} of the master's vectors, e.g. {sorted(missing)[0]}: "
                         "run the same colibri version on the master and every worker")
    return Plan([found[k] for k in keys])


def spec_digest(spec: Any) -> str:
    """A fingerprint of the rules and vectors, so a worker on another version is refused."""
    h = hashlib.sha256()
    for r in spec.rules:
        h.update(r.id.encode())
        for v in r.vectors:
            h.update(repr((v.name, v.endpoint, v.request, v.expect)).encode())
    return h.hexdigest()[:16]
