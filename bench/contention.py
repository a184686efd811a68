"""Decode speed when other processes keep cores busy: colibri's engine beside llama.cpp (issue 52).

    PYTHONPATH=. python bench/contention.py [--rounds 2] [--tokens 64] [--spin]

For each condition (idle, then beside 1 and 2 processes that busy-loop on a core) and each thread
count (1, 2 and every usable core, deduplicated), alternating in that order so that a slow spell
hits every engine alike:

- colibri's engine in a fresh process on the SmolLM2 Q4_1 GGUF: `--tokens` greedy decode steps
  after a one-token prefill, stopped early after `--budget` seconds (tok/s either way);
- with `--spin`, the same with COLIBRI_SPIN_US=1000000 (waits that always spin, as libgomp's
  default barriers did before issue 52), to show what the default avoids;
- llama.cpp `llama-bench -p 0 -n TOKENS -t T -r 1` on the same file (stopped after 6x the budget:
  then the figure is the tokens over the time waited, an upper bound).

Each cell is the best over the rounds; "loss" is the idle tok/s of the same engine and thread count
divided by the cell's. The issue's test: no cell where colibri loses more than 3x while llama.cpp
loses less than 1.5x. `uptime` is printed before and after: on a machine shared with other work
"idle" means "without our busy loops", and only ratios measured in one run compare.
Results also go to bench/results/contention.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "peers"))
from llamacpp_build import LLAMA_BENCH, ensure_llama_server  # noqa: E402
from smollm2 import ensure_gguf  # noqa: E402

from colibri.engine_threads import fixed_wait_env, usable_cores  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUSY = "while True:\n    pass\n"


def colibri(path: Path, threads: int, tokens: int, budget: float, spin: bool) -> float:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    if spin:
        env.update(fixed_wait_env(spin=True))
    out = subprocess.run([sys.executable, __file__, "--child", str(path), str(threads), str(tokens), str(budget)],
                         check=True, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def llama(path: Path, threads: int, tokens: int, budget: float) -> float:
    """llama-bench's decode tok/s; when it outlasts 6x the budget (its spinning barriers collapse
    on busy cores), the tokens over the time waited: an upper bound, as the run did not finish."""
    cmd = [str(LLAMA_BENCH), "-m", str(path), "-t", str(threads), "-p", "0", "-n", str(tokens), "-r", "1", "-o", "json"]
    t = time.perf_counter()
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=6 * budget)
    except subprocess.TimeoutExpired:
        return tokens / (time.perf_counter() - t)
    return float(json.loads(out.stdout)[0]["avg_ts"])


def child(path: Path, threads: int, tokens: int, budget: float) -> None:
    """Greedy decode in this (fresh) process; prints tok/s."""
    import numpy as np

    from colibri.model import Model

    eng = Model(path).engine(n_slots=1, n_threads=threads)
    eng.prefill(0, [1, 2], reuse=False)
    eng.decode([0], [3])  # warm-up: page in, size scratch
    eng.prefill(0, [1], reuse=False)
    tok, done, t = 2, 0, time.perf_counter()
    while done < tokens and (done < 4 or time.perf_counter() - t < budget):
        tok = int(np.argmax(eng.decode([0], [tok])[0]))
        done += 1
    print(done / (time.perf_counter() - t))


def busy_loops(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(k)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measure(args: argparse.Namespace, path: Path, engines: list[str], threads: list[int]) -> dict:
    best: dict[str, dict[str, float]] = {}
    for rnd in range(args.rounds):
        for k in range(3):
            procs = busy_loops(k)
            try:
                time.sleep(0.5)
                for t in threads:
                    for who in engines:
                        v = (llama(path, t, args.tokens, args.budget) if who == "llama.cpp"
                             else colibri(path, t, args.tokens, args.budget, who.endswith("(spin)")))
                        key = f"{k}/{t}"
                        best.setdefault(who, {})[key] = max(best.get(who, {}).get(key, 0.0), v)
                        print(f"[round {rnd + 1}] busy {k}, {t} threads, {who}: {v:.1f} tok/s", file=sys.stderr,
                              flush=True)
            finally:
                stop(procs)
    return best


def table(best: dict, engines: list[str], threads: list[int]) -> list[str]:
    lines = ["| busy loops | threads | " + " | ".join(f"{w} tok/s (loss)" for w in engines) + " |",
             "|---|---|" + "---|" * len(engines)]
    for k in range(3):
        for t in threads:
            cells = []
            for w in engines:
                v, idle = best[w][f"{k}/{t}"], best[w][f"0/{t}"]
                cells.append(f"{v:.1f} ({idle / v:.2f}x)")
            lines.append(f"| {k} | {t} | " + " | ".join(cells) + " |")
    return lines


def verdict(best: dict, threads: list[int]) -> list[str]:
    bad = []
    for k in (1, 2):
        for t in threads:
            c = best["colibri"][f"0/{t}"] / best["colibri"][f"{k}/{t}"]
            ll = best["llama.cpp"][f"0/{t}"] / best["llama.cpp"][f"{k}/{t}"]
            if c > 3 and ll < 1.5:
                bad.append(f"busy {k}, {t} threads: colibri loses {c:.1f}x, llama.cpp {ll:.1f}x")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (best is kept; default 2)")
    ap.add_argument("--tokens", type=int, default=64, help="decode steps per measurement (default 64)")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds after which colibri's decode stops early")
    ap.add_argument("--spin", action="store_true", help="also measure colibri with waits that always spin "
                    "(COLIBRI_SPIN_US=1000000)")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "contention.json")
    args = ap.parse_args()
    ensure_llama_server()
    path = ensure_gguf()
    threads = sorted({1, 2, usable_cores()})
    engines = ["colibri", *(["colibri (spin)"] if args.spin else []), "llama.cpp"]
    before = uptime()
    best = measure(args, path, engines, threads)
    after = uptime()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "uptime": [before, after],
                                     "tokens": args.tokens, "rounds": args.rounds, "results": best}, indent=1) + "\n")
    print(f"before: {before}\nafter:  {after}\n")
    print("\n".join(table(best, engines, threads)))
    bad = verdict(best, threads)
    print("\n" + ("; ".join(bad) if bad else "no cell where colibri loses more than 3x while llama.cpp loses less than 1.5x"))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        main()
