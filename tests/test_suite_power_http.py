"""The suite's power over real HTTP: each injected defect of conformance/mutants.py sits in a
mutating proxy in front of a live `colibri serve`, and `colibri-conform --base-url` (every
profile, --include-should, the server's key) fails exactly the expected rules that can run against a
URL. A rule that needs the in-process server is not expected to fail here."""
from __future__ import annotations

import json

import pytest
from live_server import live_server

from colibri.spec import load_spec
from conformance.cli import main
from conformance.mutants import MUTANTS
from conformance.proxy import mutating_proxy
from conformance.suite import PROFILES_ALL, Selection, in_process_only

pytestmark = pytest.mark.integration
SPEC = load_spec()
KEY = "k-http"
REMOTE = Selection(profiles=list(PROFILES_ALL), strict=True, remote=True, api_key=True)


def failed_rules(url: str, tmp_path, name: str) -> set[str]:
    out = tmp_path / f"{name}.json"
    main(["-q", "--base-url", url, "--api-key", KEY, "--include-should", "--json", str(out),
          *[x for p in PROFILES_ALL for x in ("--profile", p)]])
    doc = json.loads(out.read_text())
    return {r["id"] for r in doc["rules"] if r["outcome"] in ("FAIL", "NON-STRICT", "ERROR")}


@pytest.fixture(scope="module")
def upstream():
    with live_server("--api-key", KEY) as base:
        yield base


def test_the_proxy_itself_changes_no_verdict(upstream, tmp_path):
    with mutating_proxy(upstream) as url:
        assert failed_rules(url, tmp_path, "clean") == set()


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_defect_fails_exactly_its_rules_over_http(upstream, tmp_path, name):
    wrap, expected = MUTANTS[name]
    remote = {rid for rid in expected if rid == "FLAT" or in_process_only(SPEC.by_id[rid], REMOTE) is None}
    if not remote:
        pytest.skip(f"every rule {name} breaks needs the in-process server: {sorted(expected)}")
    with mutating_proxy(upstream, wrap) as url:
        failed = failed_rules(url, tmp_path, name)
    if remote == {"FLAT"}:
        assert "err.envelope.openai" in failed
    else:
        assert failed == remote
