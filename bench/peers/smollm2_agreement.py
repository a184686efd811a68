"""Greedy and log-probability agreement on SmolLM2-135M-Instruct. Runs: colibri on the Q4_1
GGUF kept quantized (the reference row), the same file expanded to F32 at load, the float32
directory made from that GGUF (the same weights, dequantized), transformers on that
directory, and llama.cpp (llama-cpp-python) on the GGUF. Twenty fixed prompts, 32 greedy
tokens each, rendered by the model's own chat template, fed as the same token ids to every
engine; prints a table and writes JSON.

Log probabilities: over every position of each prompt plus the reference continuation, the
log-softmax of the next token the reference chose, from colibri kept quantized, colibri
expanded to F32 and llama.cpp. The format's own error is kept-quantized vs F32 (the input
rounding of the block kernels); llama.cpp rounds its inputs the same way (Q8_1 blocks), so
it should sit closer to the kept-quantized run than that.

Usage (the peers cache must hold the model; `python bench/peers/run.py --only transformers`
builds it):
  PYTHONPATH=. python bench/peers/smollm2_agreement.py [--format Q4_1] [--json build/bench/smollm2-agreement.json]

`--format` takes another file llama-quantize makes from the shipped one (bench/peers/gguf_bench.py,
e.g. Q4_K_M); its float32 folder is dequantized from that file in turn.

The transformers side runs in the peers' transformers venv (it has torch), as a child process.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachedir import CACHE  # noqa: E402
from gguf_bench import ensure_format  # noqa: E402
from smollm2 import ensure_hf_dir  # noqa: E402

from colibri.chat_template import render  # noqa: E402
from colibri.model import Model  # noqa: E402

GGUF = CACHE / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_DIR = CACHE / "model" / "SmolLM2-135M-Instruct-f32"
TRANSFORMERS_PY = CACHE / "venvs" / "transformers" / "bin" / "python"
LLAMA_CPP_PY = CACHE / "venvs" / "llama-cpp-python" / "bin" / "python"
N_TOKENS = 32
PROMPTS = [
    "What is the capital of France?", "Name three colours.", "What is 2 + 2?", "Write a haiku about rain.",
    "Who wrote Romeo and Juliet?", "Translate 'good morning' into Spanish.", "What is the boiling point of water?",
    "Give me a synonym for happy.", "How many legs does a spider have?", "What is photosynthesis?",
    "Tell me a joke.", "What is the largest planet in the solar system?", "Explain gravity in one sentence.",
    "List the days of the week.", "What does a cat say?", "What is the opposite of hot?",
    "Write a short greeting for a birthday card.", "What language is spoken in Brazil?",
    "What is the square root of 81?", "Suggest a name for a pet fish.",
]


def prompt_ids(model: Model) -> list[list[int]]:
    return [model.encode(render(model.template(), [{"role": "user", "content": p}])) for p in PROMPTS]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def colibri_chosen_logprobs(model: Model, seqs: list[list[int]], dequantize: bool) -> list[list[float]]:
    """Per sequence, the log-probability each position gives the next token of the sequence."""
    eng = model.engine(n_slots=1, n_threads=2, dequantize=dequantize)
    out = []
    for seq in seqs:
        _, logits = eng.prefill(0, seq, reuse=False, all_logits=True)
        lp = log_softmax(logits[:-1])
        out.append(lp[np.arange(len(seq) - 1), seq[1:]].tolist())
    return out


def colibri_greedy(model: Model, dequantize: bool = False) -> list[list[int]]:
    eng = model.engine(n_slots=1, n_threads=2, dequantize=dequantize)
    out = []
    for ids in prompt_ids(model):
        _, logits = eng.prefill(0, ids)
        toks: list[int] = []
        for _ in range(N_TOKENS):
            t = int(np.argmax(logits))
            toks.append(t)
            if t in model.eos_ids:
                break
            logits = eng.decode([0], [t])[0]
        out.append(toks)
    return out


TRANSFORMERS_SIDE = textwrap.dedent("""
    import json, sys, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path, prompts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    for p in prompts:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=2, pad_token_id=2)
        out.append(gen[0, ids.shape[1]:].tolist())
    print(json.dumps(out))
""")


LLAMA_CPP_SIDE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from llama_cpp import Llama
    path, prompts, n, seqs = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    llm = Llama(model_path=path, n_ctx=512, n_threads=2, n_batch=512, logits_all=True, verbose=False)
    greedy = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        toks = []
        for _ in range(n):
            t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            toks.append(t)
            if t == 2:
                break
            llm.eval([t])
        greedy.append(toks)
    chosen = []
    for seq in seqs:
        llm.reset()
        llm.eval(seq)
        x = llm.scores[:len(seq) - 1].astype(np.float64)
        x -= x.max(axis=1, keepdims=True)
        lp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
        chosen.append(lp[np.arange(len(seq) - 1), seq[1:]].tolist())
    print(json.dumps({"greedy": greedy, "chosen": chosen}))
""")


def llama_cpp_run(gguf: Path, prompts: list[list[int]], seqs: list[list[int]]) -> dict:
    done = subprocess.run([str(LLAMA_CPP_PY), "-c", LLAMA_CPP_SIDE, str(gguf), json.dumps(prompts), str(N_TOKENS),
                           json.dumps(seqs)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def transformers_greedy(hf_dir: Path) -> list[list[int]]:
    done = subprocess.run([str(TRANSFORMERS_PY), "-c", TRANSFORMERS_SIDE, str(hf_dir), json.dumps(PROMPTS),
                           str(N_TOKENS)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", default="Q4_1", help="the GGUF format (default Q4_1, the shipped file)")
    ap.add_argument("--json", type=Path, default=Path("build/bench/smollm2-agreement.json"))
    args = ap.parse_args()
    fmt = args.format
    gguf = GGUF if fmt == "Q4_1" else ensure_format(fmt)
    hf_dir = HF_DIR if fmt == "Q4_1" else ensure_hf_dir(TRANSFORMERS_PY, gguf, gguf.parent / f"{gguf.stem}-f32")
    gguf_model, dir_model = Model(gguf), Model(hf_dir)
    prompts = prompt_ids(gguf_model)
    reference = colibri_greedy(gguf_model)
    seqs = [p + r for p, r in zip(prompts, reference, strict=True)]
    llama_cpp = llama_cpp_run(gguf, prompts, seqs)
    runs = {f"colibri GGUF {fmt} (kept quantized)": reference,
            f"colibri GGUF {fmt} expanded to F32": colibri_greedy(gguf_model, dequantize=True),
            "colibri F32 directory": colibri_greedy(dir_model),
            "transformers F32 directory": transformers_greedy(hf_dir),
            f"llama.cpp (llama-cpp-python) GGUF {fmt}": llama_cpp["greedy"]}
    names = list(runs)
    rows = []
    for i, p in enumerate(PROMPTS):
        seqs_i = [runs[n][i] for n in names]
        base = seqs_i[0]
        rows.append({"prompt": p, "text": gguf_model.tokenizer.decode(base),
                     "identical": [s == base for s in seqs_i[1:]],
                     "first_difference": [next((k for k, (a, b) in enumerate(zip(base, s, strict=False)) if a != b),
                                               None if len(s) == len(base) else min(len(s), len(base)))
                                          for s in seqs_i[1:]]})
        print(f"{'==' if all(rows[-1]['identical']) else '!='} {p!r}: {rows[-1]['text'][:70]!r}")
    agree = {n: sum(r["identical"][j] for r in rows) for j, n in enumerate(names[1:])}
    print(f"identical to {names[0]} over {len(PROMPTS)} prompts x {N_TOKENS} greedy tokens: {agree}")
    f32_runs = [runs[n] for n in names[1:4]]
    same_f32 = sum(a == b == c for a, b, c in zip(*f32_runs, strict=True))
    print(f"the three F32 runs (colibri expanded, colibri directory, transformers) identical to each other: "
          f"{same_f32}/{len(PROMPTS)}")

    # Where kept-quantized and F32 part, how close was the choice? The log-prob margin of the F32
    # run's token over the kept run's token, in the F32 run, at the first differing position.
    f32_eng = gguf_model.engine(n_slots=1, n_threads=2, dequantize=True)
    for i, row in enumerate(rows):
        k = row["first_difference"][0]
        if row["identical"][0] or k is None or k >= min(len(reference[i]), len(runs[names[1]][i])):
            continue
        _, logits = f32_eng.prefill(0, prompts[i] + reference[i][:k], reuse=False)
        lp = log_softmax(logits)
        row["f32_margin_at_first_difference"] = float(lp[runs[names[1]][i][k]] - lp[reference[i][k]])
    margins = [r["f32_margin_at_first_difference"] for r in rows if "f32_margin_at_first_difference" in r]
    if margins:
        print(f"kept vs F32: {len(margins)} prompts part; F32's log-prob margin where they part: "
              f"median {np.median(margins):.3f}, max {max(margins):.3f}")

    kept = np.concatenate([np.array(x) for x in colibri_chosen_logprobs(gguf_model, seqs, dequantize=False)])
    f32 = np.concatenate([np.array(x) for x in colibri_chosen_logprobs(gguf_model, seqs, dequantize=True)])
    llama = np.concatenate([np.array(x) for x in llama_cpp["chosen"]])
    pairs = {"kept quantized vs F32 (the format's error)": (kept, f32), "llama.cpp vs kept quantized": (llama, kept),
             "llama.cpp vs F32": (llama, f32)}
    logprobs = {}
    for name, (a, b) in pairs.items():
        d = np.abs(a - b)
        logprobs[name] = {"positions": int(d.size), "mean_abs": float(d.mean()), "p99_abs": float(np.quantile(d, 0.99)),
                          "max_abs": float(d.max())}
        print(f"log-prob of the chosen token, {name}: mean |diff| {d.mean():.4f}, p99 {np.quantile(d, 0.99):.4f}, "
              f"max {d.max():.4f} over {d.size} positions")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"reference": names[0], "agreement": agree, "f32_runs_identical": same_f32,
                                     "logprobs": logprobs, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
