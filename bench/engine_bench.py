"""Engine benchmarks: decode (1 slot, 4-slot aggregate), prefill, time to first token with and
without a 1000-token shared prefix — on the embedded model and a ~100M-parameter random
Llama, each beside a PyTorch eager baseline with a KV cache on the same weights, same
threads, same run. Prints a Markdown table; --json writes the numbers.

Usage: python bench/engine_bench.py [--threads 2] [--json build/bench/engine.json] [--quick]
Needs torch==2.13.0 for the baseline (tox -e bench installs it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from llama_reference import write_random_model  # noqa: E402

from colibri.model import ModelConfig, open_engine  # noqa: E402
from colibri.paths import EMBEDDED_MODEL  # noqa: E402


def best_of(fn, repeat: int, setup=None) -> float:
    """The fastest of `repeat` timed calls of fn; setup (untimed) runs before each."""
    times = []
    for _ in range(repeat):
        if setup:
            setup()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def decode_rates(steps: int, repeat: int, one: tuple, four: tuple) -> dict[str, float]:
    """1-slot and 4-slot decode tokens/s from (run, untimed setup) pairs. The runs alternate,
    so a slow spell of this shared machine hits both; the best of `repeat` each is kept."""
    best_1 = best_4 = float("inf")
    for _ in range(repeat):
        best_1 = min(best_1, best_of(one[0], 1, one[1]))
        best_4 = min(best_4, best_of(four[0], 1, four[1]))
    return {"decode_1slot_tok_s": steps / best_1, "decode_4slot_aggregate_tok_s": 4 * steps / best_4}


def engine(path: Path, slots: int, threads: int):
    cfg = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
    return open_engine(path / "model.safetensors", cfg, n_slots=slots, n_threads=threads)


def toks(n: int, vocab: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(10, vocab, n).tolist()


def bench_engine(path: Path, vocab: int, threads: int, steps: int, repeat: int) -> dict[str, float]:
    out: dict[str, float] = {}
    e1 = engine(path, 1, threads)
    prompt = toks(512, vocab, 1)
    out["prefill_tok_s"] = 512 / best_of(lambda: e1.prefill(0, prompt, reuse=False), repeat)

    # Decode is timed alone: each run starts from freshly prefilled 16-token prompts (untimed),
    # so the 4-slot figure does not carry four prefills against the 1-slot figure's one. The
    # 1-slot and 4-slot runs alternate, so a slow spell on this shared machine hits both.
    e4 = engine(path, 4, threads)

    def decode_1():
        for i in range(steps):
            e1.decode([0], [prompt[i]])

    def prefill_4():
        for s in range(4):
            e4.prefill(s, toks(16, vocab, 10 + s), reuse=False)

    def decode_4():
        for i in range(steps):
            e4.decode([0, 1, 2, 3], [prompt[i]] * 4)

    out.update(decode_rates(steps, repeat, (decode_1, lambda: e1.prefill(0, prompt[:16], reuse=False)),
                            (decode_4, prefill_4)))
    shared = toks(1000, vocab, 2)
    tails = [toks(24, vocab, 100 + r) for r in range(repeat)]

    def ttft_cold():
        e1.prefill(0, shared + tails[0], reuse=False)
        e1.decode([0], [5])

    def ttft_warm(i=[0]):  # noqa: B006 - a counter so each run has a new tail
        e1.prefill(0, shared + tails[i[0] % len(tails)], reuse=True)
        e1.decode([0], [5])
        i[0] += 1

    out["ttft_cold_s"] = best_of(ttft_cold, repeat)
    e1.prefill(0, shared)
    out["ttft_shared_prefix_s"] = best_of(ttft_warm, repeat)
    return out


def bench_torch(path: Path, vocab: int, threads: int, steps: int, repeat: int) -> dict[str, float]:
    """The same measurements on the PyTorch eager baseline (4 slots: a batch of 4 sequences;
    the shared prefix: the cache truncated back to it)."""
    import torch
    from torch_reference import TorchLlama

    torch.set_num_threads(threads)
    m = TorchLlama(path)
    m4 = TorchLlama(path, batch=4)
    prompt = toks(512, vocab, 1)

    def prefill():
        m.reset()
        m.forward(prompt)

    out = {"prefill_tok_s": 512 / best_of(prefill, repeat)}

    def setup_1():
        m.reset()
        m.forward(prompt[:16])

    def decode_1():
        for i in range(steps):
            m.forward([prompt[i]])

    def setup_4():
        m4.reset()
        m4.forward([toks(16, vocab, 10 + s) for s in range(4)])

    def decode_4():
        for i in range(steps):
            m4.forward([[prompt[i]]] * 4)

    out.update(decode_rates(steps, repeat, (decode_1, setup_1), (decode_4, setup_4)))
    shared = toks(1000, vocab, 2)
    tails = [toks(24, vocab, 100 + r) for r in range(repeat)]

    def ttft_cold():
        m.reset()
        m.forward(shared + tails[0])
        m.forward([5])

    def ttft_warm(i=[0]):  # noqa: B006 - a counter so each run has a new tail
        m.truncate(1000)
        m.forward(tails[i[0] % len(tails)])
        m.forward([5])
        i[0] += 1

    out["ttft_cold_s"] = best_of(ttft_cold, repeat)
    m.reset()
    m.forward(shared)
    out["ttft_shared_prefix_s"] = best_of(ttft_warm, repeat)
    return out


_MEMORY_PROBE = """
import json, sys
from pathlib import Path
from colibri.model import ModelConfig, open_engine
p = Path(sys.argv[1])
e = open_engine(p / "model.safetensors", ModelConfig.from_hf(json.loads((p / "config.json").read_text())), 1, 2)
e.prefill(0, [1, 2, 3])
for _ in range(8):
    e.decode([0], [4])
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec.
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"rss_mb": int(status["VmRSS"].split()[0]) / 1024, "peak_mb": int(status["VmHWM"].split()[0]) / 1024}))
"""


def engine_memory_mb(path: Path) -> dict[str, float]:
    """Resident and peak memory of a fresh process that loads the model and decodes a few
    steps (a process of its own: this one holds several engines and torch)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, str(path)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return json.loads(out.stdout)


def copy_bandwidth_gb_s() -> float:
    """Single-stream copy bandwidth of a 512 MiB buffer (read + write bytes per second)."""
    a = np.ones(128 * 2**20, np.float32)
    b = np.empty_like(a)
    t = best_of(lambda: np.copyto(b, a), 5)
    return 2 * a.nbytes / t / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats (smoke run)")
    a = ap.parse_args()
    steps, repeat = (16, 1) if a.quick else (128, 5)
    big = ROOT / "build" / "bench" / "random-100m"
    if not (big / "model.safetensors").exists():
        print("writing the ~100M random model ...", file=sys.stderr)
        write_random_model(big, seed=0, dim=768, hidden=2048, layers=12, heads=12, kv_heads=4, vocab=32000, ctx=2048)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, path in (("embedded", EMBEDDED_MODEL), ("random-100m", big)):
        vocab = json.loads((path / "config.json").read_text())["vocab_size"]
        print(f"{name}: engine ...", file=sys.stderr)
        results[name] = {"engine": bench_engine(path, vocab, a.threads, steps, repeat), "memory": engine_memory_mb(path)}
        try:
            print(f"{name}: torch ...", file=sys.stderr)
            results[name]["torch"] = bench_torch(path, vocab, a.threads, steps, repeat)
        except ImportError:
            print("torch not installed: baseline skipped", file=sys.stderr)
    bw = copy_bandwidth_gb_s()
    weights_gb = (big / "model.safetensors").stat().st_size / 1e9
    meta = {"threads": a.threads, "machine": f"{platform.machine()} {os.cpu_count()} cores", "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "copy_bandwidth_gb_s": bw, "random_100m_weights_gb": weights_gb}
    print(f"\n{meta['date']}, {meta['machine']}, {a.threads} threads, copy bandwidth {bw:.1f} GB/s\n")
    print("| model | metric | colibri engine | PyTorch eager | ratio |\n|---|---|---|---|---|")
    for name, r in results.items():
        e, t = r["engine"], r.get("torch", {})
        for k in ("prefill_tok_s", "decode_1slot_tok_s", "decode_4slot_aggregate_tok_s"):
            ratio = f"{e[k] / t[k]:.2f}x" if k in t else "—"
            print(f"| {name} | {k} | {e[k]:.0f} | {t.get(k, float('nan')):.0f} | {ratio} |")
        print(f"| {name} | 4-slot aggregate / 1 slot | {e['decode_4slot_aggregate_tok_s'] / e['decode_1slot_tok_s']:.2f}x | "
              + (f"{t['decode_4slot_aggregate_tok_s'] / t['decode_1slot_tok_s']:.2f}x" if t else "—") + " | — |")
        for who, x in (("colibri", e), ("torch", t)):
            if x:
                print(f"| {name} | ttft cold / shared 1000-token prefix, {who} (ms) | {1e3 * x['ttft_cold_s']:.1f} / "
                      f"{1e3 * x['ttft_shared_prefix_s']:.1f} | — | {100 * x['ttft_shared_prefix_s'] / x['ttft_cold_s']:.1f}% of cold |")
    for name, r in results.items():
        weights_mb = (EMBEDDED_MODEL if name == "embedded" else big).joinpath("model.safetensors").stat().st_size / 2**20
        print(f"{name}: {weights_mb:.0f} MB of weights; resident {r['memory']['rss_mb']:.0f} MB after load and "
              f"decode, peak {r['memory']['peak_mb']:.0f} MB")
    d = results["random-100m"]["engine"]["decode_1slot_tok_s"]
    print(f"\nrandom-100m decode reads {weights_gb:.2f} GB of weights per token: {d * weights_gb:.1f} GB/s achieved "
          f"= {100 * d * weights_gb / bw:.0f}% of the measured copy bandwidth")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))


if __name__ == "__main__":
    main()
