"""What every endpoint shares: settings, the spec and its compiled validators, the model and
family, the scheduler. `create_app` builds one Service and hands it to the resources."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import Any

from ..chat_template import TemplateRefusal
from ..model import Model
from ..settings import PROMPT_LAYOUTS, Settings
from ..spec import RequestValidator, Spec, load_spec
from ..tool_decoding import SLOTS, TokenIndex, ToolDecoder
from .errors import error
from .generation import CLIENT_POLL, Generation, scores
from .generation import Spec as GenSpec
from .labels import Labels
from .metrics import Metrics
from .profile import Turn
from .prompt import LiteralSpecials, Rendered, render_chat
from .request import ChatInput, GenerationRequest
from .response_store import ResponseStore
from .scheduler import Scheduler
from .slots import conversation_digest, slot_of
from .task import Scored, Task


class Service:
    def __init__(self, settings: Settings, *, model: Model | None = None, spec: Spec | None = None,
                 scheduler: Scheduler | None = None, registry: Any = None):
        self.settings = settings
        self.spec = spec or load_spec()
        if settings.family not in self.spec.families:
            raise ValueError(f"unknown family {settings.family!r} (known: {', '.join(self.spec.families)})")
        if settings.systemone_prompt not in PROMPT_LAYOUTS:
            raise ValueError(f"unknown System One prompt layout {settings.systemone_prompt!r} "
                             f"(known: {', '.join(PROMPT_LAYOUTS)})")
        self.family = self.spec.families[settings.family].row
        self.model = model or Model()
        self.template = self.model.template(self.family["template"])
        self.end_tokens = self.model.eos_ids | frozenset(
            i for t in self.family.get("end_tokens", []) if (i := self.model.token_id(t)) is not None)
        self.metrics = scheduler.metrics if scheduler else Metrics(registry, self.spec.metrics)
        self.kv_report: dict[int, str] = {}
        self.kv_store: Any = None
        if scheduler is None:
            engine = self.model.engine(n_slots=settings.kv_slots, n_threads=settings.n_threads,
                                       dequantize=settings.dequantize)
            store = None
            if settings.kv_dir:
                from .kv_store import KvStore, fingerprint

                store = KvStore(settings.kv_dir, engine, fingerprint(self.model.hf_config, self.model.weights))
                self.kv_report = store.load_all(settings.kv_slots)
                self.kv_store = store
            scheduler = Scheduler(engine, n_slots=settings.kv_slots, max_queue=settings.max_queue,
                                  queue_timeout=settings.queue_timeout, metrics=self.metrics,
                                  step_delay=settings.step_delay, on_release=store.save if store else None,
                                  profile_turns=settings.profile_turns, prefix_reuse=settings.prefix_reuse)
        self.scheduler = scheduler
        self.validators = {ep: RequestValidator(self.spec, ep, settings.family, settings.validator_settings())
                           for ep in ("chat", "completions", "messages", "render", "systemone", "responses")}
        self.systemone_labels = Labels(self.model)  # decided once (rule s1.labels.single-token)
        self.responses = ResponseStore(settings.responses_max, settings.responses_max_bytes, settings.kv_dir)
        self.started = int(time.time())

    def close(self) -> None:
        """Stop taking work (waiters get 503 scheduler_closed) and write pending KV state."""
        self.scheduler.close()
        if self.kv_store is not None:
            self.kv_store.close()

    def render(self, chat: ChatInput, *, continuation: bool = True, history: list[int] | None = None,
               context_param: str | None = None) -> tuple[Rendered, list[int]]:
        """The prompt text and its token ids; special-token text from the request stays text.
        A trailing assistant turn is continued when the server allows it and `continuation`.
        `history` (the tokens a parent response's slot holds) is kept as it is when the
        prompt's text begins with it. With `context_param`, a text too long for the context
        whatever its tokens is refused before it is tokenized (see `refuse_if_too_long`)."""
        literal = LiteralSpecials(self.model.special_texts)
        try:
            shielded = render_chat(self.family, self.template, literal.shield(chat),
                                   continue_assistant=self.settings.continue_assistant and continuation,
                                   template_tokens=self.model.template_tokens)
        except TemplateRefusal as e:  # rule prompt.template.refusal
            raise error("template_refused", f"The model's chat template refused these messages: "
                        f"{literal.restore(str(e))}", param="messages") from None
        pieces = literal.pieces(shielded.text)
        if context_param is not None:
            self.refuse_if_too_long(sum(len(text) for text, _ in pieces), context_param)
        ids = (self._after(history, pieces) if history else None) or self.model.encode_pieces(pieces)
        rendered = replace(shielded, text=literal.restore(shielded.text),
                           tools_offered=literal.restore(shielded.tools_offered),
                           tool_choice=literal.restore(shielded.tool_choice))
        return rendered, ids

    def _after(self, history: list[int], pieces: list[tuple[str, bool]]) -> list[int] | None:
        """`history` followed by the tokens of the rest of the prompt, when the prompt's text
        starts with the history's text; else None.

        A chained response's prompt is its parent's prompt, the parent's answer and the new
        turn. Tokenized afresh, the answer can merge with the text around it into other tokens
        than the ones the model generated (BPE merges across that boundary), and the parent's
        KV slot would then be reused only up to there. Keeping the generated tokens gives the
        model its own words back and lets the slot serve the whole parent."""
        model = self.model
        if not all(0 <= t < len(model.token_bytes) for t in history):
            return None
        try:
            head = b"".join(model.token_bytes[t] if t not in model.special_ids
                            else (model.tokenizer.id_to_token(t) or "").encode() for t in history).decode("utf-8")
        except UnicodeDecodeError:  # the history ends inside a character
            return None
        if not "".join(text for text, _ in pieces).startswith(head):
            return None
        rest: list[tuple[str, bool]] = []
        at = 0
        for text, control in pieces:
            end = at + len(text)
            if end > len(head):
                if at < len(head):  # the history ends inside this piece
                    if control:
                        return None
                    text = text[len(head) - at:]
                rest.append((text, control))
            at = end
        return list(history) + model.encode_pieces(rest)

    @cached_property
    def token_index(self) -> TokenIndex:
        """The vocabulary by bytes, for tool-name decoding; built at the first request offering tools."""
        return TokenIndex(self.model.token_bytes)

    @cached_property
    def longest_token(self) -> int:
        """Bytes of the longest token the model has (special-token text included)."""
        return max([len(b) for b in self.model.token_bytes] + [len(t.encode()) for t in self.model.special_texts] + [1])

    def refuse_if_too_long(self, chars: int, param: str) -> None:
        """context_length_exceeded for a prompt text that cannot fit whatever its tokens: no
        token spells more than `longest_token` bytes, and a character is at least one byte, so
        a text of `chars` characters takes at least chars / longest_token tokens. Tokenizing a
        request of megabytes costs seconds of CPU; this answers it at the cost of a length."""
        n_ctx = self.model.config.n_ctx
        at_least = chars // self.longest_token
        if at_least >= n_ctx:
            raise error("context_length_exceeded",
                        f"The model's context is {n_ctx} tokens and the prompt alone takes at least {at_least}; "
                        "shorten it.", param=param)

    def budget(self, prompt: list[int], requested: int | None, param: str) -> int:
        """Tokens the answer may have: the request's ceiling, clamped to the server's and to
        the room the context leaves. Only a prompt with no room at all is refused."""
        n_ctx = self.model.config.n_ctx
        if len(prompt) >= n_ctx:
            raise error("context_length_exceeded",
                        f"The model's context is {n_ctx} tokens and the prompt alone takes {len(prompt)}; "
                        "shorten it.", param=param)
        return max(1, min(requested or self.settings.max_tokens, self.settings.max_tokens, n_ctx - len(prompt)))

    def start(self, request: GenerationRequest, turn: Turn | None = None, client_gone: Any = None) -> Generation:
        """The one way into the engine for a generation: render the conversation (or take the
        text as it is), budget the answer, pick the slot and start. Returns once the engine
        has accepted the prompt; every refusal (template, context, queue) raises before."""
        turn = turn or Turn()
        prefer: int | None = None
        reuse_key: bytes | None = None
        if request.chat is not None:
            rendered, ids = self.render(request.chat, continuation=request.continuation,
                                        history=list(request.history), context_param=request.param)
            thinking, tools = rendered.thinking, rendered.tools_offered
            # its conversation, by the translated messages whatever the API (ops.slot.choice)
            reuse_key = conversation_digest(request.chat.messages)
            prefer = slot_of(reuse_key, self.settings.kv_slots)
        else:
            text = request.text or ""
            self.refuse_if_too_long(len(text), request.param)
            ids, thinking, tools = self.model.encode(text), False, []
        sampling, output = request.sampling, request.output
        task = Task(prompt=ids, max_new=self.budget(ids, sampling.max_tokens, request.param),
                    end_tokens=self.end_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
                    seed=sampling.seed, top_k_logprobs=output.logprobs, echo=output.echo, slot=request.slot,
                    prefer=prefer, request_id=turn.request_id, turn=turn, reuse_key=reuse_key)
        spec = GenSpec(stops=list(sampling.stops), ignore_leading=sampling.ignore_leading_stop, thinking=thinking,
                       tools=tools, tool_format=self.family["tool_format"], strict_tools=output.strict_tools,
                       keepalive=self.settings.keepalive_seconds, strip=not output.raw_text)
        if tools and self.settings.offered_tool_names and spec.tool_format in SLOTS:
            task.decoder = ToolDecoder(self.token_index, spec.tool_format, tools)
        gen = Generation(self.scheduler, task, self.model.token_bytes, spec, client_gone)
        turn.stream = output.stream
        gen.start()
        return gen

    def score(self, scoring: list[tuple[list[int], list[int]]], answer: Callable[[Scored], bytes], *,
              reuse_key: bytes | None, turn: Turn, client_gone: Any = None) -> bytes | None:
        """Score /v1/systemone prompts ((prompt, label ids) pairs, rendered and within budget)
        and return `answer` of their label logits; None when the client hung up meanwhile."""
        task = Task(prompt=scoring[0][0], max_new=0, end_tokens=frozenset(), scoring=scoring, reuse_key=reuse_key,
                    request_id=turn.request_id, client_gone=client_gone, turn=turn)
        try:
            got = scores(self.scheduler, task, CLIENT_POLL)
            if got is None:
                return None
            t0 = time.perf_counter()
            data = answer(got)
            turn.text += time.perf_counter() - t0  # the answers and their JSON (the profile's text phase)
            return data
        finally:
            if task.assigned >= 0:  # an admitted request's turn goes to the profile ring
                self.scheduler.profiles.add(turn)
