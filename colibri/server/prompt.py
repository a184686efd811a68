"""From a translated request to the prompt text: the family renderer.

Every API brings its conversation to one shape first, `ChatInput` (request.py; each API
module translates its own body). The family row of spec/families.yaml then decides how tools
and a forced choice are offered; the family's jinja template renders the text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..chat_template import render
from .request import ChatInput


@dataclass
class Rendered:
    text: str
    continuation: bool
    tools_offered: list[dict[str, Any]]
    thinking: bool  # generation starts inside the reasoning block
    tool_choice: Any


def render_chat(family: dict[str, Any], template: str, chat: ChatInput, *, continue_assistant: bool,
                template_tokens: dict[str, str] | None = None) -> Rendered:
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
                      enable_thinking=False, preserve_thinking=chat.preserve_thinking, template_tokens=template_tokens)
        text = head + msgs[-1]["content"]
        thinking = False
    else:
        thinking = chat.thinking and family.get("reasoning") != "none"
        text = render(template, msgs, tools=wrapped, tool_choice=template_choice, add_generation_prompt=True,
                      enable_thinking=thinking, preserve_thinking=chat.preserve_thinking, template_tokens=template_tokens)
    return Rendered(text, cont, tools, thinking, choice)


class LiteralSpecials:
    """Keeps special-token text that arrives in a request from becoming control tokens
    (rule prompt.specials.literal).

    A chat template turns messages into one string; tokenizing that string matches every
    `<|user|>` in it, including one a user typed or a document carried, so such text could
    forge a turn or a tool result. Before rendering, each special-token string inside the
    request's own strings, object keys included (a tool's property names, a call's argument
    keys reach the prompt as text too), is swapped for a placeholder the template passes
    through untouched; the rendered text is then split at the specials the template itself
    wrote (the only ones left), and the request's text, placeholders restored, is tokenized as
    plain text.

    A placeholder is `MARK digits MARK`, MARK a private-use character. The request may hold
    that character itself: each one it holds becomes the empty placeholder `MARK MARK`, so the
    request's text and the placeholders can never be confused, whatever characters it sends
    (searching for a character the request lacks would run out, and cost a scan per try).
    """

    MARK = "\ue000"
    _placeholder = re.compile(f"{MARK}(\\d*){MARK}")

    def __init__(self, specials: frozenset[str]):
        self._specials = _specials_pattern(specials)
        self._swapping = _swap_pattern(specials, self.MARK)
        self._originals: list[str] = []

    def shield(self, chat: ChatInput) -> ChatInput:
        if self._specials is None:
            return chat
        return replace(chat, messages=self._swap(chat.messages), tools=self._swap(chat.tools),
                       tool_choice=self._swap(chat.tool_choice))

    def _swap(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._swapping.sub(self._hold, value)
        if isinstance(value, list):
            return [self._swap(v) for v in value]
        if isinstance(value, dict):
            return {self._swap(k): self._swap(v) for k, v in value.items()}
        return value

    def _hold(self, m: re.Match[str]) -> str:
        if m.group(0) == self.MARK:
            return self.MARK + self.MARK
        self._originals.append(m.group(0))
        return f"{self.MARK}{len(self._originals) - 1}{self.MARK}"

    def _back(self, m: re.Match[str]) -> str:
        return self._originals[int(m.group(1))] if m.group(1) else self.MARK

    def restore(self, value: Any) -> Any:
        """The request's own text back in place of the placeholders (strings, lists, dict keys
        and values)."""
        if self._specials is None:
            return value
        if isinstance(value, str):
            return self._placeholder.sub(self._back, value) if self.MARK in value else value
        if isinstance(value, list):
            return [self.restore(v) for v in value]
        if isinstance(value, dict):
            return {self.restore(k): self.restore(v) for k, v in value.items()}
        return value

    def pieces(self, rendered: str) -> list[tuple[str, bool]]:
        """(text, is_control) pieces of the rendered prompt, the request's text restored."""
        if self._specials is None:
            return [(rendered, False)]
        out: list[tuple[str, bool]] = []
        at = 0
        for m in self._specials.finditer(rendered):
            out.append((self.restore(rendered[at:m.start()]), False))
            out.append((m.group(0), True))
            at = m.end()
        out.append((self.restore(rendered[at:]), False))
        return out


@lru_cache(maxsize=8)
def _specials_pattern(specials: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern per model (built once, not per request); longest first, so "<|im_end|>"
    wins over a shorter special it starts with."""
    ordered = sorted(specials, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


@lru_cache(maxsize=8)
def _swap_pattern(specials: frozenset[str], mark: str) -> re.Pattern[str]:
    """The specials and the placeholder mark itself: what the shield swaps in request text."""
    ordered = sorted(specials, key=len, reverse=True)
    return re.compile("|".join([*map(re.escape, ordered), re.escape(mark)]))
