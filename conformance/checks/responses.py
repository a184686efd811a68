"""Checks of the /v1/responses rules (spec/82-responses.yaml): the response object, the event
stream's grammar, and the store (retrieve, delete, chaining).

The store checks make their own follow-up requests (a GET, a DELETE, a child response) with
the vector's headers, so they judge any server the same way."""
from __future__ import annotations

import json
from typing import Any

from ..exchange import Exchange
from .core import CheckContext, CheckFailure, NotApplicable, stream_data

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


TEXT_DELTAS = {"response.output_text.delta": "response.output_text.done",
               "response.reasoning_text.delta": "response.reasoning_text.done",
               "response.refusal.delta": "response.refusal.done"}


def _doc(ctx: CheckContext, check: str) -> dict[str, Any]:
    """The response object: the JSON body, or the terminal event's `response` of a stream."""
    ex = ctx.exchange
    if not ex.is_sse:
        doc = ex.json()
    else:
        terminal = [d for d in stream_data(ctx, check) if isinstance(d, dict) and d.get("type") in TERMINAL]
        if not terminal:
            raise CheckFailure(check, "a terminal event carrying the response", "none")
        doc = terminal[-1].get("response")
    if not isinstance(doc, dict):
        raise CheckFailure(check, "a response object", str(doc)[:200])
    return doc


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def responses_usage(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_usage")
    u = doc.get("usage")
    if not isinstance(u, dict):
        raise CheckFailure("responses_usage", "a usage object", u)
    i, o, t = u.get("input_tokens"), u.get("output_tokens"), u.get("total_tokens")
    if not (isinstance(i, int) and isinstance(o, int) and all(_int(x) for x in (i, o, t)) and i + o == t):
        raise CheckFailure("responses_usage", "total_tokens = input_tokens + output_tokens, non-negative integers", u)
    chat = [k for k in ("prompt_tokens", "completion_tokens") if k in u]
    if chat:
        raise CheckFailure("responses_usage", "the Responses names only", f"Chat's {chat} in {u}")
    cached = (u.get("input_tokens_details") or {}).get("cached_tokens")
    reasoning = (u.get("output_tokens_details") or {}).get("reasoning_tokens")
    if not (_int(cached) and _int(reasoning)):
        raise CheckFailure("responses_usage", "input_tokens_details.cached_tokens and "
                           "output_tokens_details.reasoning_tokens, integers", u)
    # OpenAI's reference types created_at as a number (transformers serve 5.25 sends a float);
    # this project's stricter contract keeps whole seconds.
    created = doc.get("created_at")
    if not (_int(created) if ctx.strict else _number(created)):
        raise CheckFailure("responses_usage", "created_at an integer (Unix seconds)" if ctx.strict else
                           "created_at a non-negative number (Unix seconds)", created)


def responses_echo(ctx: CheckContext) -> None:
    doc, body = _doc(ctx, "responses_echo"), ctx.body or {}
    for key in ("instructions", "temperature", "top_p", "metadata", "tool_choice", "max_output_tokens"):
        if key not in body:
            continue
        want, got = body[key], doc.get(key, "(absent)")
        same = (abs(float(got) - float(want)) < 1e-6 if isinstance(want, (int, float)) and isinstance(got, (int, float))
                and not isinstance(want, bool) else got == want)
        if not same:
            raise CheckFailure("responses_echo", f"{key} {want!r} as sent", got)
    if "tools" in body:
        want_tools = [(t.get("type"), t.get("name")) for t in body["tools"]]
        got_tools = [(t.get("type"), t.get("name")) for t in doc.get("tools") or [] if isinstance(t, dict)]
        if got_tools != want_tools:
            raise CheckFailure("responses_echo", f"tools {want_tools} (flat: type and name)", doc.get("tools"))


def responses_cap_named(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_cap_named")
    cap, out = doc.get("max_output_tokens"), (doc.get("usage") or {}).get("output_tokens")
    if not (isinstance(cap, int) and _int(cap) and cap >= 1):
        raise CheckFailure("responses_cap_named", "max_output_tokens: the cap that applied (an integer)", cap)
    if not (isinstance(out, int) and _int(out) and out <= cap):
        raise CheckFailure("responses_cap_named", f"usage.output_tokens at most {cap}", out)
    if (doc.get("incomplete_details") or {}).get("reason") == "max_output_tokens" and out != cap:
        raise CheckFailure("responses_cap_named", f"a response cut by max_output_tokens {cap} used {cap} tokens", out)


def responses_error_null(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_error_null")
    if "error" not in doc or doc["error"] is not None:
        raise CheckFailure("responses_error_null", "error: null", doc.get("error", "(absent)"))


def responses_incomplete(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_incomplete")
    cap = (ctx.body or {}).get("max_output_tokens")
    out = (doc.get("usage") or {}).get("output_tokens")
    if not isinstance(cap, int) or not isinstance(out, int):
        raise CheckFailure("responses_incomplete", "usage.output_tokens and a max_output_tokens", (out, cap))
    if out > cap:
        raise CheckFailure("responses_incomplete", f"at most {cap} output tokens", out)
    status = doc.get("status")
    if status != "incomplete" and out < cap:
        raise NotApplicable(f"the model ended its answer after {out} of {cap} tokens")
    if status != "incomplete":
        raise CheckFailure("responses_incomplete", f"status incomplete ({out} of {cap} tokens used)", status)
    reason = (doc.get("incomplete_details") or {}).get("reason")
    if reason != "max_output_tokens":
        raise CheckFailure("responses_incomplete", "incomplete_details.reason max_output_tokens", doc.get("incomplete_details"))
    if ctx.exchange.is_sse:
        last = stream_data(ctx, "responses_incomplete")[-1]
        if last.get("type") != "response.incomplete":
            raise CheckFailure("responses_incomplete", "the stream ends with response.incomplete", last.get("type"))


# ------------------------------------------------------------------ the stream

def _events(ctx: CheckContext, check: str) -> list[dict[str, Any]]:
    events = stream_data(ctx, check)
    for i, d in enumerate(events):
        if not isinstance(d, dict) or not isinstance(d.get("type"), str):
            raise CheckFailure(check, "every event's data an object with a type", f"event {i}: {str(d)[:120]}")
    return events


def responses_stream_sequence(ctx: CheckContext) -> None:
    events = _events(ctx, "responses_stream_sequence")
    if not events:
        raise CheckFailure("responses_stream_sequence", "events", "none")
    numbers = [d.get("sequence_number") for d in events]
    if numbers != list(range(len(events))):
        bad = next(i for i, n in enumerate(numbers) if n != i)
        raise CheckFailure("responses_stream_sequence", f"sequence_number {bad} at event {bad} ({events[bad]['type']})",
                           numbers[max(0, bad - 2):bad + 3])
    if events[0]["type"] != "response.created":
        raise CheckFailure("responses_stream_sequence", "response.created first", events[0]["type"])
    terminal = [i for i, d in enumerate(events) if d["type"] in TERMINAL]
    if terminal != [len(events) - 1]:
        raise CheckFailure("responses_stream_sequence", "exactly one terminal event, the last",
                           [(i, events[i]["type"]) for i in terminal] or f"none; last {events[-1]['type']}")
    if not isinstance(events[-1].get("response"), dict):
        raise CheckFailure("responses_stream_sequence", "the terminal event carries the response", events[-1])


def responses_stream_lifecycle(ctx: CheckContext) -> None:
    events = _events(ctx, "responses_stream_lifecycle")
    status = (events[0].get("response") or {}).get("status") if events else None
    if status != "in_progress":
        raise CheckFailure("responses_stream_lifecycle", "response.created with status in_progress", status)
    if len(events) < 2 or events[1]["type"] != "response.in_progress":
        raise CheckFailure("responses_stream_lifecycle", "response.in_progress second",
                           events[1]["type"] if len(events) > 1 else None)
    for e in ctx.exchange.events():
        if e.data == "[DONE]":
            raise CheckFailure("responses_stream_lifecycle", "no [DONE] (a Chat Completions sentinel)", "[DONE]")
        kind = json.loads(e.data).get("type")
        if e.event != kind:
            raise CheckFailure("responses_stream_lifecycle", f"event: {kind}", e.event)


def responses_stream_brackets(ctx: CheckContext) -> None:
    check = "responses_stream_brackets"
    items: dict[int, dict[str, Any]] = {}  # output_index -> {"id", "open", "parts": {index: open}}

    def item(d: dict[str, Any], what: str) -> dict[str, Any]:
        it = items.get(d.get("output_index"))  # type: ignore[arg-type]
        if it is None or not it["open"]:
            raise CheckFailure(check, f"{what} inside an open item", f"{d['type']} at output_index {d.get('output_index')}")
        if "item_id" in d and d["item_id"] != it["id"]:
            raise CheckFailure(check, f"{what} naming its item {it['id']}", d["item_id"])
        return it

    for d in _events(ctx, check):
        kind = d["type"]
        if kind == "response.output_item.added":
            index, item_id = d.get("output_index"), (d.get("item") or {}).get("id")
            if index != len(items):
                raise CheckFailure(check, f"output_index {len(items)} for the next item", index)
            items[index] = {"id": item_id, "open": True, "parts": {}}
        elif kind == "response.output_item.done":
            it = item(d, "output_item.done")
            if (d.get("item") or {}).get("id") != it["id"]:
                raise CheckFailure(check, f"output_item.done of {it['id']}", (d.get("item") or {}).get("id"))
            open_parts = [i for i, o in it["parts"].items() if o]
            if open_parts:
                raise CheckFailure(check, "content parts closed before their item", f"part(s) {open_parts} open")
            it["open"] = False
        elif kind == "response.content_part.added":
            it = item(d, "content_part.added")
            if it["parts"].get(d.get("content_index")) is not None:
                raise CheckFailure(check, "each content part opened once", d.get("content_index"))
            it["parts"][d.get("content_index")] = True
        elif kind == "response.content_part.done":
            it = item(d, "content_part.done")
            if it["parts"].get(d.get("content_index")) is not True:
                raise CheckFailure(check, "content_part.done of an open part", d.get("content_index"))
            it["parts"][d.get("content_index")] = False
        elif kind in TEXT_DELTAS or kind in TEXT_DELTAS.values():
            it = item(d, kind.rsplit(".", 1)[-1])
            if it["parts"].get(d.get("content_index")) is not True:
                raise CheckFailure(check, f"{kind} inside an open content part",
                                   f"content_index {d.get('content_index')} of {it['id']}")
        elif kind.startswith("response.function_call_arguments."):
            item(d, kind)
    still = [i for i, it in items.items() if it["open"]]
    if still:
        raise CheckFailure(check, "every item closed by output_item.done", f"output_index {still} left open")


def _text_of_item(item: dict[str, Any], content_index: int) -> Any:
    parts = item.get("content") or []
    return parts[content_index].get("text") if content_index < len(parts) and isinstance(parts[content_index], dict) else None


def _projection(item: Any) -> Any:
    """What an output item says, for comparing the terminal output with the streamed items."""
    if not isinstance(item, dict):
        return item
    keys = ("type", "id", "call_id", "name", "arguments", "role")
    texts = [p.get("text") for p in item.get("content") or [] if isinstance(p, dict)]
    return {k: item.get(k) for k in keys if k in item} | {"texts": texts}


def responses_stream_assembly(ctx: CheckContext) -> None:
    check = "responses_stream_assembly"
    events = _events(ctx, check)
    deltas: dict[tuple[Any, Any], str] = {}
    done_text: dict[tuple[Any, Any], Any] = {}
    part_text: dict[tuple[Any, Any], Any] = {}
    args: dict[Any, str] = {}
    args_done: dict[Any, Any] = {}
    done_items: dict[Any, dict[str, Any]] = {}
    for d in events:
        kind, key = d["type"], (d.get("output_index"), d.get("content_index"))
        if kind in TEXT_DELTAS:
            deltas[key] = deltas.get(key, "") + str(d.get("delta", ""))
        elif kind in TEXT_DELTAS.values():
            done_text[key] = d.get("text", d.get("refusal"))
        elif kind == "response.content_part.done":
            part = d.get("part") or {}
            part_text[key] = part.get("text", part.get("refusal"))
        elif kind == "response.function_call_arguments.delta":
            args[d.get("output_index")] = args.get(d.get("output_index"), "") + str(d.get("delta", ""))
        elif kind == "response.function_call_arguments.done":
            args_done[d.get("output_index")] = d.get("arguments")
        elif kind == "response.output_item.done":
            done_items[d.get("output_index")] = d.get("item") or {}
    for key, text in deltas.items():
        if done_text.get(key) != text:
            raise CheckFailure(check, f"the .done text of output {key[0]} part {key[1]} equal to its deltas",
                               (text[:80], str(done_text.get(key, "(no done event)"))[:80]))
        if part_text.get(key) != text:
            raise CheckFailure(check, f"content_part.done of output {key[0]} part {key[1]} equal to its deltas",
                               (text[:80], str(part_text.get(key, "(no part done)"))[:80]))
        item = done_items.get(key[0])
        if item is not None and item.get("type") == "message" and _text_of_item(item, key[1] or 0) != text:
            raise CheckFailure(check, f"output_item.done of output {key[0]} holding the streamed text",
                               (text[:80], str(_text_of_item(item, key[1] or 0))[:80]))
    for index, item in done_items.items():
        if item.get("type") != "function_call":
            continue
        if index not in args_done:
            raise CheckFailure(check, f"response.function_call_arguments.done for the call at output {index}", "none")
        if index in args and args[index] != args_done[index]:
            raise CheckFailure(check, "argument deltas adding up to function_call_arguments.done",
                               (args[index][:80], str(args_done[index])[:80]))
        if item.get("arguments") != args_done[index]:
            raise CheckFailure(check, "the item's arguments equal to function_call_arguments.done",
                               (str(item.get("arguments"))[:80], str(args_done[index])[:80]))
    final = events[-1].get("response") if events and events[-1]["type"] in TERMINAL else None
    if not isinstance(final, dict):
        raise CheckFailure(check, "a terminal event with the response", events[-1]["type"] if events else None)
    want = [_projection(done_items[i]) for i in sorted(done_items, key=lambda i: (not isinstance(i, int), i))]
    got = [_projection(i) for i in final.get("output") or []]
    if want != got:
        raise CheckFailure(check, "the terminal response.output equal to the output_item.done items, in order",
                           {"done items": want, "final output": got})
    if not isinstance(final.get("usage"), dict):
        raise CheckFailure(check, "usage in the terminal response", final.get("usage"))


# ------------------------------------------------------------------ items

def responses_function_calls(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_function_calls")
    names = {t.get("name") for t in (ctx.body or {}).get("tools") or []}
    for item in doc.get("output") or []:
        if item.get("type") != "function_call":
            continue
        if not (isinstance(item.get("call_id"), str) and item["call_id"]):
            raise CheckFailure("responses_function_calls", "a non-empty call_id", item.get("call_id"))
        if item.get("name") not in names:
            raise CheckFailure("responses_function_calls", f"a declared tool name {sorted(names)}", item.get("name"))
        raw = item.get("arguments")
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise CheckFailure("responses_function_calls", "arguments a JSON string of an object", raw)


def responses_reasoning_tokens(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_reasoning_tokens")
    u = doc.get("usage") or {}
    n = (u.get("output_tokens_details") or {}).get("reasoning_tokens")
    if not (isinstance(n, int) and 0 < n <= (u.get("output_tokens") or 0)):
        raise CheckFailure("responses_reasoning_tokens", "0 < reasoning_tokens <= output_tokens", u)


# ------------------------------------------------------------------ the store

def _get(ctx: CheckContext, method: str, rid: str) -> Exchange:
    return ctx.target.send(method, f"/v1/responses/{rid}", None, ctx.vector.headers)  # type: ignore[no-any-return]


def _created_id(ctx: CheckContext, check: str) -> str:
    rid = _doc(ctx, check).get("id")
    if not isinstance(rid, str) or not rid:
        raise CheckFailure(check, "a response id", rid)
    return rid


def _json(ex: Exchange) -> Any:
    try:
        return ex.json()
    except ValueError:
        return None


def responses_retrieve(ctx: CheckContext) -> None:
    doc = _doc(ctx, "responses_retrieve")
    got = _get(ctx, "GET", _created_id(ctx, "responses_retrieve"))
    if got.status != 200:
        raise CheckFailure("responses_retrieve", "200 with the stored response", f"{got.status} {got.text(200)}")
    back = _json(got) or {}
    for key in ("id", "status", "output", "usage"):
        if back.get(key) != doc.get(key):
            raise CheckFailure("responses_retrieve", f"{key} as created: {str(doc.get(key))[:120]}", str(back.get(key))[:120])


def responses_not_stored(ctx: CheckContext) -> None:
    got = _get(ctx, "GET", _created_id(ctx, "responses_not_stored"))
    if got.status != 404:
        raise CheckFailure("responses_not_stored", "404 for a response created with store false", got.status)


def responses_delete(ctx: CheckContext) -> None:
    rid = _created_id(ctx, "responses_delete")
    gone = _get(ctx, "DELETE", rid)
    want = {"id": rid, "object": "response.deleted", "deleted": True}
    if gone.status != 200 or _json(gone) != want:
        raise CheckFailure("responses_delete", f"200 {want}", f"{gone.status} {gone.text(200)}")
    after = _get(ctx, "GET", rid)
    if after.status != 404:
        raise CheckFailure("responses_delete", "404 on GET after DELETE", after.status)


def _child(ctx: CheckContext, check: str) -> tuple[dict[str, Any], dict[str, Any]]:
    parent = _doc(ctx, check)
    rid = _created_id(ctx, check)
    body = {"model": (ctx.body or {}).get("model"), "previous_response_id": rid, "input": "What did I just tell you?",
            "max_output_tokens": (ctx.body or {}).get("max_output_tokens") or 16, "temperature": 0}
    ex = ctx.resend(body)
    if ex.status != 200:
        raise CheckFailure(check, "200 for a child naming the stored response", f"{ex.status} {ex.text(300)}")
    child = _json(ex)
    if not isinstance(child, dict):
        raise CheckFailure(check, "a JSON response object for the child", ex.body[:200])
    return parent, child


def responses_chain(ctx: CheckContext) -> None:
    parent, child = _child(ctx, "responses_chain")
    if child.get("previous_response_id") != parent.get("id"):
        raise CheckFailure("responses_chain", f"previous_response_id {parent.get('id')} echoed",
                           child.get("previous_response_id"))
    p_in = (parent.get("usage") or {}).get("input_tokens")
    c_in = (child.get("usage") or {}).get("input_tokens")
    if not (isinstance(p_in, int) and isinstance(c_in, int) and c_in > p_in):
        raise CheckFailure("responses_chain", f"the child's input_tokens above the parent's {p_in} (its context included)",
                           c_in)


def responses_chain_not_inherited(ctx: CheckContext) -> None:
    _, child = _child(ctx, "responses_chain_not_inherited")
    if child.get("instructions") is not None or child.get("tools") not in ([], None):
        raise CheckFailure("responses_chain_not_inherited", "instructions null and tools [] in the child",
                           {"instructions": child.get("instructions"), "tools": child.get("tools")})


def responses_chain_cached(ctx: CheckContext) -> None:
    parent, child = _child(ctx, "responses_chain_cached")
    used = parent.get("usage") or {}
    want = (used.get("input_tokens") or 0) + (used.get("output_tokens") or 0) - 1
    cached = ((child.get("usage") or {}).get("input_tokens_details") or {}).get("cached_tokens")
    if not (isinstance(cached, int) and cached >= max(want, 1)):
        raise CheckFailure("responses_chain_cached", f"cached_tokens >= {want} in the child (the parent's prompt and answer)",
                           child.get("usage"))


def responses_previous_not_found(ctx: CheckContext) -> None:
    err = (_json(ctx.exchange) or {}).get("error") or {}
    got = (err.get("code"), err.get("param"))
    if got != ("previous_response_not_found", "previous_response_id"):
        raise CheckFailure("responses_previous_not_found", "code previous_response_not_found, param previous_response_id",
                           got)


def responses_store_evicts(ctx: CheckContext) -> None:
    first = _created_id(ctx, "responses_store_evicts")
    newest = ""
    for _ in range(2):
        ex = ctx.resend(dict(ctx.body or {}, stream=False))
        newest = str((_json(ex) or {}).get("id"))
    if _get(ctx, "GET", first).status != 404:
        raise CheckFailure("responses_store_evicts", "404 for the oldest of three on a store of two", "still there")
    if _get(ctx, "GET", newest).status != 200:
        raise CheckFailure("responses_store_evicts", "200 for the newest", "gone")


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (responses_usage, responses_echo, responses_cap_named, responses_error_null, responses_incomplete,
          responses_stream_sequence, responses_stream_lifecycle, responses_stream_brackets,
          responses_stream_assembly, responses_function_calls, responses_reasoning_tokens, responses_retrieve,
          responses_not_stored, responses_delete, responses_chain, responses_chain_not_inherited,
          responses_chain_cached, responses_previous_not_found, responses_store_evicts)
