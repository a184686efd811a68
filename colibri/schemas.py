"""The wire schemas in schemas/: a registry for $ref resolution, validators, and the OpenAPI
3.1 document assembled from them."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from .paths import data_dir

BASE = "https://colibri.invalid/schemas/"


@lru_cache(maxsize=4)
def _load(root: str) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(Path(root).glob("*.json")) if p.name != "openapi.json"}


def all_schemas(root: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every schema file by name (the generated openapi.json excluded)."""
    return _load(str(root or data_dir("schemas")))


@lru_cache(maxsize=4)
def _registry(root: str) -> Registry:
    resources = [(BASE + name, Resource.from_contents(s)) for name, s in _load(root).items()]
    return Registry().with_resources(resources)


def validator(name: str, root: Path | None = None) -> jsonschema.Draft202012Validator:
    """A validator for one schema file, resolving its $refs among the other files."""
    r = str(root or data_dir("schemas"))
    return jsonschema.Draft202012Validator(_load(r)[name], registry=_registry(r))


def missing_descriptions(schema: Any, where: str = "") -> list[str]:
    """Paths of properties that have no description (every property must say what it is)."""
    out: list[str] = []
    if isinstance(schema, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if isinstance(sub, dict) and "description" not in sub and "$ref" not in sub:
                out.append(f"{where}/properties/{key}")
        for key, sub in schema.items():
            if key in ("properties", "$defs", "items", "anyOf", "oneOf", "allOf", "additionalProperties"):
                if isinstance(sub, dict):
                    for k2, v2 in sub.items():
                        out += missing_descriptions(v2, f"{where}/{key}/{k2}") if key in ("properties", "$defs") \
                            else []
                    if key in ("items", "additionalProperties"):
                        out += missing_descriptions(sub, f"{where}/{key}")
                elif isinstance(sub, list):
                    for i, v in enumerate(sub):
                        out += missing_descriptions(v, f"{where}/{key}/{i}")
    return out


def openapi(spec: Any, root: Path | None = None) -> dict[str, Any]:
    """OpenAPI 3.1 built from the endpoint table and the schema files; components hold each
    schema under its file stem, with $refs rewritten to component references."""
    schemas = all_schemas(root)

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str):
                    file, _, frag = v.partition("#")
                    target = file[:-5].replace(".", "_") if file else None
                    if frag.startswith("/$defs/"):
                        out[k] = f"#/components/schemas/{target or 'common'}__{frag[7:]}" if target else v
                    else:
                        out[k] = f"#/components/schemas/{target}"
                elif k in ("$id", "$schema"):
                    continue
                else:
                    out[k] = rewrite(v)
            return out
        if isinstance(node, list):
            return [rewrite(x) for x in node]
        return node

    components: dict[str, Any] = {}
    for name, s in schemas.items():
        if name in ("spec.schema.json", "conform-report.json"):  # not wire objects of the server
            continue
        stem = name[:-5].replace(".", "_")
        body = rewrite({k: v for k, v in s.items() if k != "$defs"})
        components[stem] = body
        for dname, d in (s.get("$defs") or {}).items():
            components[f"{stem}__{dname}"] = rewrite(d)
    paths: dict[str, Any] = {}
    for ep in spec.endpoints.values():
        if ep.name in ("any",):
            continue
        op: dict[str, Any] = {"summary": ep.description, "operationId": ep.name, "responses": {}}
        if ep.schema:
            op["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{ep.schema[:-5].replace('.', '_')}"}}}}
        ok: dict[str, Any] = {"description": "Success"}
        if ep.response_schema:
            ok["content"] = {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{ep.response_schema[:-5].replace('.', '_')}"}}}
        op["responses"]["200"] = ok
        err = "error_anthropic" if ep.envelope == "anthropic" else "error_openai"
        if ep.envelope != "none":
            op["responses"]["default"] = {"description": "Error", "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{err}"}}}}
        params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in re.findall(r"\{(\w+)\}", ep.path)]
        if params:
            op["parameters"] = params
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "colibri reference server", "version": "0.1.0",
                 "description": "OpenAI- and Anthropic-compatible API, as specified by spec/."},
        "paths": paths,
        "components": {"schemas": components},
    }
