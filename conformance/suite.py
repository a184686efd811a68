"""Selecting rules, running their vectors (in both modes where the rule has both, trials for
behaviour rules), and folding vector results into one outcome per rule."""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from colibri.spec.model import Vector

from .runner import Result, official_skip, run_vector

PROFILES_ALL = ("openai", "strict", "anthropic", "logprobs", "tools", "reasoning", "streaming", "completions",
                "operations", "continuation", "extensions", "systemone", "responses")
#: The official contracts: what a run against a URL judges by unless --profile says otherwise.
REMOTE_DEFAULT = ("openai", "anthropic", "systemone", "responses")
#: Profiles whose rules a subcommand runs (they need more than one server): never selectable here.
SUBCOMMAND_PROFILES = {"differential": "colibri-conform differential", "load": "colibri-conform load",
                       "batch-invariant": "colibri-conform load --batch-invariant"}
OUTCOMES = ("PASS", "FAIL", "NON-STRICT", "UNSUPPORTED", "INCONCLUSIVE", "SKIPPED", "ERROR")
#: Codes that mean "this server cleanly does not offer that" rather than "this server is wrong".
UNSUPPORTED_CODES = {"unsupported_parameter", "unsupported_value", "unsupported_content_type", "unsupported_role"}


@dataclass
class Selection:
    profiles: list[str]
    strict: bool = False  # also SHOULD rules
    prefixes: list[str] = field(default_factory=list)
    remote: bool = False
    api_key: bool = False  # the remote target's key is known (--api-key): auth vectors can run

    @property
    def strict_contract(self) -> bool:
        """Vectors are judged by this project's stricter contract (the `strict` profile is
        selected), not only by the official APIs' (`openai`, `anthropic`)."""
        return "strict" in self.profiles


def skip_reason(rule: Any, sel: Selection) -> str | None:
    if sel.prefixes and not any(rule.id == p or rule.id.startswith(p.rstrip(".") + ".") for p in sel.prefixes):
        return "not selected by --rule"
    if set(rule.profiles) <= SUBCOMMAND_PROFILES.keys():
        return f"run by `{SUBCOMMAND_PROFILES[rule.profiles[0]]}`, not by a rule run"
    if not set(rule.profiles) & set(sel.profiles):
        return f"profiles {rule.profiles} not selected ({', '.join(sel.profiles)})"
    if rule.level == "SHOULD" and not sel.strict:
        return "SHOULD rule: run with --include-should"
    if rule.level in ("MAY", "INFO") and not sel.strict and not rule.vectors:
        return "informational"
    return None


def vector_skip(vector: Vector, remote: bool, api_key: bool = False) -> str | None:
    if remote and vector.server:
        if set(vector.server) == {"api_key"}:  # a server's own key stands in for the vector's
            return None if api_key else "needs the target's key: run with --api-key"
        return f"needs server settings {sorted(vector.server)} that only an in-process run can make"
    return None


def in_process_only(rule: Any, sel: Selection) -> str | None:
    """Why a selected rule cannot run against a URL at all (every vector needs the in-process
    server's settings or a live process of its own), or None."""
    if not sel.remote or not rule.vectors:
        return None
    from .checks import LIVE_ONLY, live_only_reason

    reasons = set()
    for v in rule.vectors:
        why = vector_skip(v, True, sel.api_key)
        live = set(v.expect.get("checks", [])) & LIVE_ONLY
        if why is None and not live:
            return None
        reasons.add(why or live_only_reason(live))
    return "; ".join(sorted(reasons))


def variants(rule: Any, vector: Vector) -> list[tuple[str, Vector]]:
    """The vector as written, plus its stream twin when the rule runs in both modes and the
    expectations do not depend on the JSON body (errors before commit are such a case)."""
    req = vector.request or {}
    mode = "stream" if req.get("stream") else "unary"
    out = [(mode, vector)]
    can_stream = vector.endpoint in ("chat", "completions", "messages", "responses") and vector.method == "POST"
    # A rule whose checks depend on `stream` itself would change meaning in the twin.
    about_stream = any((c.get("requires") or c.get("conflicts") or {}).get("field") == "stream" for c in rule.checks)
    can_stream = can_stream and not about_stream
    if (mode == "unary" and "stream" in rule.modes and "unary" in rule.modes and can_stream
            and vector.raw_body is None and not vector.expect.get("json") and not vector.expect.get("absent")
            and not vector.expect.get("checks") and not vector.replace):
        twin = copy.copy(vector)
        twin.request = dict(req, stream=True)
        twin.name = vector.name + "~stream"
        out.append(("stream", twin))
    return out


@dataclass
class VectorResult:
    vector: Vector
    mode: str
    result: Result


@dataclass
class RuleResult:
    rule: Any
    outcome: str
    vectors: list[VectorResult] = field(default_factory=list)
    reason: str = ""


def fold(rule: Any, results: list[VectorResult]) -> str:
    outs = [r.result.outcome for r in results]
    if not outs:
        return "SKIPPED"
    # A server's FAIL says more than the harness's ERROR on another vector of the same rule.
    for o in ("FAIL", "ERROR", "NON-STRICT", "UNSUPPORTED", "INCONCLUSIVE"):
        if o in outs:
            return o
    return "PASS" if "PASS" in outs else "SKIPPED"


#: Profiles that name an optional capability: a clean refusal of a request using one means the
#: server does not offer it (vLLM refuses tools unless started with a tool parser).
CAPABILITIES = {"tools", "reasoning", "logprobs", "continuation"}


def _unsupported(res: Result, vector: Vector, rule: Any = None) -> bool:
    """A valid request refused cleanly: a 4xx in a well-formed envelope whose code says
    "unsupported", or any such refusal of a request that uses an optional capability."""
    ex = res.exchange
    if res.outcome != "FAIL" or ex is None or vector.expect["status"] >= 400 or not 400 <= ex.status < 500:
        return False
    try:
        doc = ex.json()
        err = doc.get("error") or {}
    except (ValueError, AttributeError):
        return False
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return False
    return err.get("code") in UNSUPPORTED_CODES or bool(rule is not None and CAPABILITIES & set(rule.profiles))


def run_rule(spec: Any, rule: Any, target_for: Callable[[Vector], Any], sel: Selection,
             budget: list[int], release: Callable[[Vector], None] | None = None,
             gate: Callable[[Vector, str], Result | None] | None = None) -> RuleResult:
    """Run a rule's vectors. `gate` may answer a vector without sending it (capability
    discovery found its endpoint or feature not served)."""
    results: list[VectorResult] = []
    for base in rule.vectors:
        reason = vector_skip(base, sel.remote, sel.api_key) or (
            None if sel.strict_contract else official_skip(spec, rule, base, sel.profiles))
        for mode, vector in variants(rule, base):
            if reason:
                results.append(VectorResult(vector, mode, Result("SKIPPED", None, reason=reason)))
                continue
            gated = gate(vector, mode) if gate else None
            if gated is not None:
                results.append(VectorResult(vector, mode, gated))
                continue
            res = None
            for _ in range(max(1, rule.trials if rule.kind == "behaviour" else 1)):
                if budget[0] <= 0:
                    res = Result("SKIPPED", None, reason="request budget exhausted")
                    break
                budget[0] -= 1
                try:
                    res = run_vector(spec, rule, vector, target_for(vector), sel.strict_contract, sel.profiles)
                except Exception as e:  # noqa: BLE001 - run_vector reports its own faults; this is the last net
                    res = Result("ERROR", None, reason=f"harness: {type(e).__name__}: {e}")
                finally:
                    if release:
                        release(vector)
                if res.outcome != "INCONCLUSIVE":
                    break
            assert res is not None
            if _unsupported(res, vector, rule):
                res = Result("UNSUPPORTED", res.exchange, res.failure,
                             f"refused cleanly with {res.exchange.status if res.exchange else '?'}: the server does "
                             "not offer what this vector uses")
            results.append(VectorResult(vector, mode, res))
    return RuleResult(rule, fold(rule, results), results)


def run_suite(spec: Any, sel: Selection, target_for: Callable[[Vector], Any], *, concurrency: int = 1,
              budget: int = 100000, release: Callable[[Vector], None] | None = None,
              progress: Callable[[RuleResult, int, int], None] | None = None,
              gate: Callable[[Vector, str], Result | None] | None = None) -> tuple[list[RuleResult], float]:
    started = time.monotonic()
    chosen, skipped = [], []
    for r in spec.rules:
        why = skip_reason(r, sel)
        if why:
            skipped.append(RuleResult(r, "SKIPPED", reason=why))
        else:
            chosen.append(r)
    left = [budget]
    results: list[RuleResult] = []
    # Rules that need special server state run alone; the rest may overlap.
    serial = [r for r in chosen if any(v.server for v in r.vectors)]
    parallel = [r for r in chosen if r not in serial]
    done = 0
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        for rr in pool.map(lambda r: run_rule(spec, r, target_for, sel, left, release, gate), parallel):
            results.append(rr)
            done += 1
            if progress:
                progress(rr, done, len(chosen))
    for r in serial:
        rr = run_rule(spec, r, target_for, sel, left, release, gate)
        results.append(rr)
        done += 1
        if progress:
            progress(rr, done, len(chosen))
    order = {r.id: i for i, r in enumerate(spec.rules)}
    all_results = sorted(results + skipped, key=lambda x: order[x.rule.id])
    fold_invariants(all_results)
    return all_results, time.monotonic() - started


#: Evidence kept per (rule, invariant): enough to reproduce, not one per response.
INVARIANT_EXAMPLES = 3


def _request_key(ex: Any) -> tuple[str, str, bytes | None]:
    return ex.method, ex.path, ex.request_body


def fold_invariants(results: list[RuleResult]) -> None:
    """Failures of the always-on invariants count against the rule that states the invariant
    (when that rule was selected), as extra vectors named after the response that showed them."""
    by_id = {rr.rule.id: rr for rr in results if rr.outcome != "SKIPPED" or rr.vectors}
    # A rule that borrows another rule's request as its own vector has judged that exchange
    # already: the same request is charged to it once, not again as a borrowed breach.
    own = {rr.rule.id: {_request_key(vr.result.exchange) for vr in rr.vectors
                        if vr.result.exchange is not None and vr.result.outcome in ("FAIL", "NON-STRICT")}
           for rr in by_id.values()}
    kept: dict[tuple[str, str], int] = {}
    for rr in list(results):
        for vr in rr.vectors:
            for owner_id, failure in vr.result.invariant_failures:
                owner = by_id.get(owner_id)
                key = (owner_id, failure.check)
                if owner is None or kept.get(key, 0) >= INVARIANT_EXAMPLES:
                    continue
                if vr.result.exchange is not None and _request_key(vr.result.exchange) in own[owner_id]:
                    continue
                kept[key] = kept.get(key, 0) + 1
                vec = copy.copy(vr.vector)
                vec.name = f"{failure.check}@{vr.vector.rule_id}[{vr.vector.name}]"
                outcome = "FAIL" if owner.rule.level == "MUST" else "NON-STRICT"
                owner.vectors.append(VectorResult(vec, vr.mode, Result(outcome, vr.result.exchange, failure)))
    for rr in by_id.values():
        if rr.vectors:
            rr.outcome = fold(rr.rule, rr.vectors)


def fold_findings(results: list[RuleResult], findings: list[Any]) -> None:
    """Generated-request findings count against the rule they break (a FAIL with evidence)."""
    from .checks import CheckFailure

    by_id = {rr.rule.id: rr for rr in results}
    for f in findings:
        rr = by_id.get(f.rule_id)
        if rr is None:
            continue
        vec = Vector(rule_id=f.rule_id, name=f"fuzz-{f.source.replace(':', '-')}", endpoint="any", expect={"status": 0})
        failure = CheckFailure(f.source, "the rule's promise", f"{f.operation}: {f.message} (request {f.request})")
        rr.vectors.append(VectorResult(vec, "unary", Result("FAIL" if rr.rule.level == "MUST" else "NON-STRICT",
                                                           None, failure)))
        rr.outcome = fold(rr.rule, rr.vectors)
