"""`colibri spec diff REV`: what changed in spec/ (and schemas/) since a git revision, with
the changes that break clients or servers flagged BREAKING.

Breaking means: a rule or error code removed; a MUST loosened or a rule tightened to MUST;
a request the old spec accepted that the new validators refuse; a vector whose expected
status, code or param changed; a response property removed or retyped; a new required
request property; a family capability switched off.
"""
from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import Context
from .loader import Spec, build, read_files
from .vectors import attach_generated, context_for, request_for


@dataclass
class Change:
    kind: str  # added | removed | changed | BREAKING
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:9} {self.subject}: {self.detail}"


def load_at_revision(rev: str, repo: Path, tmp: Path) -> Spec | None:
    """Extract spec/ and schemas/ at `rev` with git archive; None if that revision has no spec/."""
    proc = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev, "spec", "schemas"],
                          capture_output=True)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace")
        if "did not match any files" in err or "pathspec" in err:
            return None
        raise RuntimeError(f"git archive {rev} failed: {err.strip()}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tf:
        tf.extractall(tmp, filter="data")
    if not (tmp / "spec").is_dir():
        return None
    docs, problems = read_files(tmp / "spec", meta_schema=tmp / "schemas" / "spec.schema.json")
    spec = build(tmp / "spec", docs, problems)
    attach_generated(spec, schemas_root=tmp / "schemas")
    return spec


def _refused_by(spec: Spec, endpoint: str, body: dict[str, Any], ctx: Context):
    for c in spec.checks_for(endpoint):
        f = c.run(body, ctx, {})
        if f is not None:
            return f
    return None


def diff_specs(old: Spec | None, new: Spec, old_schemas: dict[str, Any] | None = None,
               new_schemas: dict[str, Any] | None = None) -> list[Change]:
    out: list[Change] = []
    if old is None:
        return [Change("added", r.id, "new rule (no spec at the base revision)") for r in new.rules]
    old_rules, new_rules = old.by_id, new.by_id
    for rid in old_rules.keys() - new_rules.keys():
        out.append(Change("BREAKING", rid, "rule removed (ids are never reused; deprecate instead)"))
    for rid in new_rules.keys() - old_rules.keys():
        out.append(Change("added", rid, f"new {new_rules[rid].level} rule"))
    for rid in sorted(old_rules.keys() & new_rules.keys()):
        a, b = old_rules[rid], new_rules[rid]
        if a.level != b.level:
            kind = "BREAKING" if "MUST" in (a.level, b.level) else "changed"
            out.append(Change(kind, rid, f"level {a.level} -> {b.level}"))
        for fieldname in ("title", "body", "profiles", "endpoints", "modes", "kind", "checks"):
            if a.raw.get(fieldname) != b.raw.get(fieldname):
                out.append(Change("changed", rid, f"{fieldname} changed"))
        av = {v.name: v for v in a.vectors if not v.generated}
        bv = {v.name: v for v in b.vectors if not v.generated}
        for name in sorted(av.keys() & bv.keys()):
            ea, eb = av[name].expect, bv[name].expect
            for k in ("status", "code", "param"):
                if ea.get(k) != eb.get(k):
                    out.append(Change("BREAKING", f"{rid}[{name}]", f"expected {k} {ea.get(k)!r} -> {eb.get(k)!r}"))
    # A request the old spec expected to succeed must not be refused by the new validators.
    for v in old.vectors():
        if v.expect.get("status", 0) >= 400 or v.raw_body is not None:
            continue
        body = request_for(old, v)
        if body is None:
            continue
        ctx = context_for(new, v.server)
        f = _refused_by(new, v.endpoint, body, ctx)
        if f is not None:
            out.append(Change("BREAKING", v.id, f"previously accepted request now refused by {f.rule_id} "
                                                f"({f.code} on {f.param})"))
    for code in old.errors.keys() - new.errors.keys():
        out.append(Change("BREAKING", f"error {code}", "error code removed"))
    for code in old.errors.keys() & new.errors.keys():
        was, now = old.errors[code], new.errors[code]
        if (was.status, was.type, was.anthropic_type) != (now.status, now.type, now.anthropic_type):
            out.append(Change("BREAKING", f"error {code}", f"{was.status}/{was.type} -> {now.status}/{now.type}"))
    for fid in old.families.keys() - new.families.keys():
        out.append(Change("BREAKING", f"family {fid}", "family removed"))
    for fid in old.families.keys() & new.families.keys():
        ra, rb = old.families[fid].row, new.families[fid].row
        for cap in ("tools", "continuation", "logprobs", "strict_tool_calls"):
            if ra.get(cap) and not rb.get(cap):
                out.append(Change("BREAKING", f"family {fid}", f"capability {cap} switched off"))
        if ra != rb and not any(c.subject == f"family {fid}" for c in out):
            out.append(Change("changed", f"family {fid}", "row changed"))
    if old_schemas is not None and new_schemas is not None:
        out += diff_schemas(old_schemas, new_schemas)
    return out


def _props(schema: Any, where: str = "") -> dict[str, Any]:
    """Flatten properties to dotted paths -> declared type."""
    out: dict[str, Any] = {}
    if not isinstance(schema, dict):
        return out
    for k, sub in (schema.get("properties") or {}).items():
        p = f"{where}.{k}" if where else k
        out[p] = sub.get("type") or sub.get("const") or sub.get("enum") or sub.get("$ref") if isinstance(sub, dict) \
            else None
        out.update(_props(sub, p))
        if isinstance(sub, dict) and isinstance(sub.get("items"), dict):
            out.update(_props(sub["items"], p + "[]"))
    return out


def diff_schemas(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    for name in sorted(old.keys() & new.keys()):
        a, b = _props(old[name]), _props(new[name])
        response = ".response." in name or name.endswith((".chunk.json", ".event.json")) or name in ("model.json",)
        if response:
            for p in sorted(a.keys() - b.keys()):
                out.append(Change("BREAKING", f"{name}:{p}", "response property removed"))
            for p in sorted(a.keys() & b.keys()):
                if a[p] != b[p]:
                    out.append(Change("BREAKING", f"{name}:{p}", f"response property type {a[p]!r} -> {b[p]!r}"))
        if name.endswith(".request.json"):
            newly = set(new[name].get("required", [])) - set(old[name].get("required", []))
            for p in sorted(newly):
                out.append(Change("BREAKING", f"{name}:{p}", "request property became required"))
    for name in sorted(old.keys() - new.keys()):
        out.append(Change("BREAKING", name, "schema removed"))
    return out


def diff_against(rev: str, new: Spec, repo: Path, schemas_root: Path) -> list[Change]:
    from ..schemas import all_schemas

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        old = load_at_revision(rev, repo, tmp)
        old_schemas = all_schemas(tmp / "schemas") if old is not None else None
        return diff_specs(old, new, old_schemas, all_schemas(schemas_root))
