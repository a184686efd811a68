"""The generated-request phases: quiet on the reference server, loud on a broken envelope."""
from __future__ import annotations

import pytest

from colibri.spec import load_spec
from colibri.spec.vectors import DEFAULT_SETTINGS
from conformance.fuzz import property_phase, schemathesis_phase
from conformance.inprocess import ServerPool
from conformance.mutants import MUTANTS

pytestmark = pytest.mark.integration
SPEC = load_spec()


@pytest.fixture(scope="module")
def pool():
    p = ServerPool()
    yield p
    p.close()


def test_schemathesis_finds_nothing_on_the_reference_server(pool):
    assert [f.to_dict() for f in schemathesis_phase(pool.target({}).client.app, 15)] == []


def test_property_phase_finds_nothing_on_the_reference_server(pool):
    findings = property_phase(SPEC, pool.target({}), 40, settings_=dict(DEFAULT_SETTINGS))
    assert [f.to_dict() for f in findings] == []


def test_both_phases_catch_a_flat_error_envelope(pool):
    wrap, _ = MUTANTS["flat-error-envelope"]
    broken = ServerPool(wrap=wrap)
    target = broken.target({})
    st_rules = {f.rule_id for f in schemathesis_phase(target.client.app, 15)}
    prop_rules = {f.rule_id for f in property_phase(SPEC, target, 40, settings_=dict(DEFAULT_SETTINGS))}
    broken.close()
    assert "err.envelope.openai" in st_rules
    assert "err.envelope.openai" in prop_rules
