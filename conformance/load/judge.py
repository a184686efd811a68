"""One request of a load, sent and judged exactly as a normal run judges it (runner.run_vector:
the vector's own expectations, then every always-on invariant), and turned into a Record: the
verdict plus what the load rules and the figures need (timings, tokens, how a refusal looked,
the greedy answer to compare with the same request alone).

A record is plain JSON-able data: Locust workers send records to their master, which folds
them (fold.py); nothing here imports Locust."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from ..checks import CHECKS, CheckContext, CheckFailure, answer
from ..exchange import Exchange, TransportError
from ..runner import Result, effective_expect, model_of, prepare, run_vector
from ..targets import broke_unanswered
from .plan import Item

RETRY_RULE = "load.saturation.retry-after"
#: Evidence kept per (rule, check) on one process: enough to reproduce, not one per response.
EVIDENCE_PER_CHECK = 2


@dataclass
class Record:
    key: str  # the plan item's key, or "disconnect"
    endpoint: str
    mode: str
    started: float  # wall-clock seconds (time.time()) when the request was sent
    elapsed: float
    status: int = 0
    ttft: float | None = None  # seconds to the first event carrying output (streams)
    itl: list[float] = field(default_factory=list)  # seconds between output events (streams)
    output_tokens: int | None = None
    lost: str | None = None  # "reset", "timeout", "hang": the request got no complete answer
    retry_after: str | None = None
    #: [rule id, check, expected, actual] of every failed expectation or invariant
    failures: list[list[str]] = field(default_factory=list)
    #: evidence (Exchange.to_dict) for the first failures of each (rule, check)
    evidence: dict[str, Any] = field(default_factory=dict)
    answer: list[Any] | None = None  # greedy answers: content, reasoning, tool calls, finish, logprobs
    ending: str | None = None  # how a stream ended (its last event), compared with the same request alone
    parity: bool = False  # the stream/unary parity check ran on this answer
    disconnected: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def greedy_answer(ex: Exchange, endpoint: str) -> list[Any] | None:
    """What two greedy answers to the same request must share: the reassembled content,
    reasoning, tool calls and finish reason (the checks' own `answer`), and the log
    probabilities where the response carries them (bit-identity covers those too)."""
    try:
        a = answer(ex, endpoint)
    except CheckFailure:  # an answer the checks cannot read has been judged already
        return None
    return [a.content, a.reasoning, [list(c) for c in a.tool_calls], a.finish, logprobs_of(ex)]


def logprobs_of(ex: Exchange) -> list[float] | None:
    """The chosen tokens' log probabilities of a unary chat or completions answer, if any."""
    if ex.is_sse:
        return None
    try:
        doc = ex.json()
        lp = (doc.get("choices") or [{}])[0].get("logprobs") or {}
    except (ValueError, AttributeError, IndexError):
        return None
    if isinstance(lp.get("content"), list):
        return [e.get("logprob") for e in lp["content"]]
    if isinstance(lp.get("token_logprobs"), list):
        return list(lp["token_logprobs"])
    return None


#: An OpenAI stream closed by [DONE] with no chunk carrying a finish_reason: the server stopped
#: it early (llama-cpp-python does so for a waiting request) and the client cannot tell.
DONE_UNFINISHED = "[DONE] without a finish_reason"


def ending(ex: Exchange) -> str | None:
    """A stream's last event as a short signature ([DONE], message_stop, response.completed),
    compared with the same request's stream alone (load.requests.none-lost): a stream cut short
    differs from it even when the server closes it cleanly."""
    if not ex.is_sse:
        return None
    events = ex.events()
    if not events:
        return "(no event)"
    last = events[-1]
    if last.data == "[DONE]":
        return "[DONE]" if any(_finish_reason(e.data) for e in events[:-1]) else DONE_UNFINISHED
    try:
        doc = json.loads(last.data)
    except ValueError:
        return last.event or "(not JSON)"
    kind = doc.get("type") or doc.get("object") if isinstance(doc, dict) else None
    return last.event or (str(kind) if kind else "(data)")


def _finish_reason(data: str) -> bool:
    """The chunk has a choice with a finish_reason (chat and completions streams)."""
    try:
        d = json.loads(data)
    except ValueError:
        return False
    choices = d.get("choices") if isinstance(d, dict) else None
    return isinstance(choices, list) and any(isinstance(c, dict) and c.get("finish_reason") for c in choices)


def output_timing(ex: Exchange) -> tuple[float | None, list[float]]:
    """Time to the first event carrying output, and the gaps between output events."""
    if not ex.is_sse:
        return None, []
    times = [e.at for e in ex.events() if e.data and e.data != "[DONE]" and _carries_output(e.data)]
    return (times[0] if times else None), [b - a for a, b in zip(times, times[1:], strict=False)]


def _carries_output(data: str) -> bool:
    try:
        d = json.loads(data)
    except ValueError:
        return False
    if not isinstance(d, dict):
        return False
    if d.get("type") in ("content_block_delta", "response.output_text.delta", "response.reasoning_text.delta"):
        return True
    for ch in d.get("choices") or []:
        delta = ch.get("delta") or {}
        if ch.get("text") or delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                or delta.get("tool_calls"):
            return True
    return False


def output_tokens(ex: Exchange, endpoint: str) -> int | None:
    """The completion token count the answer reports (usage), if it reports one."""
    try:
        docs = [e.json() for e in ex.events() if e.data and e.data != "[DONE]"] if ex.is_sse else [ex.json()]
    except ValueError:
        return None
    for d in reversed(docs):
        if not isinstance(d, dict):
            continue
        u = d.get("usage") or (d.get("response") or {}).get("usage") or (d.get("message") or {}).get("usage")
        if isinstance(u, dict):
            for k in ("completion_tokens", "output_tokens"):
                if isinstance(u.get(k), int) and u[k] > 0:
                    return int(u[k])
    return None


def retry_after_ok(value: str | None) -> bool:
    """RFC 9110 10.2.3: delay-seconds (a non-negative integer) or an HTTP-date."""
    if value is None:
        return False
    if value.strip().isdigit():
        return True
    try:
        return parsedate_to_datetime(value) is not None
    except (TypeError, ValueError, IndexError):
        return False


def _lost_kind(res: Result, deadline: float) -> str | None:
    ex = res.exchange
    if res.outcome == "ERROR" and (ex is None or ex.transport_error):
        text = (ex.transport_error or "") if ex is not None else res.reason
        return "timeout" if "Timeout" in text else "reset"
    if ex is not None and ex.elapsed > deadline:
        return "hang"
    return None


class Judge:
    """Sends plan items and judges them; keeps evidence counts for its own process."""

    def __init__(self, spec: Any, strict: bool, profiles: list[str], deadline: float, parity_every: int = 5,
                 redact: str | None = None):
        self.spec, self.strict, self.profiles, self.deadline = spec, strict, profiles, deadline
        self.redact = redact
        self.parity_every = parity_every
        self._kept: dict[str, int] = {}
        self._greedy_streams = 0

    def _keep(self, rec: Record, rule_id: str, check: str, ex: Exchange | None) -> None:
        name = f"{rule_id} {check}"
        if ex is not None and self._kept.get(name, 0) < EVIDENCE_PER_CHECK and name not in rec.evidence:
            self._kept[name] = self._kept.get(name, 0) + 1
            rec.evidence[name] = ex.to_dict(self.redact)

    def fail(self, rec: Record, rule_id: str, f: CheckFailure, ex: Exchange | None) -> None:
        rec.failures.append([rule_id, f.check, _text(f.expected), _text(f.actual)])
        self._keep(rec, rule_id, f.check, ex)

    def send(self, item: Item, target: Any) -> Record:
        started = time.time()
        res = run_vector(self.spec, item.rule, item.vector, target, self.strict, self.profiles)
        ex = res.exchange
        rec = Record(item.key, item.vector.endpoint, item.mode, started, ex.elapsed if ex else time.time() - started)
        rec.lost = _lost_kind(res, self.deadline)
        if ex is None or rec.lost in ("reset", "timeout"):
            if ex is not None:
                rec.status = ex.status
                self._keep(rec, "load.requests.none-lost", rec.lost or "", ex)
            return rec
        rec.status = ex.status
        rec.ttft, rec.itl = output_timing(ex)
        rec.output_tokens = output_tokens(ex, item.vector.endpoint)
        if rec.output_tokens is None and rec.ttft is not None:  # a stream without usage: one token an event
            rec.output_tokens = len(rec.itl) + 1
        rec.ending = ending(ex)
        if ex.status == 429:  # a refusal for load: judged by load.saturation.*, not by the vector's 200
            self._refusal(rec, item, ex, target)
        elif res.outcome in ("FAIL", "NON-STRICT") and res.failure is not None:
            self.fail(rec, item.rule.id, res.failure, ex)
        elif res.outcome == "ERROR":
            self.fail(rec, item.rule.id, CheckFailure("harness", "a judged answer", res.reason), ex)
        for owner, f in res.invariant_failures:
            self.fail(rec, owner, f, ex)
        if ex.status == 200 and item.greedy:
            rec.answer = greedy_answer(ex, item.vector.endpoint)
            if item.mode == "stream":
                self._parity(rec, item, target, ex)
        return rec

    def _refusal(self, rec: Record, item: Item, ex: Exchange, target: Any) -> None:
        """load.saturation.retry-after: the header, and the suite's own envelope check."""
        rec.retry_after = ex.header("retry-after")
        if not retry_after_ok(rec.retry_after):
            self.fail(rec, RETRY_RULE, CheckFailure("Retry-After", "delay-seconds or an HTTP-date (RFC 9110 10.2.3)",
                                                    rec.retry_after or "(absent)"), ex)
        ctx = CheckContext(self.spec, item.vector, ex, None, target, expect={"status": 429}, strict=self.strict)
        try:
            CHECKS["error_envelope"](ctx)
        except CheckFailure as f:
            self.fail(rec, RETRY_RULE, f, ex)

    def _parity(self, rec: Record, item: Item, target: Any, ex: Exchange) -> None:
        """Every Nth greedy stream: the suite's stream_equals_unary check, whose unary twin is
        sent under the same load. Its failure is recorded as the check's; fold.py decides
        which rule it is charged to (the target's batch-invariance promise)."""
        self._greedy_streams += 1
        if (self._greedy_streams - 1) % self.parity_every:  # the first one, then every Nth
            return
        rec.parity = True
        model = model_of(target)
        p = prepare(self.spec, item.vector, model)
        if not isinstance(p.body, dict):
            return  # a raw body: no unary twin to build
        ctx = CheckContext(self.spec, item.vector, ex, p.body, target,
                           expect=effective_expect(self.spec, item.vector, self.strict, model), strict=self.strict)
        try:
            CHECKS["stream_equals_unary"](ctx)
        except CheckFailure as f:
            if "200 in both modes" in str(f.expected):  # the twin was refused for load: nothing to compare
                return
            self.fail(rec, "stream.equals-unary", f, ex)
        except TransportError:  # the twin broke off: a lost request the twin's own run would show
            return


def _text(value: Any, limit: int = 600) -> str:
    from ..report import as_text

    return as_text(value, limit)


def disconnect(target: Any, model: str, deadline: float) -> Record:
    """A client that leaves: a long streamed chat request, closed after the first bytes of its
    answer (load.disconnect.frees-capacity). Its status is recorded; it is lost only when the
    server broke it off before answering. As HttpTarget.send does, a connection that broke
    unanswered as it was reused (targets.broke_unanswered) is tried once more on a fresh one."""
    import httpx

    from .plan import DISCONNECT_REQUEST

    body = json.dumps(dict(DISCONNECT_REQUEST, model=model)).encode()
    rec = Record("disconnect", "chat", "stream", time.time(), 0.0)
    t0 = time.perf_counter()
    for fresh in (False, True):
        try:
            _leave_stream(httpx.Client(timeout=deadline) if fresh else target.client, target, body, deadline, rec)
            rec.lost = None
            rec.evidence.clear()  # the first attempt's race, if any: the request was answered
            break
        except (httpx.HTTPError, OSError) as e:
            rec.lost = "timeout" if isinstance(e, httpx.TimeoutException) else "reset"
            ex = Exchange("POST", "/v1/chat/completions", {"Content-Type": "application/json"}, body)  # no key in it
            ex.status, ex.elapsed, ex.transport_error = rec.status, time.perf_counter() - t0, f"{type(e).__name__}: {e}"
            rec.evidence[f"load.requests.none-lost {rec.lost}"] = ex.to_dict()
            if not broke_unanswered(rec.status, e):
                break
    rec.elapsed = time.perf_counter() - t0
    return rec


def _leave_stream(client: Any, target: Any, body: bytes, deadline: float, rec: Record) -> None:
    try:
        with client.stream("POST", target.base + "/v1/chat/completions", content=body, timeout=deadline,
                           headers=target.default_headers | {"Content-Type": "application/json"}) as r:
            rec.status = r.status_code
            for _ in r.iter_bytes():
                rec.disconnected = r.status_code == 200
                break  # leaving the block closes the connection with the answer unread
    finally:
        if client is not target.client:
            client.close()
