"""`colibri spec lint`: everything that makes spec/ trustworthy as data, reported with file
and line (the JSON-Schema-Test-Suite `check` command is the model)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..schemas import validator
from .loader import Problem, Spec, build, read_files
from .vectors import SERVER_KEYS, attach_generated, request_for


def lint(root: Path) -> tuple[Spec | None, list[Problem]]:
    docs, problems = read_files(root)
    if not docs:
        return None, problems
    spec = build(root, docs, problems)
    # A boundary sample its own check judges otherwise than the sampler says is reported here
    # instead of being dropped from the generated vectors.
    problems += [Problem(r.file, r.line, f"{r.id}: {message}") for r, message in attach_generated(spec)]
    problems += _cross_references(spec)
    problems += _vector_schemas(spec)
    return spec, problems


def _cross_references(spec: Spec) -> list[Problem]:
    out: list[Problem] = []
    ids = Counter(r.id for r in spec.rules)
    for r in spec.rules:
        def at(line: int | None, msg: str, r=r) -> None:
            out.append(Problem(r.file, line or r.line, f"{r.id}: {msg}"))

        if ids[r.id] > 1:
            at(r.line, "duplicate rule id")
        if r.title.endswith("."):
            at(r.line, "title ends with a period")
        for f in r.families or []:
            if f not in spec.families:
                at(r.line, f"unknown family {f!r}")
        for c in r.checks:
            if c.get("error") not in spec.errors:
                at(None, f"check on {c.get('field')!r} names error {c.get('error')!r}, which spec/errors.yaml lacks")
        names = Counter(v.name for v in r.vectors)
        for v in r.vectors:
            if names[v.name] > 1:
                at(v.line, f"duplicate vector name {v.name!r}")
            if v.endpoint not in spec.endpoints:
                at(v.line, f"vector {v.name!r} names unknown endpoint {v.endpoint!r}")
            code = v.expect.get("code")
            if code is not None:
                err = spec.errors.get(code)
                if err is None:
                    at(v.line, f"vector {v.name!r} expects error {code!r}, which spec/errors.yaml lacks")
                elif err.status != v.expect["status"]:
                    at(v.line, f"vector {v.name!r} expects status {v.expect['status']} but {code} is {err.status}")
                elif "type" in v.expect and v.expect["type"] not in (err.type, err.anthropic_type):
                    at(v.line, f"vector {v.name!r} expects type {v.expect['type']!r} but {code} is {err.type}")
            for chk in v.expect.get("checks", []):
                if chk not in spec.named_checks:
                    at(v.line, f"vector {v.name!r} names check {chk!r}, which spec/checks.yaml lacks")
            for key in v.server:
                if key not in SERVER_KEYS:
                    at(v.line, f"vector {v.name!r} sets unknown server setting {key!r}")
            fam = v.server.get("family")
            if fam is not None and fam not in spec.families:
                at(v.line, f"vector {v.name!r} names unknown family {fam!r}")
        if r.level != "INFO" and not r.vectors:
            at(r.line, "has no vector (explicit or generated from its checks); every non-INFO rule needs one")
    return out


def _vector_schemas(spec: Spec) -> list[Problem]:
    """A vector that does not mean to be invalid must satisfy its endpoint's request schema,
    and one marked invalid must not (otherwise the mark is wrong)."""
    out: list[Problem] = []
    validators: dict[str, Any] = {}
    for r in spec.rules:
        for v in r.vectors:
            body = request_for(spec, v)
            ep = spec.endpoints.get(v.endpoint)
            if body is None or ep is None or not ep.schema or v.path:
                continue
            if ep.schema not in validators:
                validators[ep.schema] = validator(ep.schema)
            errors = list(validators[ep.schema].iter_errors(body))
            where = "generated " if v.generated else ""
            if errors and not v.invalid:
                first = errors[0]
                loc = "/".join(str(p) for p in first.absolute_path) or "(body)"
                out.append(Problem(r.file, v.line or r.line,
                                   f"{r.id}: {where}vector {v.name!r} breaks {ep.schema} at {loc}: {first.message} "
                                   "(mark it invalid: true if that is the point)"))
            if not errors and v.invalid:
                out.append(Problem(r.file, v.line or r.line,
                                   f"{r.id}: {where}vector {v.name!r} is marked invalid but satisfies {ep.schema}"))
    return out
