"""Running one request: consume the engine's token events through the text pipeline and
produce deltas (for SSE) and the final outcome (for JSON, and the last SSE chunks).

The same code serves both modes, so a stream reassembles to the unary answer by
construction; the stream/unary parity rules check that it does.
"""
from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ..tool_parsers import declared, validate_call
from ..tool_parsers import parse as parse_tools
from .errors import ApiError, error
from .scheduler import Scheduler
from .task import Accepted, ClientGone, Done, Event, Failed, Scored, Task, TokenRecord
from .text_stream import ContentShaper, Piece, ReasoningSplitter, StopFilter, Utf8Assembler

CLIENT_POLL = 0.25  # seconds between two looks at the client's socket while its answer is made


@dataclass
class Delta:
    kind: str  # "content" | "reasoning"
    text: str


@dataclass
class LogprobEntry:
    token: str
    logprob: float | None
    bytes: list[int]
    top: list[tuple[str, float | None, list[int]]]
    offset: int  # character offset in the text it describes


@dataclass
class Outcome:
    content: str
    reasoning: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str  # stop | length | tool_calls
    matched_stop: str | None
    prompt_tokens: int
    completion_tokens: int
    queue_wait: float
    logprobs: list[LogprobEntry] | None = None
    echo: list[LogprobEntry] | None = None
    problems: list[str] = field(default_factory=list)
    cached_tokens: int = 0


@dataclass
class Spec:
    """How to turn tokens into an answer (from the request and the family row)."""

    stops: list[str]
    ignore_leading: bool
    thinking: bool
    tools: list[dict[str, Any]]
    tool_format: str
    strict_tools: bool = False
    keepalive: float = 10.0
    strip: bool = True


class Generation:
    def __init__(self, scheduler: Scheduler, task: Task, token_bytes: list[bytes], spec: Spec,
                 client_gone: Any = None):
        self.scheduler, self.task, self.token_bytes, self.spec = scheduler, task, token_bytes, spec
        self.client_gone = client_gone or (lambda: False)  # polled while a JSON answer is being built
        self.assembler = Utf8Assembler()
        self.stop_filter = StopFilter(spec.stops, spec.ignore_leading)
        # A legacy completion (strip off) is raw text: no reasoning split, every character kept.
        self.splitter = ReasoningSplitter(spec.thinking, markup=spec.strip)
        self.shaper = ContentShaper(bool(spec.tools) and spec.tool_format != "none", spec.strip)
        self.raw = ""
        self.records: list[tuple[TokenRecord, int, int]] = []  # record, raw start, raw end
        self.content: list[Piece] = []
        self.reasoning: list[Piece] = []
        self.accepted: Accepted | None = None
        self.outcome: Outcome | None = None
        self.created = now()  # the answer's `created`: when the request was turned into work

    # ------------------------------------------------------------------ event flow

    def start(self) -> Accepted:
        """Admit the task and wait until the engine accepted the prompt (errors raise here, before
        any response byte is committed)."""
        self.task.client_gone = self.client_gone
        self.scheduler.admit(self.task)
        while self.accepted is None:
            event = self.task.events.get()
            if isinstance(event, Accepted):
                self.accepted = event
            elif isinstance(event, Failed):
                raise self._as_api_error(event.error)
        return self.accepted

    @staticmethod
    def _as_api_error(exc: BaseException) -> ApiError:
        if isinstance(exc, ApiError):
            return exc
        if isinstance(exc, ClientGone):
            raise exc
        return error("engine_error")

    def deltas(self, poll: float | None = None) -> Iterator[Delta | None]:
        """Content and reasoning deltas as they become final; None is a tick after `poll`
        seconds (default: the keepalive interval) without news. Events already waiting are
        taken together and their deltas merged, so a reader slower than the engine gets
        fewer, larger chunks instead of falling behind one token at a time."""
        assert self.accepted is not None, "start() first"
        while True:
            try:
                events: list[Event] = [self.task.events.get(timeout=poll or self.spec.keepalive)]
            except queue.Empty:
                yield None
                continue
            while isinstance(events[-1], TokenRecord):
                try:
                    events.append(self.task.events.get_nowait())
                except queue.Empty:
                    break
            if isinstance(events[0], TokenRecord) and not self.task.turn.first_token:  # the profile's TTFT
                self.task.turn.first_token = time.perf_counter()
            pending: Delta | None = None
            for kind, run in groupby(events, key=type):  # a run of tokens: one text
                group = list(run)
                last = group[-1]
                if isinstance(last, Failed):
                    yield from ([pending] if pending else [])
                    raise self._as_api_error(last.error)
                if isinstance(last, TokenRecord):
                    produced = self._tokens(group)  # type: ignore[arg-type]
                elif isinstance(last, Done):
                    produced = self._finish(last.reason)
                else:  # nothing else follows Accepted on a generation's queue
                    continue
                for d in self._timed(produced):
                    if pending is not None and pending.kind == d.kind:
                        pending = Delta(d.kind, pending.text + d.text)
                    else:
                        if pending is not None:
                            yield pending
                        pending = d
                if kind is Done:
                    if pending is not None:
                        yield pending
                    return
            if pending is not None:
                yield pending

    def _timed(self, it: Iterator[Delta]) -> Iterator[Delta]:
        """`it`, its own work (decoding bytes, stops, reasoning, tool calls) charged to the
        turn's text phase and the time its consumer spends between items not."""
        if not self.scheduler.timing:
            yield from it
            return
        turn = self.task.turn
        while True:
            t0 = time.perf_counter()
            try:
                d = next(it)
            except StopIteration:
                turn.text += time.perf_counter() - t0
                return
            turn.text += time.perf_counter() - t0
            yield d

    def record(self) -> None:
        """The turn is over on this side too: into the profile ring, if the engine took it."""
        if self.task.assigned >= 0:
            self.scheduler.profiles.add(self.task.turn)

    def run(self, on_delta: Any = None) -> Outcome:
        """Unary: start, drain, and return the outcome; a client that hangs up cancels the work.
        `on_delta` sees each delta as a stream would (/v1/responses builds its items so)."""
        if self.accepted is None:
            self.start()
        checked = time.monotonic()
        for d in self.deltas(poll=CLIENT_POLL):
            if d is not None and on_delta is not None:
                on_delta(d)
            if time.monotonic() - checked >= CLIENT_POLL:
                checked = time.monotonic()
                if self.client_gone():
                    self.cancel()
                    raise ClientGone()
        assert self.outcome is not None
        return self.outcome

    def cancel(self) -> None:
        self.task.cancel()

    # ------------------------------------------------------------------ the pipeline

    def _tokens(self, recs: list[TokenRecord]) -> Iterator[Delta]:
        """Tokens in order: each token's characters are recorded with their span of the raw text
        (for logprobs); the stages after the assembler then take the run's text in one piece,
        which they treat exactly as the same text arriving token by token."""
        texts = []
        end = len(self.raw)
        for rec in recs:
            text = self.assembler.feed(self.token_bytes[rec.token])
            texts.append(text)
            self.records.append((rec, end, end + len(text)))
            end += len(text)
        joined = "".join(texts)
        self.raw += joined
        yield from self._through(self.stop_filter.feed(joined))
        if self.stop_filter.matched is not None:
            self.task.stop()

    def _through(self, pieces: list[Piece]) -> Iterator[Delta]:
        for p in pieces:
            for kind, q in self.splitter.feed(p):
                yield from self._route(kind, q)

    def _route(self, kind: str, piece: Piece) -> Iterator[Delta]:
        if kind == "reasoning":
            self.reasoning.append(piece)
            yield Delta("reasoning", piece.text)
            return
        for c in self.shaper.feed(piece):
            self.content.append(c)
            yield Delta("content", c.text)

    def _finish(self, reason: str) -> Iterator[Delta]:
        tail = self.assembler.flush()
        if tail:
            start = len(self.raw)
            self.raw += tail
            if self.records:
                rec, s, _ = self.records[-1]
                self.records[-1] = (rec, s, len(self.raw))
            yield from self._through(self.stop_filter.feed(tail))
        yield from self._through(self.stop_filter.finish())
        for kind, q in self.splitter.finish():
            yield from self._route(kind, q)
        flushed, withheld = self.shaper.finish(keep_trailing=self.stop_filter.matched is not None)
        for c in flushed:
            self.content.append(c)
            yield Delta("content", c.text)
        calls: list[dict[str, Any]] = []
        problems: list[str] = []
        if withheld is not None:
            parsed = parse_tools(self.spec.tool_format, withheld.text, self.spec.tools)
            problems = parsed.problems + [p for c in parsed.calls for p in validate_call(c, self.spec.tools)]
            calls = parsed.calls
            if self.spec.strict_tools and (problems or reason == "length"):
                raise error("invalid_model_tool_call")
            offered = declared(self.spec.tools)
            if any(c["name"] not in offered for c in calls):  # rule tools.call.offered-only
                calls = []
            if not calls:
                # nothing readable: the text stays content, as the model wrote it (the whitespace
                # before the marker was dropped by the shaper and is restored from the raw text)
                start = self.content[-1].end if self.content else withheld.offset
                extra = Piece(start, self.raw[start:withheld.offset] + withheld.text.rstrip())
                self.content.append(extra)
                yield Delta("content", extra.text)
        finish = "tool_calls" if calls else ("length" if reason == "length" and self.stop_filter.matched is None
                                             else "stop")
        self.outcome = Outcome(
            content="".join(p.text for p in self.content), reasoning="".join(p.text for p in self.reasoning),
            tool_calls=calls, finish_reason=finish, matched_stop=self.stop_filter.matched,
            prompt_tokens=self.accepted.prompt_tokens if self.accepted else 0, completion_tokens=len(self.records),
            queue_wait=self.accepted.queue_wait if self.accepted else 0.0, problems=problems,
            cached_tokens=self.accepted.reused if self.accepted else 0)

    def reasoning_tokens(self) -> int:
        """Generated tokens that began inside the reasoning (usage.output_tokens_details)."""
        if not self.reasoning:
            return 0
        end = self.reasoning[-1].end
        return sum(1 for _, s, _ in self.records if s < end)

    # ------------------------------------------------------------------ logprobs

    def _top(self, rec: TokenRecord) -> list[tuple[str, float | None, list[int]]]:
        """Alternatives labelled with their own decoded bytes (a partial character shows U+FFFD)."""
        return [(self.token_bytes[t].decode("utf-8", "replace"), lp, list(self.token_bytes[t])) for t, lp in rec.top]

    def content_logprobs(self) -> list[LogprobEntry]:
        """One entry per token that reached the content, cut to the characters that did: joining
        the entries' token texts gives exactly the content, and joining their bytes gives its
        UTF-8 (a token holding part of a character reports that part; one whose bytes were not
        valid UTF-8 reports none, and the token after it carries the U+FFFD it became)."""
        out: list[LogprobEntry] = []
        pos = 0
        spans: list[Piece] = []  # content pieces merged where they touch: usually one or two
        for p in self.content:
            if spans and spans[-1].end == p.offset:
                spans[-1] = Piece(spans[-1].offset, spans[-1].text + p.text)
            else:
                spans.append(p)
        for rec, s, e in self.records:
            parts = [p.text[max(s, p.offset) - p.offset: min(e, p.end) - p.offset]
                     for p in spans if p.offset < e and s < p.end]
            inside = any(p.offset <= s <= p.end for p in spans)
            if not parts and not (s == e and inside):
                continue
            text = "".join(parts)
            out.append(LogprobEntry(text, rec.logprob, list(self.token_bytes[rec.token]), self._top(rec), pos))
            pos += len(text)
        text_all = "".join(p.text for p in self.content)
        content = text_all.encode()
        done = 0  # bytes of the content reported so far
        for entry in out:
            if entry.token:
                end = len(text_all[: entry.offset + len(entry.token)].encode())
                entry.bytes, done = list(content[done:end]), end
            else:
                own = bytes(entry.bytes)
                fits = content[done:done + len(own)] == own
                entry.bytes = list(own) if fits else []
                done += len(own) if fits else 0
        return out

    def echo_logprobs(self) -> list[LogprobEntry]:
        """Prompt records for completions echo: every prompt token, the first with no logprob."""
        assert self.accepted is not None
        asm = Utf8Assembler()
        out, pos = [], 0
        for rec in self.accepted.echo:
            text = asm.feed(self.token_bytes[rec.token])
            out.append(LogprobEntry(text, rec.logprob, list(self.token_bytes[rec.token]), self._top(rec), pos))
            pos += len(text)
        tail = asm.flush()
        if tail and out:
            out[-1].token += tail
        return out


def scores(scheduler: Scheduler, task: Task, poll: float) -> Scored | None:
    """Admit a scoring task (/v1/systemone) and wait for its label logits; None once the client
    has hung up (looked at every `poll` seconds): the task is then cancelled, and the engine
    drops it before its next pass (rule s1.scoring.interleaved-cancellable)."""
    try:
        scheduler.admit(task)
    except ClientGone:
        return None
    while True:
        try:
            event = task.events.get(timeout=poll)
        except queue.Empty:
            if task.client_gone is not None and task.client_gone():
                task.cancel()
                return None
            continue
        if isinstance(event, Scored):
            return event
        if isinstance(event, Failed):
            raise event.error if isinstance(event.error, Exception) else error("engine_failed")


def now() -> int:
    return int(time.time())
