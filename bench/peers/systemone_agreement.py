"""System One probabilities: colibri against transformers serve on the same weights (issue 15).

    PYTHONPATH=. python bench/peers/systemone_agreement.py [--json bench/results/systemone-agreement.json]

Starts the peers harness's `transformers serve` (SmolLM2-135M-Instruct, the float32 folder),
sends it fixed /v1/systemone requests, answers the same requests with colibri in-process on
that folder (float32, the same weights) and reports the largest probability difference and
whether input_tokens agree. Both lay each question out the same way (transformers'
DECISION_PROMPT layout in the model's own chat template: colibri/server/systemone.py), so
the prompt tokens are identical and only float arithmetic differs.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2 import HF_DIR  # noqa: E402

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
    from falcon import testing

    from colibri.model import Model
    from colibri.server.app import create_app
    from colibri.server.service import Service, Settings

    svc = Service(Settings(model_id="smollm2", family="chatml-text", kv_slots=1), model=Model(HF_DIR))
    client = testing.TestClient(create_app(svc))
    return [client.simulate_post("/v1/systemone", json={"model": "smollm2", **r}, headers={"Host": "localhost"}).json
            for r in REQUESTS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "systemone-agreement.json")
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("run.py")), "--only", "transformers",
                               "--serve"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        url = None
        deadline = time.monotonic() + 300
        while url is None and time.monotonic() < deadline:
            line = server.stdout.readline() if server.stdout else ""
            if not line and server.poll() is not None:
                raise SystemExit("transformers serve did not start (see ~/.cache/colibri-peers/logs/transformers.log)")
            if " at http://" in line:
                url = line.split(" at ", 1)[1].split(",", 1)[0].strip()
        if url is None:
            raise SystemExit("transformers serve did not report its URL in time")
        theirs = [httpx.post(f"{url}/systemone", json={"model": "smollm2", **r}, timeout=120).json() for r in REQUESTS]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
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
                                     "rows": rows}, indent=1) + "\n")
    return 0 if all(r["max_abs_diff"] < 1e-3 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
