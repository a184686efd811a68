"""The client settings for one server, as colibri-conform derives them: the discovery probes,
then the compat profile's pi `compat` flags and OpenAI SDK choices (conformance/report.py),
plus `served`, the probes the scenarios consult to call a scenario UNSUPPORTED (the server
lacks it) rather than FAIL. A client is configured from this and nothing else, so a wrong
derivation shows up as a client failing."""
from __future__ import annotations

import json
from typing import Any

from colibri.spec import load_spec
from conformance.discovery import Capabilities
from conformance.report import all_of, compat_profile, probed, tools_usable
from conformance.targets import remote_target

SERVED = ("chat", "streaming", "stream_usage", "messages", "messages_text", "messages_blocks", "messages_stream",
          "responses", "responses_text", "responses_history", "responses_stream")

#: The probes a served flag rests on, where they are not just the flag's own name.
RESTS_ON = {"chat_text": ("chat_text", "thinking_off"), "stop": ("stop_list",), "tools": ("tools", "tool_call", "tool_result"),
            "tools_stream": ("tool_call_stream",),
            "responses_chaining": ("responses_chaining", "responses_chain_stored"), "reasoning": ("reasoning",)}


def why_not(served: dict[str, Any], found: dict[str, Any]) -> dict[str, str]:
    """For each flag the settings turn off, what its probes saw: an endpoint not served, or a
    feature taken and not delivered, which no setting makes work here."""
    out = {}
    for flag, on in served.items():
        seen = [f"{p}: {found[p]['detail']}" for p in RESTS_ON.get(flag, (flag,))
                if p in found and found[p]["state"] != "served"]
        if on is False:
            out[flag] = "; ".join(seen) or "no switch the settings can carry"
    return out


def derive(base: str, model: str | None) -> tuple[str, dict[str, Any]]:
    """The served model and the settings for the server at BASE (no /v1)."""
    target = remote_target(base + "/v1", {}, model)
    return target.model, settings_from(Capabilities.discover(load_spec(), target).to_dict())


def settings_from(found: dict[str, Any]) -> dict[str, Any]:
    """The settings for what discovery found (Capabilities.to_dict())."""
    profile = compat_profile(found)
    served: dict[str, Any] = {name: probed(found, name) for name in SERVED}
    # A feature counts as served only where a client can use it (conformance/usability.py):
    # answered as asked (with the thinking switch if one is needed), a stop applied, a call that
    # comes back and whose result is answered, block content taken, a stored response chained.
    p = profile["delivers"]
    served.update(chat_text=True if p["chat_text"] or profile["thinking_off"] else p["chat_text"],
                  stop=p["stop_list"], tools=tools_usable(found), tools_stream=p["tool_call_stream"],
                  responses_chaining=all_of(probed(found, "responses_chaining"), p["responses_chain_stored"]))
    # Reasoning is offered when the settings carry a switch a client can pull.
    served["reasoning"] = bool(profile["pi_compat"]["thinkingFormat"]) and profile["reasoning_field"] is not None
    # pi's Responses surface parks turns (store + previous_response_id, the second seed) only
    # where the server chains: llama-server refuses previous_response_id outright.
    return {"pi_compat": profile["pi_compat"], "openai_sdk": profile["openai_sdk"],
            "pi_responses": {"parking": served["responses"] is True and served["responses_chaining"] is True},
            "reasoning_field": profile["reasoning_field"], "served": served, "why_not": why_not(served, found)}


def changed(old: Any, new: Any, where: str = "") -> list[str]:
    """Every setting that differs between two derivations, as `path: old -> new`: a changed
    emission, which the committed matrix no longer proves. `why_not` is the probes' evidence, not
    a setting (a detail may quote an id the server made up), so it is not compared."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [line for k in dict.fromkeys([*old, *new]) if not (k == "why_not" and not where)
                for line in changed(old.get(k), new.get(k), f"{where}.{k}" if where else k)]
    return [] if old == new else [f"{where}: {json.dumps(old)} -> {json.dumps(new)}"]
