"""The generated-request phases: quiet on the reference server, loud on a broken envelope."""
from __future__ import annotations

import pytest

from colibri.spec import load_spec
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
    findings = property_phase(SPEC, pool.target({}), 40)
    assert [f.to_dict() for f in findings] == []


def test_both_phases_catch_a_flat_error_envelope(pool):
    wrap, _ = MUTANTS["flat-error-envelope"]
    broken = ServerPool(wrap=wrap)
    target = broken.target({})
    st_rules = {f.rule_id for f in schemathesis_phase(target.client.app, 15)}
    prop_rules = {f.rule_id for f in property_phase(SPEC, target, 40)}
    broken.close()
    assert "err.envelope.openai" in st_rules
    assert "err.envelope.openai" in prop_rules


def test_property_phase_sends_the_served_model_and_gets_answers(pool):
    """The generated requests name the target's model ("@model" expanded), so valid ones are
    answered: a phase whose every request is refused for the model would test nothing."""
    target = pool.target({})
    statuses = []
    send = target.send

    def counting(*a, **k):
        ex = send(*a, **k)
        statuses.append(ex.status)
        return ex

    target.send = counting
    try:
        property_phase(SPEC, target, 30)
    finally:
        del target.send
    assert statuses.count(200) >= 10 and statuses.count(400) >= 10, statuses


def test_property_phase_predicts_refusals_without_the_servers_validator(pool):
    """A server that ignores a field the tables refuse is caught by the prediction made from
    the mutation itself (the check and the path), not by asking the server's own validator."""
    wrap, _ = MUTANTS["n-ignored"]
    broken = ServerPool(wrap=wrap)
    findings = property_phase(SPEC, broken.target({}), 250)
    broken.close()
    predicted = [f for f in findings if f.source == "property:predicted_refusal"]
    assert {f.rule_id for f in predicted} == {"req.n.one"}, [f.to_dict() for f in findings]
