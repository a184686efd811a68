"""Chat templates: jinja2 rendering that matches what Hugging Face `transformers` does.

The environment matters: jinja2's own `tojson` sorts keys and HTML-escapes `<>&'`, and its
default whitespace rules keep newlines that transformers drops; either would give the model a
different prompt from the one it was trained on (differential rule diff.template.agrees found
the second: vLLM and transformers render the same template with trim_blocks).
"""
from __future__ import annotations

import datetime
import json
from functools import cache, lru_cache
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateRefusal(ValueError):
    """A chat template refused its input through its own `raise_exception(message)` (roles out
    of order, a system turn where the model takes none): the request's fault, not the server's."""


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateRefusal(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    # transformers' settings: the first newline after a block tag is dropped and whitespace before
    # one at the start of a line too; templates written for those rules (every model's own) render
    # as their authors saw them only here. The loop-control extension and the two globals are the
    # ones it adds.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
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
