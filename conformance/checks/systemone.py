"""Checks of /v1/systemone (spec/85-systemone.yaml): every question answered with its type, and
each answer's distribution, choice, score, confidence and entropy as the rules compute them."""
from __future__ import annotations

import math
from typing import Any

from .core import CheckContext, CheckFailure

S1_TOL = 1e-4


def _s1(ctx: CheckContext, kind: str | None) -> list[tuple[str, dict[str, Any], Any]]:
    """(name, question, answer) for the request's questions of `kind` (None: all)."""
    questions = (ctx.body or {}).get("questions") or {}
    answers = ctx.exchange.json().get("answers")
    if not isinstance(answers, dict):
        raise CheckFailure("systemone answers", "an answers object", answers)
    return [(n, q, answers.get(n)) for n, q in questions.items() if kind is None or q.get("type") == kind]


def _distribution(check: str, name: str, probs: Any, keys: list[str]) -> list[float]:
    """The probabilities of one answer: exactly `keys`, in order, each in [0, 1], summing to 1."""
    if not isinstance(probs, dict) or list(probs) != keys:
        raise CheckFailure(check, f"{name}: probabilities over exactly {keys}, in request order", probs)
    p = list(probs.values())
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in p):
        raise CheckFailure(check, f"{name}: each probability a number in [0, 1]", p)
    if abs(sum(p) - 1) > S1_TOL:
        raise CheckFailure(check, f"{name}: probabilities summing to 1 +/- {S1_TOL}", sum(p))
    return [float(v) for v in p]


def _first_argmax(p: list[float]) -> int:
    """The most probable answer's index, the first on a tie."""
    return max(range(len(p)), key=lambda i: (p[i], -i))


def _close(check: str, what: str, want: float, got: Any) -> None:
    if not isinstance(got, (int, float)) or isinstance(got, bool) or abs(got - want) > S1_TOL:
        raise CheckFailure(check, f"{what} = {want:.6f} +/- {S1_TOL}", got)


def systemone_complete(ctx: CheckContext) -> None:
    """Every question answered, nothing else, in request order, each with its question's type."""
    names = list((ctx.body or {}).get("questions") or {})
    answers = ctx.exchange.json().get("answers")
    if not isinstance(answers, dict) or list(answers) != names:
        raise CheckFailure("systemone_complete", f"answers for exactly {names}, in order",
                           list(answers) if isinstance(answers, dict) else answers)
    for name, q, a in _s1(ctx, None):
        if not isinstance(a, dict) or a.get("type") != q.get("type"):
            raise CheckFailure("systemone_complete", f"{name}: an answer of type {q.get('type')!r}", a)


def systemone_choice(ctx: CheckContext) -> None:
    """choice: a distribution over the options, the first most probable chosen, and
    confidence = clip((p_max - 1/k) / (1 - 1/k), 0, 1) (1 when k is 1)."""
    for name, q, a in _s1(ctx, "choice"):
        options = list(q.get("criteria") or {})
        p = _distribution("systemone_choice", name, (a or {}).get("probabilities"), options)
        best = _first_argmax(p)
        if a.get("choice") != options[best]:
            raise CheckFailure("systemone_choice", f"{name}: choice = the first most probable option "
                               f"{options[best]!r}", a.get("choice"))
        k = len(p)
        want = 1.0 if k == 1 else min(1.0, max(0.0, (p[best] - 1 / k) / (1 - 1 / k)))
        _close("systemone_choice", f"{name}: confidence", want, a.get("confidence"))


def systemone_score(ctx: CheckContext) -> None:
    """score: a distribution over levels "0".."k-1", score = sum i * p_i, the legend echoing the
    levels, and confidence = max(0, 1 - E|i - argmax| / D) with D the mean |i - (k-1)/2|."""
    for name, q, a in _s1(ctx, "score"):
        levels = list(q.get("criteria") or [])
        keys = [str(i) for i in range(len(levels))]
        p = _distribution("systemone_score", name, (a or {}).get("probabilities"), keys)
        _close("systemone_score", f"{name}: score", sum(i * v for i, v in enumerate(p)), a.get("score"))
        if a.get("legend") != dict(zip(keys, levels, strict=True)):
            raise CheckFailure("systemone_score", f"{name}: legend {dict(zip(keys, levels, strict=True))}",
                               a.get("legend"))
        k, best = len(p), _first_argmax(p)
        spread = sum(abs(i - (k - 1) / 2) for i in range(k)) / k
        want = 1.0 if k == 1 else max(0.0, 1 - sum(v * abs(i - best) for i, v in enumerate(p)) / spread)
        _close("systemone_score", f"{name}: confidence", want, a.get("confidence"))


def systemone_noul(ctx: CheckContext) -> None:
    """noul: P(true), a number in [0, 1]."""
    for name, _, a in _s1(ctx, "noul"):
        v = (a or {}).get("noul")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1:
            raise CheckFailure("systemone_noul", f"{name}: noul = P(true) in [0, 1]", v)


def systemone_entropy(ctx: CheckContext) -> None:
    """colibri: entropy = -sum p ln p of each answer's distribution (noul: P(true), P(false)) in
    nats, and entropy_normalized = entropy / ln k (0 when k is 1)."""
    for name, q, a in _s1(ctx, None):
        a = a or {}
        p = [a["noul"], 1 - a["noul"]] if q.get("type") == "noul" else list((a.get("probabilities") or {}).values())
        h = -sum(v * math.log(v) for v in p if v > 0)
        _close("systemone_entropy", f"{name}: entropy", h, a.get("entropy"))
        _close("systemone_entropy", f"{name}: entropy_normalized", h / math.log(len(p)) if len(p) > 1 else 0.0,
               a.get("entropy_normalized"))


def systemone_usage(ctx: CheckContext) -> None:
    """usage.input_tokens an integer > 0 (prompts read), output_tokens 0 (nothing generated)."""
    u = ctx.exchange.json().get("usage")
    if not isinstance(u, dict) or not isinstance(u.get("input_tokens"), int) or u["input_tokens"] < 1 \
            or u.get("output_tokens") != 0:
        raise CheckFailure("systemone_usage", "usage {input_tokens > 0, output_tokens: 0}", u)


def systemone_prefix_reused(ctx: CheckContext) -> None:
    """colibri: with two or more questions the state's prompt prefix is computed once:
    usage.input_tokens_details.cached_tokens counts at least one reused token per later question."""
    n = len((ctx.body or {}).get("questions") or {})
    cached = ((ctx.exchange.json().get("usage") or {}).get("input_tokens_details") or {}).get("cached_tokens")
    if not isinstance(cached, int) or cached < n - 1:
        raise CheckFailure("systemone_prefix_reused", f"cached_tokens >= {n - 1} for {n} questions", cached)


def systemone_labels(ctx: CheckContext) -> None:
    """colibri: /health says, per question type, which labels the model offers."""
    s1 = ctx.exchange.json().get("systemone")
    want = {"choice": ("labels", "max_options"), "score": ("labels", "max_levels"), "noul": ("labels", "available")}
    if not isinstance(s1, dict) or any(not isinstance(s1.get(t), dict) or not all(k in s1[t] for k in ks)
                                       for t, ks in want.items()):
        raise CheckFailure("systemone_labels", "a systemone object: choice {labels, max_options}, score {labels, "
                           "max_levels}, noul {labels, available}", s1)


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (systemone_complete, systemone_choice, systemone_score, systemone_noul, systemone_entropy, systemone_usage,
          systemone_prefix_reused, systemone_labels)
