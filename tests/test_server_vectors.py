"""Every spec vector against the reference server in-process (falcon's test client, the real
engine, the embedded model). Test ids are `<rule id>[<vector name>]`. Vectors whose checks
need a live server process are skipped here and covered by the live-server tests."""
from __future__ import annotations

import pytest

from colibri.spec import load_spec
from conformance.inprocess import ServerPool
from conformance.runner import run_vector

SPEC = load_spec()
CASES = [(r, v) for r in SPEC.rules for v in r.vectors]


@pytest.fixture(scope="module")
def pool():
    p = ServerPool()
    yield p
    p.close()


@pytest.mark.integration
@pytest.mark.parametrize("rule,vector", CASES, ids=[v.id for _, v in CASES])
def test_vector(pool, rule, vector):
    target = pool.target(vector.server)
    try:
        result = run_vector(SPEC, rule, vector, target)
    finally:
        pool.release(vector.server)
    if result.outcome == "SKIPPED":
        pytest.skip(result.reason)
    assert result.outcome == "PASS", f"{result.outcome}: {result.failure or result.reason}\n" + (
        str(result.exchange.to_dict())[:3000] if result.exchange else "")
