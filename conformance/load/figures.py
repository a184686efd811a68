"""The figures a load tool reports, per endpoint and mode: requests/s, latency, time to first
token (TTFT) and inter-token latency (ITL) at p50/p90/p99 — from Locust's own statistics, which
a master merges from its workers — and output tokens/s, plus a per-second timeline of
latency and errors for the report's plots (from the records)."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

#: Locust request types: the request itself, and the two streaming timings fired beside it.
REQUEST, TTFT, ITL = "POST", "TTFT", "ITL"
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def label(endpoint: str, mode: str) -> str:
    return f"{endpoint} {mode}"


def locust_stats(stats: Any) -> dict[str, dict[str, Any]]:
    """Locust's RequestStats as plain data: "TYPE label" -> counts, rate and percentiles (ms)."""
    out = {}
    for (name, method), e in stats.entries.items():
        if not e.num_requests:
            continue
        out[f"{method} {name}"] = {
            "count": e.num_requests, "failures": e.num_failures, "rps": e.total_rps, "avg": e.avg_response_time,
            **{k: e.get_response_time_percentile(q) for k, q in PERCENTILES}}
    return out


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def _is_error(rec: dict[str, Any]) -> bool:
    return bool(rec["lost"]) or rec["status"] >= 500 or bool(rec["failures"])


def per_endpoint(stats: dict[str, dict[str, Any]], records: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """label -> requests, outcome counts, requests/s, latency/TTFT/ITL percentiles (ms), output tokens/s."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[label(r["endpoint"], r["mode"]) + (" (disconnecting)" if r["key"] == "disconnect" else "")].append(r)
    out = {}
    for name, recs in sorted(groups.items()):
        tokens = sum(r["output_tokens"] or 0 for r in recs if r["status"] == 200)
        row: dict[str, Any] = {
            "requests": len(recs), "ok": sum(r["status"] == 200 for r in recs),
            "refused": sum(r["status"] == 429 for r in recs), "errors": sum(_is_error(r) for r in recs),
            "requests_per_s": round(len(recs) / seconds, 3) if seconds else None,
            "output_tokens_per_s": round(tokens / seconds, 2) if seconds else None}
        for kind, key in ((REQUEST, "latency_ms"), (TTFT, "ttft_ms"), (ITL, "itl_ms")):
            st = stats.get(f"{kind} {name}")
            if st:
                row[key] = {k: st[k] for k, _ in PERCENTILES}
        out[name] = row
    return out


def timeline(records: list[dict[str, Any]], t0: float, bucket: float = 1.0) -> list[dict[str, Any]]:
    """Per bucket of start time: requests, 200s, 429s, errors, and latency p50/p90/max (ms)."""
    rows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        rows[int((r["started"] - t0) // bucket)].append(r)
    out = []
    for i in range(0, max(rows) + 1 if rows else 0):
        recs = rows.get(i, [])
        lat = [r["elapsed"] * 1000 for r in recs if r["status"] == 200 and not r["disconnected"]]
        out.append({"t": round(i * bucket, 3), "requests": len(recs), "ok": sum(r["status"] == 200 for r in recs),
                    "refused": sum(r["status"] == 429 for r in recs), "errors": sum(_is_error(r) for r in recs),
                    "latency_p50_ms": _round(nearest_rank(lat, 0.5)), "latency_p90_ms": _round(nearest_rank(lat, 0.9)),
                    "latency_max_ms": _round(max(lat) if lat else None)})
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
