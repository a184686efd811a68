"""The generated-request phases after the fixed vectors (schemathesis, then the property
phase), each run on its own: a phase that cannot run is reported by name as SKIPPED (a
package it needs is missing) or ERROR (it broke off), with the reason, and the run goes on to
write its reports; a phase that ran says how many requests it generated, per operation, and
what it found."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The packages the phases import; a missing one is named in the SKIPPED line with its install.
PACKAGES = {"hypothesis": "hypothesis", "schemathesis": "schemathesis", "hypothesis_jsonschema": "hypothesis-jsonschema"}


@dataclass
class PhaseReport:
    name: str
    outcome: str = "PASS"  # PASS (ran, found nothing) | FAIL (findings) | SKIPPED | ERROR
    cases: Counter[str] = field(default_factory=Counter)
    findings: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"outcome": self.outcome, "cases": sum(self.cases.values()),
                             "per_operation": dict(self.cases), "findings": len(self.findings),
                             "rules": sorted({f.rule_id for f in self.findings}), "seconds": round(self.seconds, 3)}
        if self.reason:
            d["reason"] = self.reason
        return d

    def line(self) -> str:
        return phase_line(self.name, self.to_dict())


def phase_line(name: str, d: dict[str, Any]) -> str:
    """One line for the terminal and the Markdown report, from a phase's JSON entry."""
    if d["outcome"] in ("SKIPPED", "ERROR"):
        return f"{name} phase: {d['outcome']}: {d.get('reason', '')}"
    ops = ", ".join(f"{op} {n}" for op, n in d["per_operation"].items())
    found = (f"{d['findings']} finding(s) against {', '.join(d['rules'])}" if d["findings"] else "no findings")
    return f"{name} phase: {d['cases']} generated requests ({ops or 'none'}), {found} ({d['seconds']:.1f} s)"


def run_phase(name: str, body: Callable[[Counter[str]], list[Any]]) -> PhaseReport:
    """Run one phase; never raise. `body(cases)` returns its findings and counts its requests."""
    rep = PhaseReport(name)
    t0 = time.monotonic()
    try:
        rep.findings = body(rep.cases)
        rep.outcome = "FAIL" if rep.findings else "PASS"
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in PACKAGES:
            rep.outcome, rep.reason = "ERROR", f"{type(e).__name__}: {e}"
        else:
            rep.outcome = "SKIPPED"
            rep.reason = (f"needs the Python package {PACKAGES[top]}, which is not installed "
                          f"(pip install {PACKAGES[top]})")
    except Exception as e:  # noqa: BLE001 - the fixed vectors' verdicts still stand and are reported
        rep.outcome, rep.reason = "ERROR", f"{type(e).__name__}: {e}"[:500]
    rep.seconds = time.monotonic() - t0
    return rep


def generated_phases(spec: Any, sel: Any, examples: int, *, url: str | None = None, target: Any = None,
                     app: Any = None, headers: dict[str, str] | None = None) -> list[PhaseReport]:
    """schemathesis against `url` (remote) or `app` (in-process), then the property phase against
    `target`; each reported on its own."""
    def schemathesis(cases: Counter[str]) -> list[Any]:
        from .fuzz import schemathesis_phase

        return schemathesis_phase(url if url is not None else app, examples, headers=headers, cases=cases, spec=spec)

    def properties(cases: Counter[str]) -> list[Any]:
        from .fuzz import property_phase

        return property_phase(spec, target, examples, strict=sel.strict_contract, profiles=sel.profiles, cases=cases)

    return [run_phase("schemathesis", schemathesis), run_phase("property", properties)]
