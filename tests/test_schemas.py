"""schemas/: valid 2020-12 schemas, a description on every property, and an OpenAPI document
that matches the one `colibri spec openapi` builds."""
from __future__ import annotations

import json

import jsonschema
import pytest
from openapi_spec_validator import validate

from colibri.paths import data_dir
from colibri.schemas import all_schemas, missing_descriptions, openapi

SCHEMAS = sorted(all_schemas())


@pytest.mark.parametrize("name", SCHEMAS)
def test_schema_is_valid_2020_12(name):
    jsonschema.Draft202012Validator.check_schema(all_schemas()[name])


@pytest.mark.parametrize("name", SCHEMAS)
def test_every_property_is_described(name):
    assert missing_descriptions(all_schemas()[name]) == []


def test_every_wire_object_has_a_schema():
    expected = {"chat.request.json", "chat.response.json", "chat.chunk.json", "completions.request.json",
                "completions.response.json", "messages.request.json", "messages.response.json",
                "messages.event.json", "error.openai.json", "error.anthropic.json", "models.response.json",
                "model.json", "health.response.json", "render.request.json", "render.response.json",
                "spec.schema.json"}
    assert expected <= set(SCHEMAS)


def test_openapi_is_valid_and_current(spec):
    doc = openapi(spec)
    validate(doc)
    committed = json.loads((data_dir("schemas") / "openapi.json").read_text())
    assert committed == doc, "schemas/openapi.json is stale: run `colibri spec openapi --out schemas/openapi.json`"


def test_error_envelopes_match_the_error_table(spec):
    oa = jsonschema.Draft202012Validator(all_schemas()["error.openai.json"])
    an = jsonschema.Draft202012Validator(all_schemas()["error.anthropic.json"])
    for e in spec.errors.values():
        oa.validate({"error": {"message": e.message, "type": e.type, "param": None, "code": e.code}})
        an.validate({"type": "error", "error": {"type": e.anthropic_type, "message": e.message}})
