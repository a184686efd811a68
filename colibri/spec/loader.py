"""Load spec/ into a `Spec`: validate every file against the meta-schema, compile checks,
expand vectors. Problems are collected as `Problem`s with file and line, so the linter can
report all of them at once; `load_spec` raises on the first batch."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..paths import data_dir
from .checks import CompiledCheck, SpecError, compile_check
from .metrics import MetricsTable
from .model import Endpoint, ErrorCode, Family, Rule, Topic, Vector, error_codes
from .tables import METRICS_FILE, TABLE_FILES, load_table
from .yaml_lines import LineMap, load_with_lines


@dataclass
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line or 1}: {self.message}"


class SpecLoadError(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass
class Spec:
    root: Path
    topics: list[Topic]
    errors: dict[str, ErrorCode]
    families: dict[str, Family]
    endpoints: dict[str, Endpoint]
    named_checks: dict[str, dict[str, Any]]
    compiled: list[CompiledCheck] = field(default_factory=list)
    #: rules with an `invariant` field, in file order
    invariant_rules: list[Rule] = field(default_factory=list)
    #: the scheduler's Prometheus series and buckets (spec/metrics.yaml)
    metrics: MetricsTable | None = None

    def invariant_owner(self, check: str, endpoint: str) -> Rule | None:
        """The rule that states named check `check` as an invariant of every exchange on `endpoint`."""
        return next((r for r in self.invariant_rules if endpoint in r.invariant.get(check, ())), None)

    @cached_property
    def rules(self) -> list[Rule]:
        return [r for t in self.topics for r in t.rules]

    @cached_property
    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}

    def rule(self, rule_id: str) -> Rule:
        return self.by_id[rule_id]

    def checks_for(self, endpoint: str) -> list[CompiledCheck]:
        return [c for c in self.compiled if c.applies_to(endpoint)]

    def vectors(self) -> list[Vector]:
        return [v for r in self.rules for v in r.vectors]


def _meta_schema(path: Path | None = None) -> dict[str, Any]:
    return json.loads((path or data_dir("schemas") / "spec.schema.json").read_text())


def _line_for_error(err: jsonschema.ValidationError, data: Any, lines: LineMap) -> int | None:
    node, best = data, lines.line(data)
    for p in err.absolute_path:
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            break
        best = lines.line(node) or best
    return best


def read_files(root: Path, meta_schema: Path | None = None) -> tuple[dict[str, tuple[Any, LineMap]], list[Problem]]:
    """Parse and meta-validate every spec file; return the parsed documents and problems."""
    problems: list[Problem] = []
    docs: dict[str, tuple[Any, LineMap]] = {}
    validator = jsonschema.Draft202012Validator(_meta_schema(meta_schema))
    files = sorted(root.glob("*.yaml"))
    if not files:
        problems.append(Problem(str(root), None, "no spec files (*.yaml) found"))
    for path in files:
        rel = path.name
        try:
            data, lines = load_table(path) if rel in TABLE_FILES else load_with_lines(path)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problems.append(Problem(rel, mark.line + 1 if mark else None, f"YAML syntax error: {exc}"))
            continue
        errs = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
        for e in errs:
            where = "/".join(str(p) for p in e.absolute_path) or "(file)"
            problems.append(Problem(rel, _line_for_error(e, data, lines), f"meta-schema: at {where}: {e.message}"))
        if not errs:
            docs[rel] = (data, lines)
    return docs, problems


def _step_for(rule_raw: dict[str, Any], fieldname: str) -> float:
    for c in rule_raw.get("checks", []):
        if c.get("field") == fieldname and c.get("type") == ["integer"]:
            return 1
    return 0.01


def build(root: Path, docs: dict[str, tuple[Any, LineMap]], problems: list[Problem]) -> Spec:
    """Turn parsed documents into a Spec, adding problems for anything that does not compile."""
    tables = {name: docs.get(name, ({}, LineMap()))[0] for name in TABLE_FILES}
    errors = error_codes(tables["errors.yaml"].get("errors", []))
    families = {f["id"]: Family(f["id"], f["title"], f) for f in tables["families.yaml"].get("families", [])}
    endpoints = {e["name"]: Endpoint(e["name"], e["method"], e["path"], e["envelope"], e.get("minimal_request"),
                                     e.get("schema"), e.get("response_schema"), e["description"], e.get("contract"))
                 for e in tables["endpoints.yaml"].get("endpoints", [])}
    named = {c["name"]: c for c in tables["checks.yaml"].get("checks", [])}
    for name in TABLE_FILES:
        if name not in docs and not any(p.file == name for p in problems):
            problems.append(Problem(name, None, "required table file is missing"))
    metrics_doc = tables[METRICS_FILE]
    spec = Spec(root, [], errors, families, endpoints, named,
                metrics=MetricsTable.from_doc(metrics_doc) if "metrics" in metrics_doc else None)
    for rel, (data, lines) in docs.items():
        if "rules" not in data:
            continue
        rules: list[Rule] = []
        for raw in data["rules"]:
            rule = Rule(
                id=raw["id"], title=raw["title"], level=raw["level"], profiles=raw["profiles"], kind=raw["kind"],
                modes=raw["modes"], endpoints=raw["endpoints"], body=raw["body"], source=raw["source"],
                topic=data.get("topic", Path(rel).stem), file=rel, line=lines.line(raw), raw=raw,
                families=raw.get("families"), trials=raw.get("trials", 1), checks=raw.get("checks", []),
            )
            problems += _invariant(spec, rule, raw.get("invariant"), rel, lines)
            for c in rule.checks:
                try:
                    cc = compile_check(rule.id, c, rule.endpoints)
                    cc.raw = dict(c, _step=_step_for(raw, c["field"]))
                    spec.compiled.append(cc)
                except SpecError as e:
                    problems.append(Problem(rel, lines.line(c), str(e)))
            for v in raw.get("vectors", []):
                vec = _vector(rule, v)
                vec.line = lines.line(v)
                rule.vectors.append(vec)
            rules.append(rule)
        spec.topics.append(Topic(data.get("topic", Path(rel).stem), data.get("title", rel),
                                 data.get("description", ""), rel, rules))
    return spec


def _invariant(spec: Spec, rule: Rule, inv: dict[str, Any] | None, rel: str, lines: LineMap) -> list[Problem]:
    """Record the invariant a rule states; each (check, endpoint) has one owner, or a breach
    would be charged twice."""
    if not inv:
        return []
    out = []
    for name in inv["checks"]:
        if name not in spec.named_checks:
            out.append(Problem(rel, lines.line(inv), f"{rule.id}: invariant check {name!r} is not in checks.yaml"))
            continue
        rule.invariant[name] = list(inv.get("endpoints") or rule.endpoints)
        for ep in rule.invariant[name]:
            other = spec.invariant_owner(name, ep)
            if other is not None:
                out.append(Problem(rel, lines.line(inv), f"{rule.id}: {other.id} already owns invariant {name} on {ep}"))
    spec.invariant_rules.append(rule)
    return out


def _vector(rule: Rule, v: dict[str, Any]) -> Vector:
    endpoint = v.get("endpoint") or next((e for e in rule.endpoints if e != "any"), "chat")
    raw_body: bytes | None = None
    if "raw_body" in v:
        raw_body = v["raw_body"].encode("utf-8", "surrogatepass")
    elif "raw_body_hex" in v:
        raw_body = bytes.fromhex(v["raw_body_hex"])
    return Vector(rule_id=rule.id, name=v["name"], endpoint=endpoint, expect=v["expect"], request=v.get("request"),
                  method=v.get("method", "POST"), path=v.get("path", ""), headers=v.get("headers", {}),
                  raw_body=raw_body, server=v.get("server", {}), invalid=v.get("invalid", False),
                  replace=v.get("replace_request", False), contract=v.get("contract"))


def load_spec(root: Path | str | None = None, *, strict: bool = True) -> Spec:
    """Load and compile spec/ (default: the shipped one). With strict, any problem raises."""
    root = Path(root) if root else data_dir("spec")
    docs, problems = read_files(root)
    spec = build(root, docs, problems)
    from .vectors import attach_generated  # late import: vectors needs a built spec

    for rule, message in attach_generated(spec):
        problems.append(Problem(rule.file, rule.line, f"{rule.id}: {message}"))
    if strict and problems:
        raise SpecLoadError(problems)
    return spec
