"""Greedy agreement on SmolLM2-135M-Instruct: colibri on the Q4_1 GGUF, colibri on the
float32 directory made from that GGUF (the same weights, dequantized), and transformers on
that directory. Twenty fixed prompts, 32 greedy tokens each, rendered by the model's own
chat template; prints a table and writes JSON.

Usage (the peers cache must hold the model; `python bench/peers/run.py --only transformers`
builds it):
  PYTHONPATH=. python bench/peers/smollm2_agreement.py [--json build/bench/smollm2-agreement.json]

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

from colibri.chat_template import render  # noqa: E402
from colibri.model import Model  # noqa: E402

GGUF = CACHE / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_DIR = CACHE / "model" / "SmolLM2-135M-Instruct-f32"
TRANSFORMERS_PY = CACHE / "venvs" / "transformers" / "bin" / "python"
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


def colibri_greedy(model: Model) -> list[list[int]]:
    eng = model.engine(n_slots=1, n_threads=2)
    out = []
    for p in PROMPTS:
        ids = model.encode(render(model.template(), [{"role": "user", "content": p}]))
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


def transformers_greedy() -> list[list[int]]:
    done = subprocess.run([str(TRANSFORMERS_PY), "-c", TRANSFORMERS_SIDE, str(HF_DIR), json.dumps(PROMPTS),
                           str(N_TOKENS)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=Path("build/bench/smollm2-agreement.json"))
    args = ap.parse_args()
    gguf_model, dir_model = Model(GGUF), Model(HF_DIR)
    runs = {"colibri GGUF Q4_1": colibri_greedy(gguf_model), "colibri F32 directory": colibri_greedy(dir_model),
            "transformers F32 directory": transformers_greedy()}
    names = list(runs)
    rows = []
    for i, p in enumerate(PROMPTS):
        seqs = [runs[n][i] for n in names]
        base = seqs[0]
        rows.append({"prompt": p, "text": gguf_model.tokenizer.decode(base),
                     "identical": [s == base for s in seqs[1:]],
                     "first_difference": [next((k for k, (a, b) in enumerate(zip(base, s, strict=False)) if a != b),
                                               None if len(s) == len(base) else min(len(s), len(base)))
                                          for s in seqs[1:]]})
        print(f"{'==' if all(rows[-1]['identical']) else '!='} {p!r}: {rows[-1]['text'][:70]!r}")
    agree = {n: sum(r["identical"][j] for r in rows) for j, n in enumerate(names[1:])}
    print(f"identical to {names[0]} over {len(PROMPTS)} prompts x {N_TOKENS} greedy tokens: {agree}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"reference": names[0], "agreement": agree, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
