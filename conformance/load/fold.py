"""A load's records folded into one verdict per rule: the RuleResults a normal run reports (so
every report writer, the matrix and `colibri-conform diff` read a load report as they read any),
with the load rules of spec/92-load.yaml judged over all records at once.

Who is charged: a failed expectation or invariant goes to the rule that states it, as in a
normal run (suite.fold_invariants); the load rules are judged here from the records, the
answers the same requests got alone, and what the server showed once idle again (`Idle`)."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from colibri.spec.metrics import read_metrics
from colibri.spec.model import Vector

from ..checks import CheckFailure
from ..runner import Result
from ..suite import RuleResult, VectorResult, fold

NONE_LOST, NO_5XX, RETRY = "load.requests.none-lost", "load.saturation.no-5xx", "load.saturation.retry-after"
DISCONNECT, NEAR_TIE = "load.disconnect.frees-capacity", "load.greedy.near-tie"
DIVERGENCE, BIT_IDENTICAL, PARITY = "load.greedy.divergence-rate", "load.greedy.bit-identical", "stream.equals-unary"
#: Examples kept per (rule, check) in the report: enough to reproduce, not one per response.
EXAMPLES = 3
#: Invariant checks that apply to refusals, and to streams, when invariants() picks them.
ERROR_CHECKS = {"error_envelope", "no_server_error"}
STREAM_CHECKS = {"sse_framing", "stream_one_id", "anthropic_event_order", "responses_stream_sequence",
                 "responses_stream_brackets", "responses_stream_assembly"}
#: The diff.greedy.exact bound (nats): a divergence where alone led by at most this is a near-tie.
NEAR_TIE_NATS = 0.01


@dataclass
class Idle:
    """What the server showed once the load stopped and it went idle again."""

    probe_status: int = 0  # a minimal request sent alone after the load
    probe_detail: str = ""
    before: dict[str, float] | None = None  # colibri_scheduler_* samples before the load (None: unreadable)
    after: dict[str, float] | None = None
    idle_seconds: float = 0.0  # how long the server took to show nothing active or queued

    def to_dict(self) -> dict[str, Any]:
        return {"probe_status": self.probe_status, "probe_detail": self.probe_detail, "before": self.before,
                "after": self.after, "idle_seconds": round(self.idle_seconds, 3)}


@dataclass
class Settings:
    batch_invariant: bool = False
    users: int = 0
    deadline: float = 60.0


class Evidence:
    """Stored evidence standing in for an Exchange in a Result (report writers call to_dict)."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc

    def to_dict(self, redact: str | None = None) -> dict[str, Any]:
        text = json.dumps(self.doc, ensure_ascii=False)
        return json.loads(text.replace(redact, "***")) if redact else self.doc


@dataclass
class Verdicts:
    """Results under construction: rule id -> its VectorResults (examples) and notes."""

    spec: Any
    vectors: dict[str, list[VectorResult]] = field(default_factory=lambda: defaultdict(list))
    reasons: dict[str, str] = field(default_factory=dict)
    kept: Counter = field(default_factory=Counter)

    def add(self, rule_id: str, name: str, mode: str, outcome: str, failure: CheckFailure | None = None,
            evidence: dict[str, Any] | None = None, reason: str = "", check: str = "") -> None:
        key = (rule_id, check or (failure.check if failure else name.split("@")[0]))
        if self.kept[key] >= EXAMPLES:
            return
        self.kept[key] += 1
        rule = self.spec.by_id[rule_id]
        vec = Vector(rule_id=rule_id, name=name, endpoint=rule.endpoints[0], expect={"status": 200})
        ex: Any = Evidence(evidence) if evidence else None  # stands in for the Exchange the writers read
        self.vectors[rule_id].append(VectorResult(vec, mode, Result(outcome, ex, failure, reason)))

    def outcome_for(self, rule_id: str, failed: bool) -> str:
        return ("NON-STRICT" if self.spec.by_id[rule_id].level == "SHOULD" else "FAIL") if failed else "PASS"


def _applies(check: str, rec: dict[str, Any]) -> bool:
    if check in ERROR_CHECKS:
        return rec["status"] >= 400
    if check in STREAM_CHECKS:
        return rec["status"] == 200 and rec["mode"] == "stream"
    return rec["status"] == 200


def charged(v: Verdicts, records: list[dict[str, Any]], items: dict[str, Any], batch_invariant: bool) -> None:
    """The suite's own verdicts on every answer: each failure charged to the rule stating it; every
    rule that judged at least one answer PASSes when none failed."""
    judged: Counter = Counter()
    for rec in records:
        item = items.get(rec["key"])
        if item is not None and not rec["lost"] and rec["status"] != 429:
            judged[item.rule.id] += 1
        for r in v.spec.invariant_rules:
            if any(rec["endpoint"] in eps and _applies(c, rec) for c, eps in r.invariant.items()):
                judged[r.id] += 1
        if rec.get("parity"):
            judged[PARITY if batch_invariant else DIVERGENCE] += 1
    failed: set[str] = set()
    for rec in sorted(records, key=lambda r: not r["evidence"]):  # records holding evidence first
        for rule_id, check, expected, actual in rec["failures"]:
            if rule_id == PARITY and not batch_invariant:
                rule_id = DIVERGENCE  # another batch may part at a near-tie: counted, not a MUST
            if rule_id not in v.spec.by_id:
                continue
            failed.add(rule_id)
            ev = rec["evidence"].get(f"{rule_id} {check}") or next(iter(rec["evidence"].values()), None)
            v.add(rule_id, f"{check}@{rec['key']}", rec["mode"], v.outcome_for(rule_id, True),
                  CheckFailure(check, expected, actual), ev)
    for rule_id, n in judged.items():
        if rule_id not in failed and rule_id not in (RETRY, DIVERGENCE):
            v.add(rule_id, "under-load", "unary", "PASS", reason=f"{n} answers under load judged, none failed")


def lost_and_5xx(v: Verdicts, records: list[dict[str, Any]], alone: dict[str, dict[str, Any]], s: Settings) -> None:
    statuses = Counter(r["status"] for r in records)
    lost = five = 0
    for rec in records:
        kind = rec["lost"]
        ev = rec["evidence"].get(f"{NONE_LOST} {kind}")
        want = (alone.get(rec["key"]) or {}).get("ending")
        cut = rec["status"] == 200 and rec["mode"] == "stream" and not rec["disconnected"] and want \
            and rec.get("ending") != want
        if kind == "reset" or cut:
            lost += 1
            what = "reset" if kind == "reset" else "stream end"
            v.add(NONE_LOST, f"{what}@{rec['key']}", rec["mode"], "FAIL",
                  CheckFailure(what, f"a complete answer (alone it ended with {want})" if cut else "an answer",
                               rec.get("ending") if cut else f"connection broken after {rec['elapsed']:.2f} s"), ev)
        if kind in ("reset", "timeout", "hang") or rec["status"] >= 500:
            five += 1
            what = kind or str(rec["status"])
            v.add(NO_5XX, f"{what}@{rec['key']}", rec["mode"], "FAIL",
                  CheckFailure(what, f"a 2xx or a 429 within {s.deadline:g} s",
                               f"{rec['status'] or 'no status'} after {rec['elapsed']:.2f} s"), ev, check=what)
    counts = ", ".join(f"{n} × {k or 'none'}" for k, n in sorted(statuses.items()))
    if not lost:
        v.add(NONE_LOST, "under-load", "unary", "PASS", reason=f"{len(records)} requests ({counts}), none lost")
    if not five:
        v.add(NO_5XX, "under-load", "unary", "PASS", reason=f"{len(records)} requests ({counts}): no 5xx, reset or hang")
    v.reasons[NONE_LOST] = v.reasons[NO_5XX] = f"{len(records)} requests: {counts}; {lost} lost, {five} 5xx/reset/hang"


def retry_after(v: Verdicts, records: list[dict[str, Any]], s: Settings) -> None:
    refused = [r for r in records if r["status"] == 429]
    if not refused:
        v.add(RETRY, "under-load", "unary", "INCONCLUSIVE",
              reason=f"no request was refused at {s.users} users: nothing to judge")
    elif not v.vectors.get(RETRY):
        v.add(RETRY, "under-load", "unary", "PASS",
              reason=f"{len(refused)} refusals, each a 429 with Retry-After in its envelope")


def disconnects(v: Verdicts, records: list[dict[str, Any]], idle: Idle) -> None:
    n = sum(1 for r in records if r["disconnected"])
    if idle.probe_status != 200:
        v.add(DISCONNECT, "after-load", "stream", "FAIL",
              CheckFailure("request alone after the load", 200, f"{idle.probe_status} {idle.probe_detail}"))
        return
    if n == 0:
        v.add(DISCONNECT, "under-load", "stream", "INCONCLUSIVE",
              reason="no client got to disconnect mid-answer (each such request was refused)")
        return
    if idle.before is None or idle.after is None:
        v.add(DISCONNECT, "under-load", "stream", "PASS",
              reason=f"{n} clients left mid-answer; a request alone afterwards was answered 200 (no colibri_scheduler_* "
                     "counters on /metrics: the counts were not readable)")
        return
    b, a = idle.before, idle.after
    prefix = read_metrics().prefix

    def d(name: str) -> float:
        return a.get(f"{prefix}{name}_total", 0.0) - b.get(f"{prefix}{name}_total", 0.0)

    got = {k: d(k) for k in ("admitted", "completed", "failed", "cancelled", "abandoned")}
    active, queued = a.get(prefix + "active", 0.0), a.get(prefix + "queued", 0.0)
    if active or queued:
        why = CheckFailure("idle", "nothing active or queued once the load stopped", {"active": active, "queued": queued})
    elif got["admitted"] != got["completed"] + got["failed"] + got["cancelled"]:
        why = CheckFailure("accounting", "admitted = completed + failed + cancelled over the run", got)
    elif got["cancelled"] + got["abandoned"] < 1:
        why = CheckFailure("cancelled", f"cancelled or abandoned rising ({n} clients left mid-answer)", got)
    else:
        v.add(DISCONNECT, "under-load", "stream", "PASS",
              reason=f"{n} clients left mid-answer; idle after {idle.idle_seconds:.1f} s; over the run {got}")
        return
    v.add(DISCONNECT, "under-load", "stream", "FAIL", why, {"metrics_before": b, "metrics_after": a})


def greedy(v: Verdicts, records: list[dict[str, Any]], alone: dict[str, dict[str, Any]], s: Settings,
           reference_for: Callable[[str], Any]) -> dict[str, Any]:
    """The three greedy rules; returns the divergence figures for the report."""
    from ..differential import compare

    compared = diverged = identical_fail = with_logprobs = 0
    per_key: Counter = Counter()
    for rec in records:
        base = (alone.get(rec["key"]) or {}).get("answer")
        if rec["answer"] is None or base is None:
            continue
        compared += 1
        with_logprobs += rec["answer"][4] is not None
        ev = {"request": rec["key"], "alone": base, "under_load": rec["answer"]}
        if rec["answer"] != base:
            identical_fail += 1
            v.add(BIT_IDENTICAL, f"differs@{rec['key']}", rec["mode"], "FAIL",
                  CheckFailure("bit-identical", "the same answer and log probabilities as alone", rec["answer"]), ev)
        if rec["answer"][:4] == base[:4]:
            continue
        diverged += 1
        per_key[rec["key"]] += 1
        v.add(DIVERGENCE, f"differs@{rec['key']}", rec["mode"], "NON-STRICT",
              CheckFailure("divergence", "the answer the same request got alone", rec["answer"][:4]), ev)
        ref = reference_for(rec["key"])
        if ref is None:
            v.add(NEAR_TIE, f"unweighed@{rec['key']}", rec["mode"], "INCONCLUSIVE",
                  reason="the endpoint serves no log probabilities to weigh the divergence by")
            continue
        verdict = compare(ref, str(rec["answer"][0]), NEAR_TIE_NATS)
        outcome = {"PASS": "PASS", "FAIL": "FAIL"}.get(verdict["outcome"], "INCONCLUSIVE")
        v.add(NEAR_TIE, f"{'near-tie' if outcome == 'PASS' else 'margin'}@{rec['key']}", rec["mode"], outcome,
              CheckFailure("margin", f"<= {NEAR_TIE_NATS} nats at the first differing token", verdict["why"])
              if outcome == "FAIL" else None, ev | {"verdict": verdict}, reason=verdict["why"])
    rate = diverged / compared if compared else 0.0
    summary = f"{diverged} of {compared} greedy answers under load differ from alone ({rate:.1%})"
    for rid in (NEAR_TIE, DIVERGENCE, BIT_IDENTICAL):
        v.reasons[rid] = summary
    if not compared:
        for rid in (NEAR_TIE, DIVERGENCE, BIT_IDENTICAL):
            v.add(rid, "under-load", "unary", "INCONCLUSIVE", reason="no greedy answer under load to compare")
    else:
        if not diverged:
            v.add(NEAR_TIE, "under-load", "unary", "PASS", reason=summary)
        if not v.vectors.get(DIVERGENCE):
            v.add(DIVERGENCE, "under-load", "unary", "PASS", reason=summary)
        if not identical_fail:
            v.add(BIT_IDENTICAL, "under-load", "unary", "PASS", reason=f"{compared} greedy answers bit-identical to "
                  f"alone, {with_logprobs} of them with their log probabilities")
    return {"compared": compared, "diverged": diverged, "rate": rate, "with_logprobs": with_logprobs,
            "keys": dict(per_key.most_common(10))}


def fold_load(spec: Any, records: list[dict[str, Any]], items: dict[str, Any], alone: dict[str, dict[str, Any]],
              s: Settings, idle: Idle, reference_for: Callable[[str], Any]) -> tuple[list[RuleResult], dict[str, Any]]:
    """Every rule's verdict over the load (rules the load did not reach: SKIPPED), and the
    greedy comparison's figures."""
    v = Verdicts(spec)
    charged(v, records, items, s.batch_invariant)
    lost_and_5xx(v, records, alone, s)
    retry_after(v, records, s)
    disconnects(v, records, idle)
    divergence = greedy(v, records, alone, s, reference_for)
    if not s.batch_invariant:
        v.vectors.pop(BIT_IDENTICAL, None)
        v.reasons[BIT_IDENTICAL] = "the target was not declared batch-invariant (--batch-invariant)"
    results = []
    for rule in spec.rules:
        vrs = v.vectors.get(rule.id)
        if vrs:
            results.append(RuleResult(rule, fold(rule, vrs), vrs, v.reasons.get(rule.id, "")))
        else:
            results.append(RuleResult(rule, "SKIPPED", reason=v.reasons.get(rule.id, "not reached by this load")))
    return results, divergence
