"""From a validated request to the prompt text: the family renderer.

Both APIs are first brought to one shape, `ChatInput` (OpenAI-like messages with parsed
tool-call arguments). The family row of spec/families.yaml then decides how tools and a
forced choice are offered; the family's jinja template renders the text.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..chat_template import render
from ..spec.paths import text_of


@dataclass
class ChatInput:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # function objects {name, description, parameters}
    tool_choice: Any = None  # None | "none" | "auto" | "required" | {"name": str}
    thinking: bool = False
    preserve_thinking: bool = False


@dataclass
class Rendered:
    text: str
    continuation: bool
    tools_offered: list[dict[str, Any]]
    thinking: bool  # generation starts inside the reasoning block
    tool_choice: Any


def thinking_requested(body: dict[str, Any]) -> bool:
    """enable_thinking, then zai-style thinking.type, then reasoning_effort (spec: reasoning)."""
    if isinstance(body.get("enable_thinking"), bool):
        return bool(body["enable_thinking"])
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled"):
        return bool(thinking["type"] == "enabled")
    effort = body.get("reasoning_effort")
    return effort is not None and effort != "none"


def _arguments(raw: Any) -> dict[str, Any]:
    """History arguments: a JSON string of an object; anything else renders as no arguments."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {}


def from_openai_chat(body: dict[str, Any]) -> ChatInput:
    msgs = []
    for m in body["messages"]:
        out: dict[str, Any] = {"role": "system" if m["role"] == "developer" else m["role"],
                               "content": text_of(m.get("content")) or ""}
        if m.get("tool_calls"):
            out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": _arguments(c["function"].get("arguments"))}}
                                 for c in m["tool_calls"]]
        if isinstance(m.get("reasoning_content"), str):
            out["reasoning_content"] = m["reasoning_content"]
        if m.get("tool_call_id") is not None:
            out["tool_call_id"] = m["tool_call_id"]
        msgs.append(out)
    tools = [t["function"] for t in body.get("tools") or []]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"name": choice["function"]["name"]}
    return ChatInput(msgs, tools, choice, thinking_requested(body), bool(body.get("preserve_thinking")))


def render_chat(family: dict[str, Any], template: str, chat: ChatInput, *, continue_assistant: bool) -> Rendered:
    """Apply the family's tool strategy, then render; a trailing assistant turn is continued
    when the switch is on and the family can (the validators refused the other cases)."""
    tools = list(chat.tools)
    choice = chat.tool_choice
    template_choice: Any = None
    if choice == "none":
        tools = []
    elif choice == "required":
        template_choice = "required"
    elif isinstance(choice, dict):
        strategy = family.get("forced_tool_choice")
        named = [t for t in tools if t["name"] == choice["name"]]
        if strategy in ("narrow-and-name", "narrow"):
            tools = named
        if strategy == "narrow-and-name":
            template_choice = {"type": "function", "function": {"name": choice["name"]}}
    msgs = chat.messages
    cont = bool(msgs and msgs[-1]["role"] == "assistant" and continue_assistant and family.get("continuation"))
    wrapped = [{"type": "function", "function": t} for t in tools] or None
    if cont:
        head = render(template, msgs[:-1], tools=wrapped, tool_choice=template_choice, add_generation_prompt=True,
                      enable_thinking=False, preserve_thinking=chat.preserve_thinking)
        text = head + msgs[-1]["content"]
        thinking = False
    else:
        thinking = chat.thinking and family.get("reasoning") != "none"
        text = render(template, msgs, tools=wrapped, tool_choice=template_choice, add_generation_prompt=True,
                      enable_thinking=thinking, preserve_thinking=chat.preserve_thinking)
    return Rendered(text, cont, tools, thinking, choice)
