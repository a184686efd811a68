"""Checks of the prompt a chat request renders to (/v1/render, spec/40-templates.yaml): the
tool-choice instructions, message text kept literal, the generation cue."""
from __future__ import annotations

import re
from typing import Any

from .core import CheckContext, CheckFailure


def _render(ctx: CheckContext) -> dict[str, Any]:
    doc = ctx.exchange.json()
    missing = [k for k in ("prompt", "tokens", "control_tokens") if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise CheckFailure("render body", "a /v1/render answer (prompt, tokens, control_tokens)", f"lacks {missing}")
    return dict(doc)


def prompt_has_required_instruction(ctx: CheckContext) -> None:
    prompt = _render(ctx)["prompt"]
    if "You must call a tool." not in prompt:
        raise CheckFailure("prompt_has_required_instruction", "the required-call instruction line", prompt[-200:])


def prompt_forced_tool_applied(ctx: CheckContext) -> None:
    doc = _render(ctx)
    fam = ctx.spec.families[doc["family"]].row
    body = ctx.body or {}
    name = body["tool_choice"]["function"]["name"]
    declared = [t["function"]["name"] for t in body.get("tools", [])]
    strategy = fam["forced_tool_choice"]
    want = [name] if strategy in ("narrow", "narrow-and-name") else declared
    if doc["tools_offered"] != want:
        raise CheckFailure("prompt_forced_tool_applied", f"{strategy}: tools {want}", doc["tools_offered"])
    named = f"You must call the function {name}." in doc["prompt"]
    if named != (strategy == "narrow-and-name"):
        raise CheckFailure("prompt_forced_tool_applied", f"{strategy}: named in prose = {not named}", named)


_MARKER = re.compile(r"<\|[A-Za-z_]+\|>")  # the vectors' special-token text: <|user|>, <|im_end|>, ...


def _without_markers(value: Any) -> Any:
    if isinstance(value, str):
        return _MARKER.sub("", value)
    if isinstance(value, list):
        return [_without_markers(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_markers(v) for k, v in value.items()}
    return value


def prompt_specials_literal(ctx: CheckContext) -> None:
    doc = _render(ctx)
    body = ctx.body or {}
    for m in body.get("messages", []):
        if isinstance(m.get("content"), str) and m["content"].strip() and m["content"].strip() not in doc["prompt"]:
            raise CheckFailure("prompt_specials_literal", "the prompt shows each message's text as sent",
                               {"missing": m["content"], "prompt": doc["prompt"]})
    plain = ctx.resend(_without_markers(body))
    if plain.status != 200:
        raise CheckFailure("prompt_specials_literal", "the request without the marker text renders too", plain.status)
    plain_doc = plain.json()
    if not isinstance(plain_doc, dict) or not isinstance(plain_doc.get("control_tokens"), list):
        raise CheckFailure("prompt_specials_literal", "a /v1/render answer with control_tokens", plain_doc)
    want, got = len(plain_doc["control_tokens"]), len(doc["control_tokens"])
    if got != want:
        raise CheckFailure("prompt_specials_literal", f"{want} control tokens (the template's own)",
                           f"{got}: the request's text added {got - want}")


def prompt_ends_with_generation_cue(ctx: CheckContext) -> None:
    doc = _render(ctx)
    last = (ctx.body or {})["messages"][-1]["content"]
    if doc["continuation"] or doc["prompt"].rstrip().endswith(last):
        raise CheckFailure("prompt_ends_with_generation_cue", "a new assistant cue after the closed turn", doc["prompt"][-80:])


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (prompt_has_required_instruction, prompt_forced_tool_applied, prompt_specials_literal,
          prompt_ends_with_generation_cue)
