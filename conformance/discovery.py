"""Capability discovery: before the rules run, a handful of requests find out which endpoints
the target serves and which features it refuses cleanly. A rule about something the target
does not serve is UNSUPPORTED with the probe as its evidence, instead of a cascade of FAILs;
the findings head every report."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from colibri.spec.model import Vector, deep_merge
from colibri.spec.vectors import expand_model

from .exchange import Exchange, TransportError, model_of
from .runner import Result
from .usability import chat_message, follow_up, reasoning_field

#: An id no server holds: the chaining probe asks for it.
UNKNOWN_RESPONSE = "resp_00000000000000000000000000000000"
#: Named checks that chain a child onto the response a vector created.
CHAIN_CHECKS = {"responses_chain", "responses_chain_not_inherited", "responses_chain_cached"}

_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
_WEATHER = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "max_tokens": 100}

#: probe name -> (endpoint, extra request fields, what it tells)
PROBES: dict[str, tuple[str, dict[str, Any], str]] = {
    "models": ("models", {}, "GET /v1/models lists models"),
    "model": ("model", {}, "GET /v1/models/{model} retrieves the served model"),
    "chat": ("chat", {}, "POST /v1/chat/completions answers"),
    "completions": ("completions", {}, "POST /v1/completions answers"),
    "messages": ("messages", {}, "POST /v1/messages (Anthropic) answers"),
    "render": ("render", {}, "POST /v1/render (colibri extension) answers"),
    "systemone": ("systemone", {}, "POST /v1/systemone (System One decisions) answers"),
    "responses": ("responses", {}, "POST /v1/responses (OpenAI Responses) answers"),
    "response": ("response", {}, "GET /v1/responses/{id} looks a stored response up (an unknown id is not found)"),
    "responses_chaining": ("responses", {"previous_response_id": UNKNOWN_RESPONSE},
                           "POST /v1/responses looks up previous_response_id (an unknown one is not found)"),
    "streaming": ("chat", {"stream": True}, "chat streams as server-sent events"),
    "logprobs": ("chat", {"logprobs": True, "top_logprobs": 2}, "chat returns logprobs"),
    "tools": ("chat", {"tools": _TOOLS}, "chat accepts tools"),
    # What a client's settings depend on (the compat block of each report)
    "developer_role": ("chat", {"messages": [{"role": "developer", "content": "Answer briefly."},
                                             {"role": "user", "content": "Repeat exactly: hello"}]},
                       "chat accepts the developer role"),
    # A prompt that runs long, so a server that accepts the field and ignores it (llama-server,
    # issue 53: 1,128 tokens under a cap of 128) is told from one that honours it.
    "max_completion_tokens": ("chat", {"max_tokens": {"$delete": True}, "max_completion_tokens": 8,
                                       "messages": [{"role": "user", "content": "Count from 1 to 40."}]},
                              "chat honours max_completion_tokens (no more than 8 tokens come back)"),
    "store": ("chat", {"store": False}, "chat accepts store"),
    "reasoning_effort": ("chat", {"reasoning_effort": "low"}, "chat accepts reasoning_effort"),
    "zai_thinking": ("chat", {"thinking": {"type": "disabled"}}, "chat accepts thinking: {type} (Z.ai and DeepSeek style; pi's thinkingFormat \"deepseek\")"),
    "stream_usage": ("chat", {"stream": True, "stream_options": {"include_usage": True}},
                     "chat streams accept stream_options.include_usage"),
    # What the compat profile reports, found once here rather than read from whichever rules ran
    "reasoning": ("chat", {"enable_thinking": True, "max_tokens": 60,
                           "messages": [{"role": "user", "content": "What is the capital of Velmora?"}]},
                  "chat returns reasoning when asked (enable_thinking), in a field of its own"),
    "tool_choice_none": ("chat", {"tools": _TOOLS, "tool_choice": "none", **_WEATHER},
                         "chat honours tool_choice none (no call comes back)"),
    "tool_choice_required": ("chat", {"tools": _TOOLS, "tool_choice": "required", **_WEATHER},
                             "chat honours tool_choice required (a call comes back)"),
    "tool_choice_forced": ("chat", {"tools": _TOOLS, **_WEATHER,
                                    "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
                           "chat honours a forced tool_choice (the named tool is called)"),
    "top_logprobs_20": ("chat", {"logprobs": True, "top_logprobs": 20},
                        "chat returns logprobs with top_logprobs 20 (the official maximum)"),
    "error_envelope": ("chat", {"messages": "not a list"},
                       "chat refuses an invalid request with OpenAI's error envelope ({error: {message, type}})"),
    "health": ("health", {}, "GET /health answers"),
    "metrics": ("metrics", {}, "GET /metrics answers Prometheus text"),
    "profile": ("profile", {}, "GET /profile (colibri extension) answers the turn profile"),
}
#: The endpoints whose absence makes every vector sent to them UNSUPPORTED.
ENDPOINT_PROBES = {"models": "models", "model": "model", "chat": "chat", "completions": "completions",
                   "messages": "messages", "render": "render", "health": "health", "metrics": "metrics",
                   "systemone": "systemone", "responses": "responses", "response": "response",
                   "profile": "profile"}
#: Named checks that read a created response back through GET/DELETE /v1/responses/{id}.
RETRIEVE_CHECKS = {"responses_retrieve", "responses_not_stored", "responses_delete", "responses_store_evicts"}
#: A path no server serves, beside the retrieve route: what "no such route" looks like on the target.
UNKNOWN_ROUTE = "/v1/colibri-no-such-route/" + UNKNOWN_RESPONSE


@dataclass
class Finding:
    name: str
    state: str  # served | absent | refused | ignored | error
    status: int
    detail: str
    exchange: Exchange | None
    value: Any = None  # what a served probe found out (the reasoning field; whether a stream ended with [DONE])

    def to_dict(self, redact: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"state": self.state, "status": self.status, "detail": self.detail}
        if self.value is not None:
            d["value"] = self.value
        if self.exchange is not None and self.state != "served":
            d["evidence"] = self.exchange.to_dict(redact)
        return d


#: Endpoints a compatible server may leave out (colibri's render, System One, Responses): one that fails a valid
#: request to one with a 5xx does not serve it (LiteLLM forwards unknown paths to its upstream
#: provider, which has no such route), so its rules are UNSUPPORTED there, not failed.
OPTIONAL_ENDPOINTS = {"render", "systemone", "responses", "profile"}


def _chaining_state(ex: Exchange) -> tuple[str, str]:
    """Looking the id up and not finding it (400 previous_response_not_found, or a 404) is
    chaining served; another refusal says the field itself is not supported (llama-server:
    400 "does not support 'previous_response_id'"); a 200 ignored the field."""
    try:
        code = (ex.json().get("error") or {}).get("code")
    except (ValueError, AttributeError):
        code = None
    if ex.status == 404 or code == "previous_response_not_found":
        return "served", f"an unknown id is not found ({ex.status})"
    if 400 <= ex.status < 500:
        return "refused", f"refused with {ex.status}"
    if ex.status == 200:
        return "ignored", "an unknown previous_response_id answered 200"
    return "error", f"answers {ex.status}"


def _same_answer(a: Exchange, b: Exchange) -> bool:
    """Two answers alike but for the path each names (a router's "Cannot GET /x" echoes it)."""
    return a.status == b.status and a.body.replace(a.path.encode(), b"") == b.body.replace(b.path.encode(), b"")


def _retrieve_state(ex: Exchange, target: Any) -> tuple[str, str]:
    """GET of an unknown response id: a 404 is the right answer when the route exists, and the
    router's answer when it does not; an unknown route's answer tells the two apart."""
    if ex.status in (405, 501):
        return "absent", f"answers {ex.status}"
    if ex.status != 404:
        return _state("response_lookup", ex)
    try:
        other = target.send("GET", UNKNOWN_ROUTE, None, {})
    except TransportError:  # without the comparison the 404 is taken as the id's
        return "served", "an unknown id is not found (404)"
    if _same_answer(ex, other):
        return "absent", f"answers {ex.status} exactly as an unknown route ({UNKNOWN_ROUTE}) does: no such route"
    return "served", "an unknown id is not found (404)"


def _envelope_state(ex: Exchange) -> tuple[str, str]:
    """An invalid request: refused in OpenAI's envelope is what the probe looks for."""
    if ex.status == 200:
        return "ignored", "an invalid request answered 200"
    if not 400 <= ex.status < 500:
        return "error", f"answers {ex.status}"
    try:
        err = ex.json().get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str):
        return "served", f"refused with {ex.status} in the error envelope"
    return "refused", f"refused with {ex.status}, without the error envelope"


def _state(name: str, ex: Exchange) -> tuple[str, str]:
    if name == "responses_chaining":
        return _chaining_state(ex)
    if name == "error_envelope":
        return _envelope_state(ex)
    if ex.status in (404, 405, 501):
        return "absent", f"answers {ex.status}"
    if name in OPTIONAL_ENDPOINTS and ex.status >= 500:
        return "absent", f"answers {ex.status} to a valid request: not served here"
    if 400 <= ex.status < 500:
        return "refused", f"refused with {ex.status}"
    if ex.status != 200:
        return "error", f"answers {ex.status}"
    if name == "metrics":
        ok = "text/plain" in (ex.header("content-type") or "") or ex.body.startswith(b"#")
        return ("served", "Prometheus text") if ok else ("absent", "200 but no Prometheus text")
    if name in ("streaming", "stream_usage") and not ex.is_sse:
        return "ignored", "answered 200 without text/event-stream"
    if name == "streaming":
        done = bool(ex.events()) and ex.events()[-1].data == "[DONE]"
        return "served", "200, ending with [DONE]" if done else "200, without [DONE] at the end"
    if name == "stream_usage":
        events = [e for e in ex.events() if e.data != "[DONE]"]
        try:
            usage = any(isinstance(e.json(), dict) and e.json().get("usage") for e in events)
        except ValueError:
            usage = False
        return ("served", "a usage chunk") if usage else ("ignored", "200 without a usage chunk")
    if name in ("health", "profile"):  # their rules read a JSON object; a plain "OK" is not one
        try:
            ok = isinstance(ex.json(), dict)
        except ValueError:
            ok = False
        return ("served", "200 JSON") if ok else ("absent", "200 but no JSON object")
    try:
        doc = ex.json()
    except ValueError:
        return "error", "200 with a body that is not JSON"
    if name in ANSWER_PROBES:
        return _answer_state(name, doc)
    if name == "max_completion_tokens":
        used = (doc.get("usage") or {}).get("completion_tokens") if isinstance(doc, dict) else None
        if isinstance(used, int) and used > 8:
            return "ignored", f"200 with {used} completion tokens under max_completion_tokens 8"
    if name in ("logprobs", "top_logprobs_20"):
        choices = doc.get("choices") if isinstance(doc, dict) else None
        if not (choices and isinstance(choices[0], dict) and choices[0].get("logprobs")):
            return "ignored", "200 without logprobs"
    return "served", "200"


#: Probes judged by what the answer holds, not only by its status.
ANSWER_PROBES = {"reasoning", "tool_choice_none", "tool_choice_required", "tool_choice_forced"}


def _answer_state(name: str, doc: Any) -> tuple[str, str]:
    msg = chat_message(doc)
    if name == "reasoning":
        field = reasoning_field(msg)
        return ("served", f"reasoning in {field}") if field else ("ignored", "200 without reasoning")
    calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    names = [(c.get("function") or {}).get("name") for c in calls]
    if name == "tool_choice_none":
        return ("served", "no call") if not calls else ("ignored", f"200 with a call of {names[0]}")
    if name == "tool_choice_forced":
        return ("served", "get_weather called") if "get_weather" in names else (
            "ignored", f"200 with calls {names}" if calls else "200 without a call")
    return ("served", f"{names[0]} called") if calls else ("ignored", "200 without a call")


def _value(name: str, state: str, detail: str) -> Any:
    """What the compat profile reads from a probe besides its state."""
    if name == "reasoning" and state == "served":
        return detail.removeprefix("reasoning in ")
    if name == "streaming" and state == "served":
        return detail.endswith("ending with [DONE]")
    return None


def _send(spec: Any, target: Any, model: str, endpoint: str, fields: dict[str, Any]) -> Exchange | None:
    """A usability probe's request: the endpoint's minimal request with FIELDS over it. A
    transport failure leaves the probe unknown (no finding), as a probe nobody answered."""
    ep = spec.endpoints[endpoint]
    body = json.dumps(deep_merge(expand_model(ep.minimal_request, model), fields)).encode()
    try:
        return target.send(ep.method, ep.path, body, {})
    except Exception:  # noqa: BLE001 - a probe never stops the run
        return None


class Capabilities:
    def __init__(self, spec: Any, findings: dict[str, Finding]):
        self.spec = spec
        self.findings = findings
        self._evidence_given: set[str] = set()

    @classmethod
    def discover(cls, spec: Any, target: Any) -> Capabilities:
        model = model_of(target)
        found: dict[str, Finding] = {}
        for name, (endpoint, extra, _) in PROBES.items():
            ep = spec.endpoints[endpoint]
            body = None
            if ep.method == "POST":
                body = json.dumps(deep_merge(expand_model(ep.minimal_request, model), extra)).encode()
            path = ep.path.replace("{model}", model).replace("{response_id}", UNKNOWN_RESPONSE)
            try:
                ex = target.send(ep.method, path, body, {})
            except TransportError as e:
                found[name] = Finding(name, "error", 0, f"transport: {e}", e.exchange)
                continue
            except Exception as e:  # noqa: BLE001 - a probe never stops the run
                found[name] = Finding(name, "error", 0, f"{type(e).__name__}: {e}", None)
                continue
            state, detail = _retrieve_state(ex, target) if name == "response" else _state(name, ex)
            found[name] = Finding(name, state, ex.status, detail, ex, _value(name, state, detail))

        def record(name: str, state: str, ex: Exchange, detail: str, value: Any) -> None:
            found[name] = Finding(name, state, ex.status, detail, ex, value)
        follow_up(lambda endpoint, fields: _send(spec, target, model, endpoint, fields),
                  lambda name: name in found and found[name].state == "served", record)
        return cls(spec, found)

    def _unserved(self, vector: Vector, mode: str) -> Finding | None:
        # A vector sent elsewhere than its endpoint's path (an unknown route, say) is not about it.
        custom = (vector.path and vector.path != self.spec.endpoints[vector.endpoint].path
                  and vector.endpoint not in ("model", "response"))
        probe = None if custom else ENDPOINT_PROBES.get(vector.endpoint)
        f = self.findings.get(probe) if probe else None
        if f is not None and f.state == "absent":
            return f
        # Reading a response back needs the retrieve route as well as the create one: without
        # it the cause is one absent route (route.unknown-path judges its 404), not a FAIL of
        # every rule that reads back.
        retrieves = vector.endpoint == "response" or bool(RETRIEVE_CHECKS & set(vector.expect.get("checks", [])))
        if retrieves and not custom:
            for name in ("responses", "response"):
                if (f := self.findings.get(name)) is not None and f.state == "absent":
                    return f
        req = vector.request or {}
        chains = vector.endpoint == "responses" and (
            "previous_response_id" in req or bool(CHAIN_CHECKS & set(vector.expect.get("checks", []))))
        if chains and (f := self.findings.get("responses_chaining")) is not None and f.state == "refused":
            return f  # chaining refused by name: its rules, refusals included, are about a feature not offered
        if vector.refused:  # a refusal vector tests validation, which needs no feature
            return None
        wants = []
        if mode == "stream" or req.get("stream") is True:
            wants.append("streaming")
        if vector.endpoint == "chat" and (req.get("logprobs") is True or req.get("top_logprobs")):
            wants.append("logprobs")
        if vector.endpoint == "chat" and req.get("tools"):
            wants.append("tools")
        for w in wants:
            f = self.findings.get(w)
            if f is not None and f.state == "refused":
                return f
        return None

    def gate(self, vector: Vector, mode: str) -> Result | None:
        f = self._unserved(vector, mode)
        if f is None:
            return None
        first = vector.rule_id not in self._evidence_given
        self._evidence_given.add(vector.rule_id)
        what = PROBES[f.name][2]
        return Result("UNSUPPORTED", f.exchange if first else None,
                      reason=f"discovery: not served ({what}: {f.detail})")

    def to_dict(self, redact: str | None = None) -> dict[str, Any]:
        return {name: f.to_dict(redact) for name, f in self.findings.items()}

    def summary(self) -> str:
        return ", ".join(f"{n} {f.state}" + (f" ({f.status})" if f.state != "served" else "")
                         for n, f in self.findings.items())
