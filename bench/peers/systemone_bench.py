"""/v1/systemone speed: 1, 8 and 64 questions about one ~500-token state (issue 15).

    PYTHONPATH=. python bench/peers/systemone_bench.py [--rounds 2]

SmolLM2-135M-Instruct, float32 folder (the weights transformers serve loads), 2 threads.
Per question count, alternating in each round:

- colibri's server in-process (falcon test client: no sockets, the whole request path) in its
  default prompt layout, shared-first: the state, then each type's answer instruction and
  options, then the question's own words; the scheduler computes the state once and each block
  that questions of one type and options share once (a prefix tree), and each request here uses
  a fresh state, so only the reuse within the request counts;
- the same server on 64 different questions (`distinct_questions`) instead of numbered
  repeats of three, as a client asking many things about one document sends them;
- the same server in the `transformers` layout (transformers serve's prompts: the question's
  instructions come right after the state, so only the state is shared);
- colibri's engine on the default layout's prompts prefilled one after another into one slot,
  each reusing what the previous one left there (the state is computed once, but every question
  is a pass of its own over the weights);
- colibri's engine on the same prompts prefilled without any reuse (reuse=False): what the
  request would cost if every question recomputed the state;
- transformers serve (the peers harness's), over HTTP.

Reports questions/s and each run's time relative to one question. Results:
bench/results/systemone-bench.json.
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
COUNTS = [1, 8, 64]
PARAGRAPH = ("Ticket {n}: the customer reports that the order placed on Monday arrived on Thursday in a crushed "
             "box. Two of the six mugs are broken and the saucers are chipped. The customer has been with us for "
             "four years, paid by card, and asks what we can do. ")


def state(n: int) -> str:
    """About 500 tokens, different for every request (so no request reuses another's state)."""
    return "".join(PARAGRAPH.format(n=f"{n}-{i}") for i in range(9))


KINDS = [{"type": "choice", "instructions": "What is the main problem?",
          "criteria": {"late delivery": None, "damage": None, "billing": None}},
         {"type": "score", "instructions": "How upset is the customer?", "criteria": ["calm", "annoyed", "angry"]},
         {"type": "noul", "instructions": "Is the customer asking for a refund?"}]


def questions(k: int) -> dict:
    """The three kinds in turn, each question numbered ("(5) What is the main problem?") so that
    no two are the same text."""
    return {f"q{i:02d}": dict(KINDS[i % 3], instructions=f"({i}) " + KINDS[i % 3]["instructions"]) for i in range(k)}


# 64 different questions about the ticket, in the three kinds' turn (the first of each is the
# kind's question above): what a client asking many things about one document sends.
DISTINCT = {
    "choice": [
        "What is the main problem?", "What should the agent deal with first?", "What is the customer most unhappy about?",
        "Which team should handle this ticket?", "What went wrong with the order?", "What is the ticket mostly about?",
        "Which issue costs us the most here?", "What would the customer name as the problem?",
        "Which problem is easiest to fix?", "What caused the complaint?", "What does the customer want solved?",
        "Which category fits this ticket?", "What should the reply address first?", "What kind of complaint is this?",
        "What is the underlying issue?", "Which department is to blame?", "What would a manager flag here?",
        "What did the customer notice first?", "What is the root cause?", "Which problem repeats in the ticket?",
        "What is the customer reporting?", "Which part of the order needs attention?"],
    "score": [
        "How upset is the customer?", "How urgent is this ticket?", "How likely is the customer to leave?",
        "How polite is the message?", "How serious is the damage?", "How clear is the request?",
        "How much does the customer trust us?", "How quickly should we reply?", "How bad is the delay?",
        "How costly is this for us?", "How detailed is the ticket?", "How frustrated does the customer sound?",
        "How loyal is the customer?", "How reasonable is the request?", "How much effort will the fix take?",
        "How well did our packing work?", "How much compensation is fair?", "How confident is the customer?",
        "How formal is the tone?", "How risky is this for our reputation?", "How satisfied was the customer before?"],
    "noul": [
        "Is the customer asking for a refund?", "Did the order arrive late?", "Are some items broken?",
        "Did the customer pay by card?", "Is this a repeat customer?", "Does the customer threaten to leave?",
        "Was the box damaged?", "Does the customer want a replacement?", "Is the tone angry?",
        "Did the order contain mugs?", "Were the saucers chipped?", "Has the customer been with us for years?",
        "Is a phone call requested?", "Did the parcel arrive on Monday?", "Is the customer polite?",
        "Should we escalate this ticket?", "Is the complaint about billing?", "Did all six mugs survive?",
        "Does the customer mention a discount?", "Is the delivery company named?", "Was the order placed on Monday?"],
}


def distinct_questions(k: int) -> dict:
    """Like questions(k), with a different question each time instead of a numbered repeat."""
    return {f"q{i:02d}": dict(KINDS[i % 3], instructions=DISTINCT[KINDS[i % 3]["type"]][i // 3]) for i in range(k)}


class Colibri:
    def __init__(self, layout: str = "shared-first") -> None:
        self.target, self.svc = model_target(HF_DIR, model_id="smollm2", kv_slots=2, n_threads=2,
                                             systemone_prompt=layout)
        self.engine = self.svc.scheduler.engine

    def server(self, body: dict) -> float:
        t = time.perf_counter()
        ex = self.target.send("POST", "/v1/systemone", json.dumps(body).encode())
        assert ex.status == 200, ex.body[:300]
        return time.perf_counter() - t

    def prompts(self, body: dict) -> list[list[int]]:
        from colibri.server.systemone import parse_questions, scoring_prompts

        return [prompt for prompt, _ in scoring_prompts(self.svc, body["state"], parse_questions(body))]

    def in_turn(self, body: dict) -> float:
        prompts = self.prompts(body)
        t = time.perf_counter()
        for ids in prompts:
            self.engine.prefill(1, ids)
        return time.perf_counter() - t

    def no_reuse(self, body: dict) -> float:
        prompts = self.prompts(body)
        t = time.perf_counter()
        for ids in prompts:
            self.engine.prefill(1, ids, reuse=False)
        return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (best is kept; default 2)")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "systemone-bench.json")
    args = ap.parse_args()
    colibri, as_transformers = Colibri(), Colibri("transformers")
    ensure_installed(TRANSFORMERS)
    server, base, _ = serving(TRANSFORMERS)
    url = f"{base}/v1"
    best: dict[str, dict[int, float]] = {"colibri server": {}, "colibri server, distinct questions": {},
                                         "colibri server, transformers layout": {},
                                         "colibri engine, questions in turn": {},
                                         "colibri engine, no reuse": {},
                                         "transformers serve": {}}
    n = 0
    try:
        with httpx.Client(timeout=600) as http:
            for rnd in range(args.rounds):
                for k in COUNTS:
                    runs = {}
                    n += 1
                    body = {"model": "smollm2", "state": state(n), "questions": questions(k)}
                    runs["colibri server"] = colibri.server(body)
                    runs["colibri server, distinct questions"] = colibri.server(
                        dict(body, state=state(n + 3000), questions=distinct_questions(k)))
                    runs["colibri server, transformers layout"] = as_transformers.server(dict(body, state=state(n + 2000)))
                    runs["colibri engine, questions in turn"] = colibri.in_turn(dict(body, state=state(n + 1000)))
                    runs["colibri engine, no reuse"] = colibri.no_reuse(body)
                    t = time.perf_counter()
                    r = http.post(f"{url}/systemone", json=body)
                    runs["transformers serve"] = time.perf_counter() - t
                    assert r.status_code == 200, r.text[:300]
                    for who, s in runs.items():
                        best[who][k] = min(best[who].get(k, s), s)
                    print(f"[round {rnd + 1}] {k} questions: " + ", ".join(f"{w} {s:.3f} s" for w, s in runs.items()),
                          file=sys.stderr, flush=True)
    finally:
        stop(server)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "threads": 2, "rounds": args.rounds,
                                     "seconds": {w: {str(k): v for k, v in d.items()} for w, d in best.items()}},
                                    indent=1) + "\n")
    print("| run | " + " | ".join(f"{k} q: s (q/s, x one)" for k in COUNTS) + " |")
    print("|---|" + "---|" * len(COUNTS))
    for who, d in best.items():
        print(f"| {who} | " + " | ".join(f"{d[k]:.3f} ({k / d[k]:.1f} q/s, {d[k] / d[1]:.1f}x)" for k in COUNTS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
