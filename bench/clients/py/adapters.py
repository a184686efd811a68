"""One adapter per Python client: `user`/`assistant`/`tool_result` build that client's own
history entries, `turn(history, ...)` makes one request the client's way and returns
{text, reasoning, calls: [{id, name, args}], usage: {input, output} | None, history} (history:
the entries the answer adds); `chain()` (Responses clients) runs the chained conversation,
`tool_loop()` (agent frameworks) the tool scenario the framework's own way. Settings come from
colibri-conform's compat profile (bench/clients/settings.py)."""
from __future__ import annotations

import json
from typing import Any

KEY = "local"


SURFACES = ("chat", "messages", "responses")


class Unsupported(Exception):
    """The scenario needs what the server lacks or the client cannot do (a declared limit)."""


def thinking_off(settings: dict[str, Any], surface: str = "chat") -> dict[str, Any]:
    """The body fields a server needs to answer plainly on SURFACE (openai_sdk.thinking_off, e.g.
    vLLM's `chat_template_kwargs.enable_thinking: false`, without which its reasoning parser files
    a plain answer as reasoning; thinking_off_surfaces says where): every adapter sends them,
    through the client's own extra-body option, on every turn that does not turn reasoning on."""
    sdk = settings["openai_sdk"]
    return dict(sdk.get("thinking_off") or {}) if surface in sdk.get("thinking_off_surfaces", SURFACES) else {}


def _usage(i: Any, o: Any) -> dict[str, int] | None:
    return {"input": i, "output": o} if i is not None and o is not None else None


class OpenAIChat:
    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        import openai

        self.client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
        self.model, self.sdk, self.off, t = model, settings["openai_sdk"], thinking_off(settings), S["tool"]
        self.tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                         "parameters": t["parameters"]}}]
        self.can = {"stop": True, "reasoning": settings["pi_compat"]["supportsReasoningEffort"]}

    def user(self, text: str) -> Any:
        return {"role": "user", "content": text}

    def assistant(self, text: str) -> Any:
        return {"role": "assistant", "content": text}

    def tool_result(self, c: dict[str, Any], text: str) -> Any:
        return {"role": "tool", "tool_call_id": c["id"], "content": text}

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.model, "messages": h, "temperature": 0,
                              self.sdk["max_tokens_parameter"]: max_tokens}
        if tools:
            kw["tools"] = self.tools
        if stop:
            kw["stop"] = stop
        if reasoning:
            kw["reasoning_effort"] = "high"
        elif self.off:
            kw["extra_body"] = self.off
        if not stream:
            r = self.client.chat.completions.create(**kw)
            m = r.choices[0].message
            extra = m.model_extra or {}
            calls = [{"id": c.id, "name": c.function.name, "args": c.function.arguments} for c in m.tool_calls or []]
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [c.model_dump() for c in m.tool_calls]
            return {"text": m.content or "", "reasoning": extra.get("reasoning_content") or extra.get("reasoning") or "",
                    "calls": calls, "history": [entry],
                    "usage": r.usage and _usage(r.usage.prompt_tokens, r.usage.completion_tokens)}
        if self.sdk.get("stream_options"):
            kw["stream_options"] = self.sdk["stream_options"]
        text, reasoning_text, usage, calls = "", "", None, {}
        for ch in self.client.chat.completions.create(stream=True, **kw):
            if ch.usage:
                usage = _usage(ch.usage.prompt_tokens, ch.usage.completion_tokens)
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            extra = d.model_extra or {}
            text += d.content or ""
            reasoning_text += extra.get("reasoning_content") or extra.get("reasoning") or ""
            for tc in d.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                c["id"] = c["id"] or tc.id or ""
                c["name"] += (tc.function and tc.function.name) or ""
                c["args"] += (tc.function and tc.function.arguments) or ""
        out = [calls[i] for i in sorted(calls)]
        entry = {"role": "assistant", "content": text}
        if out:
            entry["tool_calls"] = [{"id": c["id"], "type": "function",
                                    "function": {"name": c["name"], "arguments": c["args"]}} for c in out]
        return {"text": text, "reasoning": reasoning_text, "calls": out, "usage": usage, "history": [entry]}


class OpenAIResponses:
    """The official SDK's Responses client; chain() is the store/previous_response_id turn."""

    surface = "responses"
    untyped_history = True  # user/assistant give {"role", "content"} items, the SDK's EasyInputMessageParam

    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        import openai

        self.openai = openai
        self.client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
        self.model, t, self.S, self.off = model, S["tool"], S, thinking_off(settings, "responses")
        self.tools = [{"type": "function", "name": t["name"], "description": t["description"],
                       "parameters": t["parameters"]}]
        self.can = {"stop": False, "reasoning": True}
        # What the client cannot do, with its source (see js/adapters.mjs's pi-ai limits).
        self.limits = {"cut_stream": (
            f"openai {openai.__version__}'s stream helper (lib/streaming/responses/_responses.py, "
            "get_final_response) keeps a final response only from response.completed; a stream cut by "
            "max_output_tokens ends with response.incomplete (the official contract), and the helper raises")}

    def user(self, text: str) -> Any:
        return {"role": "user", "content": text}

    def assistant(self, text: str) -> Any:
        return {"role": "assistant", "content": text}

    def tool_result(self, c: dict[str, Any], text: str) -> Any:
        return {"type": "function_call_output", "call_id": c["id"], "output": text}

    def _create(self, stream: bool, **kw: Any) -> Any:
        if not stream:
            return self.client.responses.create(**kw)
        with self.client.responses.stream(**kw) as s:
            last = None
            for event in s:
                last = event.type
            try:
                return s.get_final_response()
            except RuntimeError as e:  # only for a cut stream: the client's declared limit
                if last != "response.incomplete":
                    raise
                raise Unsupported(f"the turn was cut by the cap: {self.limits['cut_stream']}") from e

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None, **extra: Any) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.model, "input": h, "temperature": 0, "max_output_tokens": max_tokens,
                              "store": False, **extra}
        if tools:
            kw["tools"] = self.tools
        if reasoning is not None:
            kw["reasoning"] = {"effort": "high" if reasoning else "none"}
            if reasoning:  # as pi does: a stateless client keeps the reasoning to send it back
                kw["include"] = ["reasoning.encrypted_content"]
        if not reasoning and self.off:
            kw["extra_body"] = self.off
        r = self._create(stream, **kw)
        items = [i.model_dump(exclude_none=True) for i in r.output]
        reasoning_text = "".join(p.get("text", "") for i in items if i["type"] == "reasoning"
                                 for p in i.get("content") or [])
        calls = [{"id": i["call_id"], "name": i["name"], "args": i["arguments"]}
                 for i in items if i["type"] == "function_call"]
        return {"text": r.output_text, "reasoning": reasoning_text, "calls": calls, "history": items, "id": r.id,
                "usage": r.usage and _usage(r.usage.input_tokens, r.usage.output_tokens)}

    def chain(self) -> str:
        c = self.S["chain"]
        first = self.turn([self.user(c["first"])], c["max_tokens"], store=True)
        second = self.turn([self.user(c["second"])], c["max_tokens"], store=True, previous_response_id=first["id"])
        if c["expect"] not in second["text"].lower():
            raise AssertionError(f"chained text {second['text']!r}")
        try:
            self.turn([self.user(c["second"])], c["max_tokens"], previous_response_id="resp_colibri_bench_unknown")
            raise AssertionError("an unknown previous_response_id was answered 200")
        except (self.openai.BadRequestError, self.openai.NotFoundError) as e:
            code = (e.body or {}).get("code") if isinstance(e.body, dict) else None
            return f"chained: {second['text']!r}; unknown parent: {e.status_code} {code}"


class Anthropic:
    surface = "messages"
    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        import anthropic

        self.client = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
        self.model, t, self.off = model, S["tool"], thinking_off(settings, "messages")
        self.tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}]
        self.can = {"stop": True, "reasoning": True}

    def user(self, text: str) -> Any:
        return {"role": "user", "content": text}

    def assistant(self, text: str) -> Any:
        return {"role": "assistant", "content": text}

    def tool_result(self, c: dict[str, Any], text: str) -> Any:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"], "content": text}]}

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None) -> dict[str, Any]:
        # The current SDK has no temperature argument (the newest models take none): sent as a body field.
        kw: dict[str, Any] = {"model": self.model, "messages": h, "max_tokens": max_tokens,
                              "extra_body": {"temperature": 0, **self.off}}
        if tools:
            kw["tools"] = self.tools
        if stop:
            kw["stop_sequences"] = stop
        if reasoning:  # the official minimum budget; no temperature with thinking
            kw.update(thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=1024 + max_tokens, extra_body={})
        if stream:
            with self.client.messages.stream(**kw) as s:
                m = s.get_final_message()
        else:
            m = self.client.messages.create(**kw)
        blocks = [b.model_dump(exclude_none=True) for b in m.content]
        return {"text": "".join(b.get("text", "") for b in blocks if b["type"] == "text"),
                "reasoning": "".join(b.get("thinking", "") for b in blocks if b["type"] == "thinking"),
                "calls": [{"id": b["id"], "name": b["name"], "args": b["input"]} for b in blocks if b["type"] == "tool_use"],
                "usage": _usage(m.usage.input_tokens, m.usage.output_tokens),
                "history": [{"role": "assistant", "content": blocks}]}


class LangChain:
    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        from langchain_openai import ChatOpenAI

        self.make = lambda **kw: ChatOpenAI(base_url=base + "/v1", api_key=KEY, model=model, temperature=0,
                                            max_retries=0, stream_usage=bool(settings["openai_sdk"]["stream_options"]),
                                            **kw)
        # ChatOpenAI's max_tokens goes out as max_completion_tokens; where the settings say the
        # server honours only max_tokens (llama-cpp-python), it is sent as a body field instead.
        self.field, self.off = settings["openai_sdk"]["max_tokens_parameter"], thinking_off(settings)
        t = S["tool"]
        self.tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                         "parameters": t["parameters"]}}]
        # langchain-openai reads no reasoning_content from Chat Completions: nothing to check.
        self.can = {"stop": True, "reasoning": False}

    def user(self, text: str) -> Any:
        from langchain_core.messages import HumanMessage
        return HumanMessage(text)

    def assistant(self, text: str) -> Any:
        from langchain_core.messages import AIMessage
        return AIMessage(text)

    def tool_result(self, c: dict[str, Any], text: str) -> Any:
        from langchain_core.messages import ToolMessage
        return ToolMessage(text, tool_call_id=c["id"])

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None) -> dict[str, Any]:
        body = {} if reasoning else dict(self.off)
        kw: dict[str, Any] = {"max_tokens": max_tokens}
        if self.field != "max_completion_tokens":
            kw, body["max_tokens"] = {}, max_tokens
        llm: Any = self.make(**kw, extra_body=body or None)
        if tools:
            llm = llm.bind_tools(self.tools)
        if stream:
            m = None
            for ch in llm.stream(h, stop=stop):
                m = ch if m is None else m + ch
        else:
            m = llm.invoke(h, stop=stop)
        text = m.content if isinstance(m.content, str) else "".join(
            p.get("text", "") for p in m.content if isinstance(p, dict))
        u = m.usage_metadata
        return {"text": text, "reasoning": "", "history": [m],
                "calls": [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in m.tool_calls],
                "usage": u and _usage(u["input_tokens"], u["output_tokens"])}


class PydanticAI:
    """An agent framework: it runs the tool loop itself (tool_loop), over Chat Completions."""

    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        self.model = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base + "/v1", api_key=KEY))
        self.S = S
        self.field = settings["openai_sdk"]["max_tokens_parameter"]  # see LangChain's
        self.off = thinking_off(settings)
        self.can = {"stop": True, "reasoning": False}

    def user(self, text: str) -> Any:
        from pydantic_ai.messages import ModelRequest, UserPromptPart
        return ModelRequest(parts=[UserPromptPart(text)])

    def assistant(self, text: str) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart
        return ModelResponse(parts=[TextPart(text)])

    def _agent(self, max_tokens: int, stop: list[str] | None = None, reasoning: bool | None = None) -> Any:
        from pydantic_ai import Agent
        settings: dict[str, Any] = {"temperature": 0}
        body = {} if reasoning else dict(self.off)
        if self.field == "max_completion_tokens":
            settings["max_tokens"] = max_tokens  # sent as max_completion_tokens
        else:
            body["max_tokens"] = max_tokens
        if body:
            settings["extra_body"] = body
        if stop:
            settings["stop_sequences"] = stop
        return Agent(self.model, model_settings=settings)

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None) -> dict[str, Any]:
        agent = self._agent(max_tokens, stop, reasoning)
        prompt = h[-1].parts[0].content
        if stream:
            import asyncio

            async def go() -> tuple[str, Any]:
                async with agent.run_stream(prompt, message_history=h[:-1] or None) as r:
                    last = ""
                    async for partial in r.stream_output(debounce_by=None):
                        last = partial  # each is the output so far: the last is the whole answer
                    return last, r.usage()
            text, u = asyncio.run(go())
        else:
            r = agent.run_sync(prompt, message_history=h[:-1] or None)
            text, u = r.output, r.usage()
        return {"text": text, "reasoning": "", "calls": [], "history": [],
                "usage": _usage(u.input_tokens, u.output_tokens)}

    def tool_loop(self, stream: bool) -> str:
        t = self.S["tool"]
        agent = self._agent(t["max_tokens"])
        seen: list[str] = []

        @agent.tool_plain(name=t["name"])
        def get_weather(city: str) -> str:
            """Current weather for a city."""
            seen.append(city)
            return t["result"]

        if stream:
            import asyncio

            async def go() -> str:
                async with agent.run_stream(t["prompt"]) as r:
                    return await r.get_output()
            out = asyncio.run(go())
        else:
            out = agent.run_sync(t["prompt"]).output
        if not seen:
            raise AssertionError(f"the tool was not called; output {out!r}")
        if not str(out).strip():
            raise AssertionError("empty final answer")
        return f"{t['name']}({json.dumps(seen[0])}) -> {str(out)[:60]!r}"


ADAPTERS = {"openai (Python)": OpenAIChat, "openai Responses (Python)": OpenAIResponses,
            "anthropic (Python)": Anthropic, "langchain-openai": LangChain, "pydantic-ai": PydanticAI}
