"""How sharp each attention head is in an exported checkpoint: the largest pre-softmax score and
each head's mean entropy over one validation conversation. Collapsed attention (scores in the
hundreds, entropies near 0 in every head past the first layer) is what a too-high learning
rate did at d=320 (training/README "Wider, in bf16"): the loss then stalls near 2.5 and the
model never learns to copy. train.py exports every 1000 steps, so this can be run on a
checkpoint while training goes on (it is one forward pass).

Usage: python training/attention.py MODEL_DIR [--corpus build/corpus] [--tokens 300]
Needs torch (the training venv).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from train import Config, Llama, hf_names, rotate_half


def load(path: Path) -> Llama:
    """train.py's model with the weights of an exported folder (widened to float32)."""
    cfg = json.loads((path / "config.json").read_text())
    model = Llama(Config(vocab=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
                         n_heads=cfg["num_attention_heads"], n_kv_heads=cfg["num_key_value_heads"],
                         ffn=cfg["intermediate_size"]))
    sd = {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}
    model.load_state_dict({ours: sd[theirs] for ours, theirs in hf_names(len(model.layers)).items()})
    return model


@torch.no_grad()
def report(model: Llama, ids: torch.Tensor) -> list[tuple[float, list[float]]]:
    """Per layer: (largest |score|, mean entropy in nats of each query head)."""
    c, T = model.cfg, ids.shape[1]
    hd = c.dim // c.n_heads
    cos, sin = model.cos[:T], model.sin[:T]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x, out = model.embed(ids), []
    for layer in model.layers:
        h = layer.input_layernorm(x)
        q = layer.q_proj(h).view(1, T, c.n_heads, hd).transpose(1, 2)
        k = layer.k_proj(h).view(1, T, c.n_kv_heads, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(c.n_heads // c.n_kv_heads, dim=1)
        s = (q @ k.transpose(-1, -2)) / hd ** 0.5  # (1, heads, T, T)
        top = float(s.masked_fill(future, 0.0).abs().max())
        p = s.masked_fill(future, float("-inf")).softmax(-1)
        ent = -(p * p.clamp_min(1e-12).log()).sum(-1).mean(-1)[0]
        out.append((top, [float(e) for e in ent]))
        x = layer(x, cos, sin)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--corpus", type=Path, default=Path("build/corpus"), help="its valid.jsonl's first conversation")
    ap.add_argument("--tokens", type=int, default=300)
    a = ap.parse_args()
    tok = Tokenizer.from_file(str(a.model / "tokenizer.json"))
    with open(a.corpus / "valid.jsonl", encoding="utf-8") as f:
        text = "".join(s for s, _ in json.loads(f.readline())["segments"])
    ids = torch.tensor([tok.encode(text).ids[:a.tokens]])
    for i, (top, ent) in enumerate(report(load(a.model), ids)):
        print(f"layer {i}: max |score| {top:7.1f}  head entropies (nats) {' '.join(f'{e:.2f}' for e in ent)}")


if __name__ == "__main__":
    main()
