"""The suite's own proof of power: zero FAIL and ERROR on the reference server, and against
each deliberately broken variant exactly the expected rule ids fail."""
from __future__ import annotations

import pytest

from colibri.spec import load_spec
from conformance.inprocess import ServerPool
from conformance.mutants import MUTANTS
from conformance.suite import Selection, run_suite

pytestmark = pytest.mark.integration

SPEC = load_spec()
ALL = Selection(profiles=["openai", "strict", "anthropic", "logprobs", "tools", "reasoning", "streaming",
                          "completions", "operations", "continuation", "extensions"], strict=True)


def run(wrap=None):
    pool = ServerPool(wrap=wrap, spec=SPEC)
    try:
        results, _ = run_suite(SPEC, ALL, lambda v: pool.target(v.server), release=lambda v: pool.release(v.server))
    finally:
        pool.close()
    return {rr.rule.id: rr for rr in results}


@pytest.fixture(scope="module")
def reference():
    return run()


def test_reference_server_has_no_failures(reference):
    bad = {k: (r.outcome, [str(v.result.failure or v.result.reason) for v in r.vectors if v.result.outcome != "PASS"][:2])
           for k, r in reference.items() if r.outcome in ("FAIL", "ERROR", "NON-STRICT")}
    assert bad == {}


def _openai_error_rules():
    out = set()
    for r in SPEC.rules:
        for v in r.vectors:
            if v.expect["status"] >= 400 and SPEC.endpoints[v.endpoint].envelope == "openai" and not v.path.startswith("/v1/messages"):
                out.add(r.id)
    return out


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_defect_fails_exactly_its_rules(reference, name):
    wrap, expected = MUTANTS[name]
    results = run(wrap)
    failed = {k for k, r in results.items() if r.outcome in ("FAIL", "NON-STRICT", "ERROR")}
    if expected == {"FLAT"}:
        assert "err.envelope.openai" in failed
        assert failed <= _openai_error_rules(), failed - _openai_error_rules()
    else:
        assert failed == expected
