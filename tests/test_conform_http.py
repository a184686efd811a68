"""colibri-conform over real HTTP against a live `colibri serve`: every profile, SHOULD rules
included, the auth rules through --api-key. The reference server must pass all of it."""
from __future__ import annotations

import json

import httpx
import pytest
from live_server import live_server

from conformance.cli import main
from conformance.report import request_from_settings
from conformance.suite import PROFILES_ALL

pytestmark = pytest.mark.integration


def test_the_reference_server_over_http_passes_every_rule_it_can_run(tmp_path):
    with live_server("--api-key", "k-123") as base:
        args = ["-q", "--base-url", base + "/v1", "--api-key", "k-123", "--include-should", "--json", str(tmp_path / "r.json")]
        code = main(args + [x for p in PROFILES_ALL for x in ("--profile", p)])
        doc = json.loads((tmp_path / "r.json").read_text())
        # The client settings derived from the run work: a request built from them succeeds.
        body = request_from_settings(doc["compat"], doc["model"])
        r = httpx.post(base + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer k-123"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
        assert body["max_completion_tokens"] == 16 and body["messages"][0]["role"] == "developer"
    bad = {r["id"]: r["outcome"] for r in doc["rules"] if r["outcome"] not in ("PASS", "SKIPPED")}
    assert code == 0 and not bad, bad
    assert doc["contract"] == "strict" and doc["model"] == "colibri-tiny"
    assert all(f["state"] == "served" for f in doc["discovery"].values()), doc["discovery"]
    by_id = {r["id"]: r for r in doc["rules"]}
    # Run remotely now: the auth rules (the target's key stands in), the early 413, chunked bodies.
    for rid in ("ops.auth.required", "msgs.auth.x-api-key", "body.size.limit", "body.chunked.accepted",
                "ops.static.no-traversal"):
        assert by_id[rid]["outcome"] == "PASS", rid
    # What cannot run against a URL says why.
    assert "only an in-process run" in by_id["ops.queue.full"]["vectors"][0]["reason"]
