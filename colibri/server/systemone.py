"""POST /v1/systemone: closed-set decisions scored from the model's next-token probabilities
(spec/85-systemone.yaml).

Each question becomes one prompt, the user turn of the model's own chat template (thinking
off, generation cue on), made of the state, a blank line, the closing line naming the labels,
one line per option (`A. name: description`) and the instructions. Two layouts order them
(`colibri serve --systemone-prompt`):

- `shared-first` (the default): state, closing line, options, then `Question: instructions`.
  What a question shares with the others of its type and options comes before what is its
  own, so the engine computes the state once and each shared closing-and-options block once
  (scheduler `_score`: a prefix tree); a question's own tokens are its instructions and the
  template's tail. On SmolLM2-135M this halves a 64-question request (BENCHMARKS.md,
  System One: 2.8 s against 5.5 s), to 2.6-3.0x the time of one question.
- `transformers`: state, instructions, options, closing line: transformers serve's
  DECISION_PROMPT, so that the same weights give the same probabilities there and here
  (bench/peers/systemone_agreement.py). Only the state is shared, since the instructions
  come first.

Implementations already disagree on the layout (vLLM's is a third one), so neither is the
API's; the probabilities depend on it, the shapes and invariants do not. The engine reads the
label tokens' logits at each prompt's last position; nothing is sampled.

Labels: A, B, C, ... for choice and score options; for noul the first pair among Yes/No,
yes/no, Y/N whose two labels are single tokens. Which types the served model can answer is
decided once, at start-up, and reported in /health (rule s1.labels.single-token).
"""
from __future__ import annotations

import hashlib
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from .disconnect import detector
from .errors import error
from .labels import LETTERS, NOUL_LABELS
from .request import ChatInput
from .responder import Resource
from .task import Scored

NOUL_OPTIONS = ["true", "false"]


@dataclass
class Question:
    name: str
    type: str  # noul | choice | score
    instructions: Any
    options: list[str]  # choice keys, score levels as text ("0".."k-1"), or true/false
    descriptions: list[Any]
    levels: list[Any]  # score: the request's levels (the legend); else empty


def _text(x: Any) -> str:
    """A state, instruction or description as the prompt shows it: strings as they are,
    anything else as JSON text (null as nothing)."""
    if x is None:
        return ""
    return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)


def parse_questions(body: dict[str, Any]) -> list[Question]:
    """The validated request's questions in request order."""
    out = []
    for name, q in body["questions"].items():
        kind, crit = q["type"], q.get("criteria")
        if kind == "choice":
            out.append(Question(name, kind, q.get("instructions"), list(crit), list(crit.values()), []))
        elif kind == "score":
            out.append(Question(name, kind, q.get("instructions"), [str(i) for i in range(len(crit))], list(crit),
                                list(crit)))
        else:
            crit = crit or {}
            out.append(Question(name, kind, q.get("instructions"), list(NOUL_OPTIONS),
                                [crit.get("true"), crit.get("false")], []))
    return out


def prompt_text(state: Any, q: Question, labels: list[str], layout: str = "shared-first") -> str:
    """The user turn for one question, in one of settings.PROMPT_LAYOUTS (see the module docstring)."""
    options = []
    for label, option, desc in zip(labels, q.options, q.descriptions, strict=True):
        d = _text(desc)
        if q.type == "noul":
            if d:
                options.append(f"{label}: {d}")
        elif q.type == "choice":
            options.append(f"{label}. {option}: {d}" if d else f"{label}. {option}")
        else:
            options.append(f"{label}. {d}")
    if q.type == "noul":
        closing = f"Answer {labels[0]} or {labels[1]} only."
    else:
        kind = "letter" if labels == LETTERS[:len(labels)] else "label"
        what = "option" if q.type == "choice" else "level"
        closing = f"Answer with the {kind} of the {what} that fits best ({labels[0]} to {labels[-1]}) only."
    asked = _text(q.instructions)
    if layout == "transformers":  # its line break before the closing line stays even when nothing precedes it
        return _text(state) + "\n\n" + "\n".join(line for line in [asked, *options] if line) + "\n" + closing
    lines = [closing, *options, f"Question: {asked}" if asked else ""]
    return _text(state) + "\n\n" + "\n".join(line for line in lines if line)


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x.astype(np.float64) - float(np.max(x)))
    return z / z.sum()


def answer(q: Question, probs: np.ndarray) -> dict[str, Any]:
    """One answer from the label probabilities (in option order). Confidence follows the
    reference formulas; entropy is colibri's addition (spec: s1.entropy)."""
    p = [float(v) for v in probs]
    k = len(p)
    h = -sum(v * math.log(v) for v in p if v > 0)
    extra = {"entropy": h, "entropy_normalized": h / math.log(k) if k > 1 else 0.0}
    if q.type == "noul":
        return {"type": "noul", "noul": p[0], **extra}
    best = int(np.argmax(probs))  # ties: the first
    if q.type == "choice":
        conf = 1.0 if k == 1 else min(1.0, max(0.0, (p[best] - 1 / k) / (1 - 1 / k)))
        return {"type": "choice", "choice": q.options[best], "probabilities": dict(zip(q.options, p, strict=True)),
                "confidence": conf, **extra}
    expected = sum(i * v for i, v in enumerate(p))
    if k == 1:
        conf = 1.0
    else:
        spread = sum(abs(i - (k - 1) / 2) for i in range(k)) / k
        conf = max(0.0, 1 - sum(v * abs(i - best) for i, v in enumerate(p)) / spread)
    return {"type": "score", "score": expected, "legend": dict(zip(q.options, q.levels, strict=True)),
            "probabilities": dict(zip(q.options, p, strict=True)), "confidence": conf, **extra}


def labels_for(svc: Any, q: Question) -> tuple[list[str], list[int]]:
    """The label texts and token ids of one question on the served model, or labels_unavailable."""
    labels = svc.systemone_labels
    if q.type == "noul":
        if labels.noul is None:
            raise error("labels_unavailable", "This model has no single-token label pair for noul questions "
                        f"(tried {', '.join('/'.join(p) for p in NOUL_LABELS)}).", param=f"questions.{q.name}.type")
        return labels.noul
    ids = labels.letters_for(len(q.options))
    if ids is None:
        raise error("labels_unavailable", f"This model cannot label {len(q.options)} options with single "
                    f"tokens; /health says how many it can.", param=f"questions.{q.name}.criteria")
    return LETTERS[:len(q.options)], ids


def scoring_prompts(svc: Any, state: Any, questions: list[Question]) -> list[tuple[list[int], list[int]]]:
    """Each question's prompt tokens, in the server's layout, and its label token ids. A request
    whose prompts together exceed the server's scoring budget is refused as soon as the sum
    does (rule s1.scoring.bounded), before the rest are rendered."""
    scoring: list[tuple[list[int], list[int]]] = []
    total, limit = 0, svc.settings.systemone_max_tokens
    for q in questions:
        texts, ids = labels_for(svc, q)
        _, prompt = svc.render(ChatInput(messages=[{"role": "user", "content": prompt_text(
            state, q, texts, svc.settings.systemone_prompt)}]), context_param="state")
        svc.budget(prompt, 1, "state")  # a prompt with no room left is refused by name
        total += len(prompt)
        if limit and total > limit:
            raise error("scoring_budget_exceeded",
                        f"The questions' prompts take more than this server's budget of {limit} prompt tokens "
                        f"per request ({total} after {len(scoring) + 1} of {len(questions)} questions); send "
                        "fewer questions, shorter options or a shorter state.", param="questions")
        scoring.append((prompt, ids))
    return scoring


class SystemOneResource(Resource):
    """Parse → translate (the questions' prompts and labels) → score (Service.score) → answers."""

    endpoint = "systemone"

    def on_post(self, req: Any, resp: Any) -> None:
        body = self.parse(req)
        questions = parse_questions(body)
        scoring = scoring_prompts(self.svc, body["state"], questions)
        # its "conversation" for --prefix-reuse conversation: the state it asks about
        state_key = hashlib.sha1(json.dumps(body["state"], sort_keys=True, ensure_ascii=False).encode()).digest()

        def answers(got: Scored) -> bytes:
            doc = {"id": f"s1-{uuid.uuid4().hex}", "object": "systemone", "model": self.svc.settings.model_id,
                   "answers": {q.name: answer(q, softmax(np.asarray(rows)))
                               for q, rows in zip(questions, got.rows, strict=True)},
                   "usage": {"input_tokens": got.prompt_tokens, "output_tokens": 0,
                             "input_tokens_details": {"cached_tokens": got.reused}}}
            return json.dumps(doc).encode()

        data = self.svc.score(scoring, answers, reuse_key=state_key, turn=req.context.turn,
                              client_gone=detector(req.env))
        if data is None:  # the client left
            return
        resp.data = data
        resp.content_type = "application/json"
