"""kill -9 loop: a server writing KV slot files is killed without warning, again and again;
every restart must load a valid slot state or discard the file, never load a wrong one.

Usage: PYTHONPATH=. python bench/kill9.py [--kills 50] [--json build/bench/kill9.json]

Each slot only ever serves one of two fixed greedy requests (pinned with cache_slot), so the
states a slot file may legitimately hold are known: their token counts are learned from a
reference server first. After each kill the restarted server's start-up report is read
("KV slot N: restored T tokens" or "discarded: why"): a restored slot must hold one of the
known counts, and the next request pinned to it must give the reference answer while
reusing the cached prefix. A wrong state would show as an unknown count or a different
answer; a killed write may only ever cost the newest state.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colibri_process import Server  # noqa: E402

SLOTS = 2
PROMPTS = {0: ["Repeat exactly: alpha beta gamma delta epsilon", "Repeat exactly: one two three four five six"],
           1: ["Write a haiku about the sea and the moon.", "List the colours of the rainbow, please."]}
REPORT = re.compile(r"colibri: KV slot (\d+): (restored (\d+) tokens|discarded: .*)")


def body(slot: int, which: int) -> dict:
    return {"model": "colibri-tiny", "messages": [{"role": "user", "content": PROMPTS[slot][which]}],
            "max_tokens": 16, "temperature": 0, "cache_slot": slot}


def ask(base: str, slot: int, which: int) -> tuple[str, int]:
    r = httpx.post(base + "/v1/chat/completions", json=body(slot, which), timeout=60)
    r.raise_for_status()
    doc = r.json()
    return doc["choices"][0]["message"]["content"], doc["usage"]["prompt_tokens_details"]["cached_tokens"]


def start(kv: Path, log: Path) -> tuple[Server, dict[int, str]]:
    server = Server(["--kv-slots", str(SLOTS), "--kv-dir", str(kv)], log)
    server.wait_ready()
    report = {int(m.group(1)): m.group(2) for m in REPORT.finditer(log.read_text())}
    return server, report


def reference(work: Path) -> tuple[dict[tuple[int, int], str], dict[int, set[int]]]:
    """Greedy answers, and the token counts a slot holds after each request (a clean restart
    reports them)."""
    answers: dict[tuple[int, int], str] = {}
    counts: dict[int, set[int]] = {s: set() for s in range(SLOTS)}
    for which in (0, 1):
        kv = work / f"reference-{which}"
        server, _ = start(kv, work / "reference.log")
        try:
            for slot in range(SLOTS):
                answers[(slot, which)] = ask(server.base, slot, which)[0]
        finally:
            server.stop()  # a clean stop writes the states
        server, report = start(kv, work / "reference.log")
        server.stop()
        for slot in range(SLOTS):
            m = re.match(r"restored (\d+) tokens", report.get(slot, ""))
            assert m, f"reference restart did not restore slot {slot}: {report}"
            counts[slot].add(int(m.group(1)))
    return answers, counts


def traffic(base: str, stop: threading.Event, rng: random.Random) -> None:
    while not stop.is_set():
        slot, which = rng.randrange(SLOTS), rng.randrange(2)
        try:
            ask(base, slot, which)
        except httpx.HTTPError:
            return  # the server was killed under the request: expected


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=Path("build/bench/kill9.json"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="colibri-kill9-"))
    answers, counts = reference(work)
    print(f"reference: answers for {len(answers)} requests; slot token counts {counts}", flush=True)

    kv = work / "kv"
    outcomes: Counter[str] = Counter()
    wrong: list[str] = []
    discards: Counter[str] = Counter()
    started = time.monotonic()
    for i in range(args.kills + 1):
        strays = list(kv.glob(".slot-*.tmp")) if kv.exists() else []
        outcomes["unfinished writes left by the kill"] += len(strays)
        server, report = start(kv, work / f"run-{i % 2}.log")
        if any(p.exists() for p in strays):
            wrong.append(f"restart {i}: unfinished writes were not cleared: {strays}")
        try:
            for slot in range(SLOTS):
                what = report.get(slot, "absent")
                if what.startswith("restored"):
                    n = int(what.split()[1])
                    if n not in counts[slot]:
                        wrong.append(f"restart {i}: slot {slot} restored {n} tokens, not one of {sorted(counts[slot])}")
                    outcomes["restored"] += 1
                elif what.startswith("discarded"):
                    outcomes["discarded"] += 1
                    discards[what.split(": ", 1)[1].split(" (")[0]] += 1
                else:
                    outcomes["absent"] += 1
                # The restored state must serve the reference answer, reusing its prefix.
                which = rng.randrange(2)
                text, cached = ask(server.base, slot, which)
                if text != answers[(slot, which)]:
                    wrong.append(f"restart {i}: slot {slot} answered {text!r}, reference {answers[(slot, which)]!r}")
                if what.startswith("restored") and cached == 0 and i > 0:
                    outcomes["restored but unused"] += 1
            if i == args.kills:
                server.stop()
                break
            stop = threading.Event()
            workers = [threading.Thread(target=traffic, args=(server.base, stop, random.Random(rng.random())))
                       for _ in range(2)]
            for w in workers:
                w.start()
            time.sleep(rng.uniform(0.05, 1.5))
            server.kill()  # SIGKILL mid-traffic: no handler, no flush
            stop.set()
            for w in workers:
                w.join(10)
        except BaseException:
            server.kill()
            raise
        print(f"kill {i + 1}/{args.kills}: {dict(outcomes)} wrong {len(wrong)}", flush=True)
    result = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", "bench/kill9.py", *sys.argv[1:]]),
              "kills": args.kills, "slots": SLOTS, "restarts_checked": args.kills + 1,
              "slot_outcomes": dict(outcomes), "discard_reasons": dict(discards), "wrong": len(wrong),
              "wrong_examples": wrong[:10], "seconds": round(time.monotonic() - started)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print("PASS" if not wrong else "FAIL")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
