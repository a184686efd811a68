"""/v1/systemone beside a chat: what the scoring pass cap costs and what it buys (issue 49).

    PYTHONPATH=. python bench/systemone_interleave.py [--rounds 3] [--threads 2]

SmolLM2-135M-Instruct (the peers harness's float32 folder), colibri in-process (falcon test
client, two KV slots). The scheduler scores a request in passes of at most
`Scheduler.SCORE_PASS_TOKENS` computed tokens and runs the other slots' decode steps between
two passes, giving scoring at most half the engine's time while others decode (rule
s1.scoring.interleaved-cancellable). Per round, alternating three settings: the default (the
cap, and sharing); no cap (one pass per shared block, sharing); and as before issue 49 (each
request scored to its end in one go, the other slots waiting):

- alone: the 64-question request of bench/peers/systemone_bench.py (a fresh ~500-token state,
  numbered questions), seconds;
- beside a chat: the same request, and 0.3 s after it starts a greedy chat of 16 tokens on the
  other slot; the chat's time from sending to its answer, and the scoring's time.

Results: bench/results/systemone-interleave.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "peers"))
from smollm2 import HF_DIR  # noqa: E402
from systemone_bench import questions, state  # noqa: E402

from conformance.inprocess import model_target  # noqa: E402

CHAT = {"max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": "Name three colours."}]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="engine threads (default 2)")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "systemone-interleave.json")
    args = ap.parse_args()
    target, svc = model_target(HF_DIR, model_id="smollm2", kv_slots=2, n_threads=args.threads)
    sched = svc.scheduler
    scorer = sched.scorer
    default_cap = scorer.SCORE_PASS_TOKENS
    n = 0

    def score() -> float:
        nonlocal n
        n += 1
        body = {"model": "smollm2", "state": state(n), "questions": questions(64)}
        t = time.perf_counter()
        ex = target.send("POST", "/v1/systemone", json.dumps(body).encode())
        assert ex.status == 200, ex.body[:300]
        return time.perf_counter() - t

    def chat() -> float:
        t = time.perf_counter()
        ex = target.send("POST", "/v1/chat/completions", json.dumps(dict(CHAT, model="smollm2")).encode())
        assert ex.status == 200, ex.body[:300]
        return time.perf_counter() - t

    passes = scorer.passes

    def whole() -> None:  # as before issue 49: every scoring task to its end, nothing between
        while scorer.running:
            passes()

    score()  # warm-up
    rows: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for name, cap, run in ((f"cap {default_cap}", default_cap, passes), ("no cap", 10**9, passes),
                               ("whole request", 10**9, whole)):
            scorer.SCORE_PASS_TOKENS = cap
            scorer.passes = run  # type: ignore[method-assign]
            row = rows.setdefault(name, {"alone": [], "chat alone": [], "scoring beside a chat": [],
                                         "chat beside scoring": []})
            row["alone"].append(score())
            row["chat alone"].append(chat())
            got: dict[str, float] = {}
            worker = threading.Thread(target=lambda got=got: got.update(score=score()))
            worker.start()
            time.sleep(0.3)
            row["chat beside scoring"].append(chat())
            worker.join()
            row["scoring beside a chat"].append(got["score"])
            print(name, {k: round(v[-1], 3) for k, v in row.items()}, flush=True)
    sched.close()
    best = {name: {k: min(v) for k, v in row.items()} for name, row in rows.items()}
    for name, row in best.items():
        print(f"{name}: " + ", ".join(f"{k} {v:.3f} s" for k, v in row.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                     "threads": args.threads, "rounds": rows, "best": best}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
