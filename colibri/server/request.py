"""The typed request boundary: what every wire API's body is translated into before the
server does anything with it, so no raw JSON goes past a resource's translate step.

Each API module owns its translation (`openai_api.chat_request` / `completion_request`,
`anthropic_api.message_request`, `responses_api.response_request`); `Service.start` takes
the result, renders it, budgets it, picks its slot and starts the generation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChatInput:
    """A conversation in one shape whatever the API: OpenAI-like messages with parsed
    tool-call arguments; the family renderer (prompt.py) turns it into the prompt."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # function objects {name, description, parameters}
    tool_choice: Any = None  # None | "none" | "auto" | "required" | {"name": str}
    thinking: bool = False
    preserve_thinking: bool = False


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn and when the answer ends."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = None  # the request's ceiling; None: the server's --max-tokens
    stops: tuple[str, ...] = ()
    ignore_leading_stop: bool = False  # x_colibri_ignore_leading_stop


@dataclass(frozen=True)
class Output:
    """What the answer carries and how it is sent."""

    stream: bool = False
    include_usage: bool = False  # a stream ends with a usage chunk (stream_options.include_usage)
    logprobs: int = -1  # -1: none; k >= 0: each token's logprob and k alternatives
    echo: bool = False  # legacy completions: the prompt's own tokens and logprobs too
    strict_tools: bool = False  # a tool call the parser cannot read fails the request (strict_tool_calls)
    raw_text: bool = False  # legacy completions: the text as generated, no reasoning split or trimming


@dataclass(frozen=True)
class GenerationRequest:
    """One generation: its input (a conversation to render, or a prompt text as it is), how
    to sample and what to send back.

    `param` names the request field a prompt too long for the context is blamed on;
    `history` is what a parent response's slot holds (/v1/responses chaining), kept as its
    tokens when the rendered text begins with it."""

    chat: ChatInput | None = None
    text: str | None = None
    param: str = "messages"
    sampling: Sampling = field(default_factory=Sampling)
    output: Output = field(default_factory=Output)
    slot: int | None = None  # cache_slot: a pinned KV slot
    continuation: bool = True  # a trailing assistant turn may be continued (never in /v1/responses)
    history: tuple[int, ...] = ()


def sampling_of(body: dict[str, Any], max_tokens: int | None, stops: tuple[str, ...] = (),
                ignore_leading_stop: bool = False) -> Sampling:
    """The sampling fields every API names alike (temperature, top_p, seed), with the
    API's own ceiling and stops."""
    temperature, top_p = body.get("temperature"), body.get("top_p")
    return Sampling(temperature=1.0 if temperature is None else float(temperature),
                    top_p=1.0 if top_p is None else float(top_p), seed=body.get("seed"), max_tokens=max_tokens,
                    stops=stops, ignore_leading_stop=ignore_leading_stop)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """History arguments: a JSON string of an object; anything else renders as no arguments."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {}
