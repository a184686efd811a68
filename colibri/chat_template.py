"""Chat templates: jinja2 rendering that matches what Hugging Face `transformers` does.

The filter set matters: jinja2's own `tojson` sorts keys and HTML-escapes `<>&'`, which
would give the model a different prompt from the one it was trained on.
"""
from __future__ import annotations

import json
from functools import cache, lru_cache
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
    env.filters["tojson"] = _tojson
    return env


@lru_cache(maxsize=32)
def compile_template(source: str) -> Any:
    """Compile a template source once; templates are immutable for a server's lifetime."""
    return _environment().from_string(source)


def render(
    source: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    enable_thinking: bool = False,
    tool_choice: Any = None,
    preserve_thinking: bool = False,
    template_tokens: dict[str, str] | None = None,
) -> str:
    """Render `messages` (OpenAI shape, tool-call arguments already parsed to objects);
    template_tokens supplies bos_token / eos_token to templates that write them."""
    return str(
        compile_template(source).render(
            **(template_tokens or {}),
            messages=messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            enable_thinking=enable_thinking,
            tool_choice=tool_choice,
            preserve_thinking=preserve_thinking,
        )
    )
