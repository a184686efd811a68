"""The engine at an earlier commit against the working tree, on the same model and machine:
what an engine change bought (or cost), measured side by side.

    PYTHONPATH=. python bench/engine_ab.py --base REV [--model DIR] [--rounds 3] [--json F]

The engine at REV (`git archive` of csrc/, pyx/, colibri/ and setup.py, built once into
build/engine-ab/REV) and the working tree's build run the same workloads in fresh processes,
alternating base and new in every round so that a slow spell of this VM hits both; each
figure is the best over the rounds. Workloads (2 threads, random token ids, nothing reused
unless said):

- prefill of 512, 1024 and 2000 tokens;
- decode: 128 steps after a 1000-token prompt;
- System One's shape: a 576-token state, then 64 branches of 37 tokens after it
  (`prefill_branches`, the state prefilled untimed).

Default model: SmolLM2-135M-Instruct as float32 (the peers cache, rebuilt when missing).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from colibri.model import Model
m = Model(sys.argv[2])
rng = np.random.default_rng(0)
toks = [int(x) for x in rng.integers(5, min(m.config.vocab_size, 30000), 4000)]
out = {}
for n in (512, 1024, 2000):
    e = m.engine(n_slots=1, n_threads=2)
    t = time.perf_counter(); e.prefill(0, toks[:n], reuse=False); out[f"prefill {n}"] = time.perf_counter() - t
e = m.engine(n_slots=1, n_threads=2)
e.prefill(0, toks[:1000], reuse=False)
t = time.perf_counter()
for i in range(128):
    e.decode([0], [toks[1000 + i]])
out["decode 128 steps at 1000"] = time.perf_counter() - t
e = m.engine(n_slots=1, n_threads=2)
e.prefill(0, toks[:576], reuse=False)
branches = [toks[600 + 37 * i:637 + 37 * i] for i in range(64)]
t = time.perf_counter(); e.prefill_branches(0, branches); out["64 branches x 37 after 576"] = time.perf_counter() - t
print(json.dumps(out))
"""


def build_base(rev: str) -> Path:
    """The engine at `rev`, built in place into build/engine-ab/<rev> (once)."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    dest = ROOT / "build" / "engine-ab" / sha
    if not any(dest.glob("colibri/_engine*.so")):
        dest.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "archive", sha, "csrc", "pyx", "colibri", "setup.py", "pyproject.toml", "README.md"], cwd=ROOT,
                             check=True, capture_output=True).stdout
        tarfile.open(fileobj=BytesIO(tar)).extractall(dest, filter="data")
        print(f"building the engine at {sha} in {dest} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=dest, check=True,
                       capture_output=True)
    return dest


def run(tree: Path, model: str) -> dict[str, float]:
    p = subprocess.run([sys.executable, "-c", WORKER, str(tree), model], check=True, capture_output=True, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare against (e.g. HEAD~1)")
    ap.add_argument("--model", help="a model directory (default: SmolLM2-135M-Instruct float32 from the peers cache)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the results here")
    a = ap.parse_args()
    if a.model is None:
        sys.path.insert(0, str(ROOT / "bench" / "peers"))
        from catalog import TRANSFORMERS
        from run import ensure_installed
        from smollm2 import HF_DIR

        ensure_installed(TRANSFORMERS)  # its venv converts the GGUF into the float32 folder
        a.model = str(HF_DIR)
    base = build_base(a.base)
    best: dict[str, dict[str, float]] = {"base": {}, "new": {}}
    for i in range(a.rounds):
        for name, tree in (("base", base), ("new", ROOT)) if i % 2 == 0 else (("new", ROOT), ("base", base)):
            for k, v in run(tree, a.model).items():
                best[name][k] = min(v, best[name].get(k, v))
        print(f"round {i + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    print(f"| workload | base {a.base} | working tree | speed-up |\n|---|---|---|---|")
    for k in best["base"]:
        b, n = best["base"][k], best["new"][k]
        print(f"| {k} | {b:.3f} s | {n:.3f} s | {b / n:.2f}x |")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"base": a.base, "model": a.model, "rounds": a.rounds, "best_seconds": best,
                                      "date": time.strftime("%Y-%m-%d")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
