"""System One probabilities: colibri against transformers serve on the same weights (issue 15).

    PYTHONPATH=. python bench/peers/systemone_agreement.py [--json bench/results/systemone-agreement.json]

Starts the peers harness's `transformers serve` (SmolLM2-135M-Instruct, the float32 folder),
sends it fixed /v1/systemone requests, answers the same requests with colibri in-process on
that folder (float32, the same weights) and reports the largest probability difference and
whether input_tokens agree. Both lay each question out the same way: colibri is started with
its `transformers` prompt layout (`colibri serve --systemone-prompt transformers`: transformers'
DECISION_PROMPT in the model's own chat template, colibri/server/systemone.py), so the prompt
tokens are identical and only float arithmetic differs. colibri's default layout,
shared-first, orders the same lines differently and so gives other probabilities.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catalog import TRANSFORMERS  # noqa: E402
from run import ensure_installed, serving  # noqa: E402
from server_process import stop  # noqa: E402
from smollm2 import HF_DIR  # noqa: E402

from conformance.inprocess import model_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = [
    {"state": "Order 1182: two mugs, paid, shipped on Monday. The customer writes: the box arrived crushed and one "
              "mug is broken.",
     "questions": {"topic": {"type": "choice", "instructions": "What is the message about?",
                             "criteria": {"billing": None, "damage": "Something arrived broken",
                                          "delivery": "Where the parcel is"}},
                   "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "medium", "high"]},
                   "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
                   "mood": {"type": "noul", "instructions": "Is the customer happy?",
                            "criteria": {"true": "pleased", "false": "upset"}}}},
    {"state": {"ticket": 77, "text": "The printer on floor 3 jams on every second page.", "priority": None},
     "questions": {"kind": {"type": "choice", "criteria": {"hardware": None, "software": None, "network": None}},
                   "severity": {"type": "score", "instructions": {"ask": "severity"},
                                "criteria": ["cosmetic", "annoying", "blocking", "critical"]}}},
]


def probabilities(doc: dict) -> dict[str, float]:
    out = {}
    for name, a in doc["answers"].items():
        if a["type"] == "noul":
            out[name] = a["noul"]
        else:
            out |= {f"{name}.{k}": v for k, v in a["probabilities"].items()}
    return out


def colibri_answers() -> list[dict]:
    target, _ = model_target(HF_DIR, model_id="smollm2", systemone_prompt="transformers")
    return [target.send("POST", "/v1/systemone", json.dumps({"model": "smollm2", **r}).encode()).json()
            for r in REQUESTS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "systemone-agreement.json")
    args = ap.parse_args()
    ensure_installed(TRANSFORMERS)
    proc, base, _ = serving(TRANSFORMERS)
    try:
        theirs = [httpx.post(f"{base}/v1/systemone", json={"model": "smollm2", **r}, timeout=120).json()
                  for r in REQUESTS]
    finally:
        stop(proc)
    ours = colibri_answers()
    rows = []
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        pa, pb = probabilities(a), probabilities(b)
        diff = max(abs(pa[k] - pb[k]) for k in pb)
        rows.append({"request": i, "max_abs_diff": diff, "colibri_input_tokens": a["usage"]["input_tokens"],
                     "transformers_input_tokens": b["usage"]["input_tokens"],
                     "colibri_cached_tokens": a["usage"]["input_tokens_details"]["cached_tokens"],
                     "colibri": pa, "transformers": pb})
        print(f"request {i}: max |p diff| {diff:.2e}; input_tokens colibri {a['usage']['input_tokens']} / transformers "
              f"{b['usage']['input_tokens']} (colibri reused {a['usage']['input_tokens_details']['cached_tokens']})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "model": "SmolLM2-135M-Instruct (float32)",
                                     "transformers": TRANSFORMERS.version(), "colibri_prompt": "transformers",
                                     "rows": rows}, indent=1) + "\n")
    return 0 if all(r["max_abs_diff"] < 1e-3 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
