"""One test per selected rule (see conftest.py for the options)."""
from __future__ import annotations

import pytest

from .suite import run_rule


def test_rule(rule, conform_env):
    spec, sel, target_for, release = conform_env
    rr = run_rule(spec, rule, target_for, sel, [10**6], release)
    if rr.outcome in ("SKIPPED", "INCONCLUSIVE", "UNSUPPORTED"):
        pytest.skip(f"{rr.outcome}: " + "; ".join(v.result.reason for v in rr.vectors if v.result.reason)[:300])
    bad = [v for v in rr.vectors if v.result.outcome not in ("PASS", "SKIPPED", "INCONCLUSIVE", "UNSUPPORTED")]
    assert rr.outcome == "PASS", "\n".join(
        f"{v.vector.name} [{v.mode}] {v.result.outcome}: {v.result.failure or v.result.reason}" for v in bad)
