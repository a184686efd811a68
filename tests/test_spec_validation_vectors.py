"""Every vector whose outcome the request validators decide, run against the validators
compiled from spec/ (the server runs the same validators; its own tests add transport,
generation and envelope). Test ids are `<rule id>[<vector name>]`."""
from __future__ import annotations

import pytest

from colibri.spec import RequestValidator, load_spec
from colibri.spec.vectors import DEFAULT_SETTINGS, request_for

#: Error codes produced by the compiled checks; others come from transport, engine or scheduler.
VALIDATION_CODES = {"missing_required_parameter", "invalid_type", "invalid_value", "unsupported_parameter",
                    "unsupported_value", "unsupported_role", "unsupported_content_type", "model_not_found"}
#: Server settings the validators themselves read.
VALIDATOR_SETTINGS = {"family", "continue_assistant", "kv_slots", "model_id"}


def _expect(v) -> dict:
    """The vector's expectations under this project's (strict) contract, which the validator holds."""
    return {**v.expect, **(v.expect.get("strict") or {})}


def _decided_by_validation(spec, v) -> bool:
    if request_for(spec, v) is None or v.path or v.headers:
        return False
    if set(v.server) - VALIDATOR_SETTINGS:
        return False
    status = v.expect["status"]
    if status >= 400:
        return _expect(v).get("code") in VALIDATION_CODES
    return not v.expect.get("checks") and not v.expect.get("json") and not v.expect.get("absent")


_SPEC = load_spec()
VECTORS = [v for v in _SPEC.vectors() if _decided_by_validation(_SPEC, v)]


@pytest.mark.parametrize("vector", VECTORS, ids=[v.id for v in VECTORS])
def test_vector(spec, vector):
    settings = dict(DEFAULT_SETTINGS, **vector.server)
    failure = RequestValidator(spec, vector.endpoint, settings["family"], settings).first_failure(
        request_for(spec, vector))
    if vector.expect["status"] < 400:
        assert failure is None, f"refused: {failure}"
    else:
        assert failure is not None, "accepted, expected a refusal"
        err = spec.errors[failure.code]
        expect = _expect(vector)
        assert (err.status, failure.code) == (expect["status"], expect["code"])
        if "param" in expect:
            assert failure.param == expect["param"]


def test_enough_vectors_are_decided_here():
    # A guard against the filter above silently selecting nothing.
    assert len(VECTORS) > 300
    assert {v.rule_id for v in VECTORS} >= {"req.temperature.range", "stop.shape", "cmpl.logprobs.integer",
                                              "tool_choice.shape", "cont.refuse.tools", "req.unknown-field.refused"}
