"""Checks of the operations endpoints (spec/90-operations.yaml): the scheduler's accounting in
/health, the Prometheus series of /metrics, and the turns /profile records."""
from __future__ import annotations

import json
from typing import Any

from colibri.spec.metrics import MetricsTable

from ..exchange import Exchange
from .core import CheckContext, CheckFailure, NotApplicable, Unsupported, target_model


def scheduler_accounting(ctx: CheckContext) -> None:
    try:
        doc = ctx.exchange.json()
    except ValueError:
        raise Unsupported("the target's /health answers no JSON snapshot") from None
    s = doc.get("scheduler") if isinstance(doc, dict) else None
    if s is None:
        raise NotApplicable("the health snapshot is not shown to this caller")
    if s["active"] != 0 or s["admitted"] != s["completed"] + s["failed"] + s["cancelled"]:
        raise CheckFailure("scheduler_accounting", "active 0, admitted = completed + failed + cancelled", s)


def _metrics(ex: Exchange, table: MetricsTable) -> dict[str, Any]:
    """The families of a /metrics answer named with the metrics table's prefix
    (colibri_scheduler_*); Unsupported when the target serves no Prometheus text there
    (llama-server answers 501 unless started with --metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    if ex.status != 200:
        raise Unsupported(f"the target's /metrics answers {ex.status}")
    try:
        return {f.name: f for f in text_string_to_metric_families(ex.body.decode("utf-8"))
                if f.name.startswith(table.prefix)}
    except (ValueError, UnicodeDecodeError) as e:
        raise Unsupported(f"the target's /metrics is no Prometheus text ({e})") from None


def metrics_series(ctx: CheckContext) -> None:
    """Exactly the series, types and buckets of the spec's metrics table (spec/metrics.yaml)."""
    table = ctx.spec.metrics
    fams = _metrics(ctx.exchange, table)
    got = {n: f.type for n, f in fams.items()}
    want = table.families()
    if got != want:
        raise CheckFailure("metrics_series", want, got)
    buckets = [str(float(b)) for b in table.buckets] + ["+Inf"]
    for f in fams.values():
        for s in f.samples:
            extra = set(s.labels) - {"le"}
            if extra:
                raise CheckFailure("metrics_series", "no label but le", (s.name, s.labels))
            if s.name.endswith("_created"):
                raise CheckFailure("metrics_series", "no _created series", s.name)
        if f.type == "histogram":
            les = [s.labels["le"] for s in f.samples if s.name.endswith("_bucket")]
            if [str(float(x)) if x != "+Inf" else x for x in les] != buckets:
                raise CheckFailure("metrics_series", buckets, les)


def counters(target: Any, table: MetricsTable) -> dict[str, float]:
    ex = target.send("GET", "/metrics", None, {})
    try:
        fams = _metrics(ex, table)
    except Unsupported:
        return {}
    return {s.name: s.value for f in fams.values() for s in f.samples if s.name.endswith("_total")}


def metrics_unchanged(ctx: CheckContext) -> None:
    if not ctx.before.get("counters"):
        raise Unsupported("the target serves no colibri_scheduler_* counters to compare")
    after = counters(ctx.target, ctx.spec.metrics)
    if after != ctx.before.get("counters"):
        raise CheckFailure("metrics_unchanged", ctx.before.get("counters"), after)


def profile_turns(ctx: CheckContext) -> None:
    """Send one chat turn, read /profile: that turn is there, with the id and the counts its
    own response gave (timings are only checked for sign: they are noise)."""
    chat = ctx.spec.endpoints["chat"]
    body = {"model": target_model(ctx), "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Repeat exactly: profile me"}]}
    sent = ctx.target.send("POST", chat.path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    if sent.status != 200:
        raise NotApplicable(f"the chat turn to profile answered {sent.status}")
    usage = sent.json().get("usage") or {}
    doc = ctx.target.send("GET", ctx.spec.endpoints["profile"].path, None, {}).json()
    turns = doc.get("turns") or []
    if len(turns) > doc.get("capacity", 0):
        raise CheckFailure("profile_turns", f"at most {doc.get('capacity')} turns", len(turns))
    if not turns:
        raise CheckFailure("profile_turns", "the chat turn just sent", "no turn")
    # its own turn: found by request id (other requests may have finished since, in a run with
    # --concurrency), or the newest when the response carried no id (rule err.request-id)
    rid = sent.header("x-request-id")
    last = next((t for t in reversed(turns) if t.get("request_id") == rid), turns[-1])
    want = {"request_id": rid or last.get("request_id"), "endpoint": chat.path, "outcome": "completed",
            "prompt": usage.get("prompt_tokens"), "completion": usage.get("completion_tokens"),
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}
    got = {"request_id": last.get("request_id"), "endpoint": last.get("endpoint"), "outcome": last.get("outcome"),
           **(last.get("tokens") or {})}
    if got != want:
        raise CheckFailure("profile_turns", want, got)
    negative = {k: v for k, v in (last.get("seconds") or {}).items() if v is not None and v < 0}
    if negative:
        raise CheckFailure("profile_turns", "no negative phase time", negative)


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (scheduler_accounting, metrics_series, metrics_unchanged, profile_turns)
