"""Generated requests on top of the fixed vectors.

- `schemathesis_phase`: schemathesis against the target's OpenAPI document (the served
  /openapi.json, or ours when the target has none), positive and negative generation, its
  standard checks; each finding is mapped to the rule id it breaks.
- `property_phase`: hypothesis strategies built from schemas/ (valid-shaped requests) and
  from the rule tables (one field set to a value its check refuses), with invariants checked
  on every response: never a 5xx, the right envelope, a refusal naming the code the tables
  predict, a valid response schema and usage arithmetic on success.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from colibri.paths import EMBEDDED_MODEL_ID
from colibri.schemas import all_schemas, validator
from colibri.server.errors import envelope_for

from .checks import CheckContext, CheckFailure, answer, invariants
from .exchange import BodyNotJson, Exchange, model_of
from .runner import official_profile

#: schemathesis check -> the named check (spec/checks.yaml) whose promise it tests. A failure is
#: filed under the rule that owns that check on the operation's endpoint (the rule's `invariant`
#: in spec/); with no owner there, under the envelope rule of the path's envelope. Any other
#: failure (not_a_server_error, say) is a server error.
CHECK_INVARIANTS = {"status_code_conformance": "error_envelope", "content_type_conformance": "error_envelope",
                    "response_schema_conformance": "response_schema"}
SERVER_ERROR_RULE = "err.no-500-for-client-input"


def rule_for_check(spec: Any, check: str, operation: str) -> str:
    """The rule a schemathesis `check` failing on `operation` ("GET /v1/models") is filed under."""
    invariant = CHECK_INVARIANTS.get(check)
    if invariant is None:
        return SERVER_ERROR_RULE
    method, _, path = operation.partition(" ")
    endpoint = next((name for name, ep in spec.endpoints.items() if (ep.method, ep.path) == (method, path)), None)
    return invariant_rule(spec, invariant, endpoint, path)


def invariant_rule(spec: Any, invariant: str, endpoint: str | None, path: str) -> str:
    """The rule that owns named check `invariant` on `endpoint`; with no owner there, the rule
    that owns the error envelope of `path`'s envelope."""
    owner = spec.invariant_owner(invariant, endpoint) if endpoint else None
    if owner is not None:
        return str(owner.id)
    envelope = envelope_for(path)
    return next(r.id for name, ep in spec.endpoints.items()
                if ep.envelope == envelope and (r := spec.invariant_owner("error_envelope", name)) is not None)


@dataclass
class Finding:
    rule_id: str
    source: str  # "schemathesis:<check>" or "property:<invariant>"
    operation: str
    message: str
    request: str

    def to_dict(self) -> dict[str, str]:
        return self.__dict__.copy()


def _settings(examples: int) -> Any:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def schemathesis_phase(app_or_url: Any, examples: int = 25, *, headers: dict[str, str] | None = None,
                       cases: Counter[str] | None = None, spec: Any = None) -> list[Finding]:
    """`cases`, when given, counts the requests sent per operation ("POST /v1/chat/completions")."""
    import schemathesis
    from schemathesis import GenerationMode

    from colibri.spec import load_spec

    spec = spec or load_spec()

    if isinstance(app_or_url, str):
        base = app_or_url.rstrip("/").removesuffix("/v1")
        try:
            schema = schemathesis.openapi.from_url(base + "/openapi.json")
        except schemathesis.errors.SchemathesisError:  # the target serves none it can load: test it against ours
            from colibri.schemas import openapi

            schema = schemathesis.openapi.from_dict(openapi(spec))
            schema.config.update(base_url=base)
    else:
        schema = schemathesis.openapi.from_wsgi("/openapi.json", app_or_url)
    findings: list[Finding] = []
    for result in schema.get_all_operations():
        op = result.ok()  # type: ignore[union-attr]  # an operation that fails to load raises here
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz_operation(spec, op, op.as_strategy(generation_mode=mode), examples, headers or {}, findings,
                                cases if cases is not None else Counter())
            except Unsatisfiable:  # e.g. negative mode on an operation with nothing to negate
                continue
    return _dedupe(findings)


def _fuzz_operation(spec: Any, op: Any, strategy: Any, examples: int, headers: dict[str, str], findings: list[Finding],
                    cases: Counter[str]) -> None:
    label = f"{op.method.upper()} {op.path}"

    @_settings(examples)
    @given(case=strategy)
    def run(case: Any) -> None:
        case.headers = {**(case.headers or {}), "Host": "localhost", **headers}
        cases[label] += 1
        response = case.call()
        try:
            case.validate_response(response)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # schemathesis raises a (Base)ExceptionGroup of failures
            for failure in getattr(exc, "exceptions", [exc]):
                name = (getattr(failure, "checks", ()) or (type(failure).__name__,))[0]
                rule = rule_for_check(spec, name, label)
                findings.append(Finding(rule, f"schemathesis:{name}", label, str(failure)[:500],
                                        repr(case.body)[:500]))

    run()


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.rule_id, f.source, f.operation)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


@dataclass
class Predicted:
    """The refusal a mutation must get, read from the mutation itself: the check whose refused
    sample was set, the concrete path it was set at, and the error table's status for its code.
    Made without the server's validator, so a validator bug cannot hide behind its own opinion."""

    rule_id: str
    code: str
    param: str
    status: int
    strict_only: bool  # the check is this project's contract only


def _predict(spec: Any, endpoint: str, check: Any, concrete: tuple, value: Any) -> Predicted | None:
    """The refusal for `value` set at `concrete` by a sample of `check`. Another check on the same
    field that also refuses the value and comes first in the tables would answer instead; checks
    with conditions or server settings make the outcome depend on more than the value: no
    prediction then."""
    from colibri.spec.paths import Location

    rivals = [c for c in spec.checks_for(endpoint) if c.field == check.field]
    for c in rivals:
        if c.when or c.kind in ("equals_setting", "family_enum", "capability", "requires", "conflicts", "member_of"):
            if c is check:
                return None
            continue
        if c is check or not c.predicate(value, Location(concrete, value, None), {}, None):
            err = spec.errors.get(c.error)
            return Predicted(c.rule_id, c.error, ".".join(map(str, concrete)), err.status if err else 400,
                             c.raw.get("contract") == "strict")
    return None


def _invariants(spec: Any, endpoint: str, body: Any, ex: Exchange, predicted: Any,
                strict: bool = True) -> list[tuple[str, str, str]]:
    """(rule id, invariant, message) for every promise this response breaks."""
    bad: list[tuple[str, str, str]] = []
    envelope = spec.endpoints[endpoint].envelope
    if ex.status >= 500:
        return [(SERVER_ERROR_RULE, "no_5xx", f"{ex.status}: {ex.text(200)}")]
    if ex.status >= 400:
        schema = "error.anthropic.json" if envelope == "anthropic" else "error.openai.json"
        try:
            doc = ex.json()
            validator(schema).validate(doc)
        except (BodyNotJson, jsonschema.ValidationError) as e:  # the body is not JSON, or not the envelope
            rid = invariant_rule(spec, "error_envelope", endpoint, spec.endpoints[endpoint].path)
            return [(rid, "envelope", str(e)[:300])]
        if predicted is not None and ex.status != predicted.status:
            bad.append((predicted.rule_id, "predicted_refusal",
                        f"the tables refuse with {predicted.status} {predicted.code} on {predicted.param}, the "
                        f"server answered {ex.status}"))
        elif (predicted is not None and strict and envelope == "openai"
              and (doc["error"]["code"], doc["error"]["param"]) != (predicted.code, predicted.param)):
            bad.append((predicted.rule_id, "predicted_refusal",
                        f"the tables refuse with {predicted.code} on {predicted.param}, the server said "
                        f"{doc['error']['code']} on {doc['error']['param']}"))
        return bad
    if predicted is not None:
        bad.append((predicted.rule_id, "predicted_refusal", f"accepted; the tables refuse with {predicted.code} "
                                                            f"on {predicted.param}"))
    resp_schema = spec.endpoints[endpoint].response_schema
    if resp_schema and not ex.is_sse:
        errs = list(validator(resp_schema).iter_errors(ex.json()))
        if errs:
            rule = invariant_rule(spec, "response_schema", endpoint, spec.endpoints[endpoint].path)
            bad.append((rule, "response_schema", errs[0].message))
        if endpoint in ("systemone", "responses"):  # their answer invariants (conformance/checks/__init__.py)
            vector = SimpleNamespace(endpoint=endpoint, rule_id="property", expect={}, headers={})
            ctx = CheckContext(spec, vector, ex, body, None, expect={"status": ex.status})
            return bad + [(rid, f.check, str(f)[:300]) for rid, f in invariants(ctx)
                          if isinstance(f, CheckFailure)]
        doc = ex.json()
        u = doc.get("usage") or {}
        if endpoint != "messages" and u and u.get("prompt_tokens", 0) + u.get("completion_tokens", 0) != u.get("total_tokens"):
            bad.append(("gen.usage.counts", "usage_arithmetic", str(u)))
        text = answer(ex, endpoint).content
        stops = body.get("stop", body.get("stop_sequences"))
        for s in [stops] if isinstance(stops, str) else list(stops or []):
            if s and s in text:
                bad.append(("chat.stop.trimmed", "no_stop_text", f"{s!r} in {text!r}"))
        lp = (doc.get("choices") or [{}])[0].get("logprobs") if endpoint != "messages" else None
        if lp:
            joined = "".join(lp["tokens"]) if endpoint == "completions" else "".join(e["token"] for e in lp["content"])
            want = doc["choices"][0]["text"] if endpoint == "completions" else (doc["choices"][0]["message"]["content"] or "")
            if joined != want:
                bad.append(("chat.logprobs.join" if endpoint == "chat" else "cmpl.logprobs.shape", "logprob_join",
                            f"{joined!r} != {want!r}"))
    return bad


def _stream_parity(spec: Any, target: Any, endpoint: str, body: dict[str, Any], unary: Exchange) -> list[tuple[str, str, str]]:
    """At temperature 0 the same request streamed must reassemble to the unary answer, framed
    as SSE and (OpenAI) closed by [DONE]."""
    if body.get("temperature") != 0 or body.get("logprobs") or body.get("echo") or unary.status != 200 \
            or endpoint == "systemone" \
            or endpoint == "responses":  # nothing streams on the first; the second's events are its own rules
        return []
    ex = target.send("POST", spec.endpoints[endpoint].path, json.dumps(dict(body, stream=True)).encode())
    if ex.status != 200 or not ex.is_sse:
        return [("stream.equals-unary", "stream_status", f"{ex.status} {ex.header('content-type')}")]
    if endpoint != "messages" and (not ex.events() or ex.events()[-1].data != "[DONE]"):
        return [("chat.stream.done_sentinel", "done_sentinel", ex.body[-80:].decode("utf-8", "replace"))]
    u, s = answer(unary, endpoint), answer(ex, endpoint)
    if (u.content, u.reasoning, u.tool_calls, u.finish) != (s.content, s.reasoning, s.tool_calls, s.finish):
        return [("stream.equals-unary", "stream_equals_unary", f"unary {u} / stream {s}")]
    return []


_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 100), st.floats(-3, 3, allow_nan=False),
                          st.text(max_size=12))


def from_schema(schema: Any, depth: int = 0) -> Any:
    """Values shaped by a JSON Schema: the subset request schemas use (type, enum, const,
    bounds, items, properties, anyOf); anything else falls back to small JSON scalars."""
    if not isinstance(schema, dict) or depth > 3:
        return _JSON_SCALARS
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(s, depth + 1) for s in schema["anyOf"]])
    types = schema.get("type")
    if isinstance(types, list):
        return st.one_of([from_schema(dict(schema, type=t), depth + 1) for t in types])
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if types == "integer":
        return st.integers(int(lo) if lo is not None else -10, int(hi) if hi is not None else 10_000)
    if types == "number":
        return st.floats(lo if lo is not None else -10, hi if hi is not None else 10, allow_nan=False,
                         exclude_min="exclusiveMinimum" in schema)
    if types == "string":
        return st.text(max_size=20)
    if types == "boolean":
        return st.booleans()
    if types == "null":
        return st.none()
    if types == "array":
        return st.lists(from_schema(schema.get("items"), depth + 1), max_size=3)
    if types == "object":
        props = schema.get("properties") or {}
        return st.fixed_dictionaries({}, optional={k: from_schema(v, depth + 1) for k, v in props.items()})
    return _JSON_SCALARS


def request_strategy(spec: Any, endpoint: str, model: str = EMBEDDED_MODEL_ID) -> Any:
    """(request, predicted refusal or None) near the endpoint's minimal request: schema-shaped
    extra fields (no prediction), or one field of a check set to a value that check's kind
    refuses (the rule tables' own samples, with the refusal they must get)."""
    from colibri.spec.checks import KINDS
    from colibri.spec.paths import set_path
    from colibri.spec.vectors import expand_model

    base = expand_model(spec.endpoints[endpoint].minimal_request, model)
    schema = all_schemas()[spec.endpoints[endpoint].schema]
    props = {k: v for k, v in schema.get("properties", {}).items() if "$ref" not in json.dumps(v)}
    checks = [c for c in spec.checks_for(endpoint) if c.kind not in ("required", "keys", "capability", "requires",
                                                                        "conflicts", "member_of", "family_enum")]

    def mutate(i: int, choice: int) -> tuple[dict[str, Any], Predicted | None]:
        c = checks[i % len(checks)]
        samples = [v for v, ok in KINDS[c.kind][1](c.arg, dict(c.raw)) if not ok]
        body = json.loads(json.dumps(base))
        if not samples:
            return body, None
        value = samples[choice % len(samples)]
        concrete = set_path(body, c.segments, value)
        return body, (_predict(spec, endpoint, c, concrete, value) if concrete is not None else None)

    shaped = st.fixed_dictionaries({}, optional={k: from_schema(v) for k, v in list(props.items())[:40]}).map(
        lambda extra: ({**base, **{k: v for k, v in extra.items() if k not in ("model", "stream")}}, None))
    mutated = st.builds(mutate, st.integers(0, 10_000), st.integers(0, 10))
    return st.one_of(shaped, mutated)


def property_phase(spec: Any, target: Any, examples: int = 25, *, strict: bool = True,
                   profiles: Any = None, cases: Counter[str] | None = None) -> list[Finding]:
    """Fuzz each generation endpoint served; every mutation's refusal is predicted from the
    tables (status always; code and param under the strict contract). Under the official
    contracts only refusals of checks that are the official API's own are predicted. `cases`,
    when given, counts the requests sent per endpoint path."""
    findings: list[Finding] = []
    for endpoint in ("chat", "completions", "messages", "systemone", "responses"):
        official = official_profile(spec.endpoints[endpoint])
        if not strict and profiles is not None and official not in profiles:
            continue
        _fuzz_endpoint(spec, target, endpoint, examples, findings, strict, cases if cases is not None else Counter())
    return _dedupe(findings)


def _fuzz_endpoint(spec: Any, target: Any, endpoint: str, examples: int, findings: list[Finding],
                   strict: bool, cases: Counter[str]) -> None:
    path = spec.endpoints[endpoint].path
    model = model_of(target)
    official = official_profile(spec.endpoints[endpoint])

    @_settings(examples)
    @given(case=request_strategy(spec, endpoint, model))
    def run(case: tuple[dict[str, Any], Predicted | None]) -> None:
        body, predicted = case
        if predicted is not None and not strict and (
                predicted.strict_only or official not in spec.by_id[predicted.rule_id].profiles):
            predicted = None  # this project's own refusal: not the official API's promise
        for cap in ("max_tokens", "max_output_tokens"):
            mt = body.get(cap)
            if isinstance(mt, int) and not isinstance(mt, bool) and mt > 8:
                body = dict(body, **{cap: 8})  # keep generation short; validity unchanged
        cases[f"POST {path}"] += 1
        ex = target.send("POST", path, json.dumps(body).encode())
        for rule_id, name, message in (_invariants(spec, endpoint, body, ex, predicted, strict)
                                       + _stream_parity(spec, target, endpoint, body, ex)):
            findings.append(Finding(rule_id, f"property:{name}", f"POST {path}", message,
                                    json.dumps(body, ensure_ascii=False)[:500]))

    run()
