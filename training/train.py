"""Train the embedded Llama-architecture chat model and export it in Hugging Face layout.

Usage: python training/train.py --corpus build/corpus --out colibri/models/tiny --max-steps 6000
Needs torch==2.13.0 (CPU). Loss is on the assistant target only. The schedule is by step,
not wall time, so a re-run takes the same steps (bit-identical weights across machines are
not promised: thread count and CPU change float results).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from targets import segment_ids
from tokenizers import Tokenizer


class Config:
    def __init__(self, **kw):
        self.dim = kw.get("dim", 128)
        self.n_layers = kw.get("n_layers", 4)
        self.n_heads = kw.get("n_heads", 4)
        self.n_kv_heads = kw.get("n_kv_heads", 2)
        self.ffn = kw.get("ffn", 352)
        self.vocab = kw["vocab"]
        self.seq = kw.get("seq", 512)
        self.theta = kw.get("theta", 10000.0)
        self.eps = kw.get("eps", 1e-5)


def rope_tables(cfg: Config, n: int):
    hd = cfg.dim // cfg.n_heads
    inv = 1.0 / (cfg.theta ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(n).float(), inv)  # (n, hd/2)
    return torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)  # (n, hd)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        hd = cfg.dim // cfg.n_heads
        self.cfg = cfg
        self.input_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
        self.post_attention_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        c = self.cfg
        hd = c.dim // c.n_heads
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, c.n_heads, hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
        cos, sin = rope_tables(cfg, cfg.seq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg.n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, self.cos[:T], self.sin[:T])
        return self.norm(x) @ self.embed.weight.T  # tied output embedding


def load_examples(path: Path, tok: Tokenizer, align: bool = False):
    """Token ids and loss masks per conversation (targets.segment_ids)."""
    return [segment_ids(tok, json.loads(line)["segments"], align) for line in open(path, encoding="utf-8")]


def pack(examples, seq: int, pad: int, rng: random.Random):
    """Windows of `seq`+1 tokens, each starting at a conversation boundary, with loss masks."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    xs, ms = [], []
    cur: list[int] = []
    mask: list[int] = []
    for i in order:
        ids, m = examples[i]
        if len(ids) > seq + 1:
            continue
        if len(cur) + len(ids) > seq + 1:
            xs.append(cur + [pad] * (seq + 1 - len(cur)))
            ms.append(mask + [0] * (seq + 1 - len(mask)))
            cur, mask = [], []
        cur += ids.tolist()
        mask += m.tolist()
    if cur:
        xs.append(cur + [pad] * (seq + 1 - len(cur)))
        ms.append(mask + [0] * (seq + 1 - len(mask)))
    return torch.tensor(xs), torch.tensor(ms, dtype=torch.float32)


def hf_names(n_layers: int) -> dict[str, str]:
    """Our parameter names -> Hugging Face LlamaForCausalLM's (the output embedding is tied)."""
    names = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    for i in range(n_layers):
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names[f"layers.{i}.{n}.weight"] = f"model.layers.{i}.self_attn.{n}.weight"
        for n in ("gate_proj", "up_proj", "down_proj"):
            names[f"layers.{i}.{n}.weight"] = f"model.layers.{i}.mlp.{n}.weight"
        for n in ("input_layernorm", "post_attention_layernorm"):
            names[f"layers.{i}.{n}.weight"] = f"model.layers.{i}.{n}.weight"
    return names


def export(model: Llama, tok: Tokenizer, out: Path, ctx: int, store: str = "float32",
           weights: dict[str, torch.Tensor] | None = None) -> None:
    """The weights in Hugging Face's Llama layout. With store="bfloat16" the matrices (embedding
    included) are written as BF16, the norms stay float32: a model trained under bf16 autocast
    already multiplied by BF16-rounded matrices, so storing them so loses nothing it used."""
    c = model.cfg
    ours = model.state_dict() if weights is None else weights  # weights: other values, the model's names
    sd = {theirs: ours[mine] for mine, theirs in hf_names(c.n_layers).items()}
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[store]
    sd = {k: v.detach().to(dt if v.dim() == 2 else torch.float32).contiguous().clone() for k, v in sd.items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c.dim,
        "intermediate_size": c.ffn, "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads, "vocab_size": c.vocab, "max_position_embeddings": ctx,
        "rms_norm_eps": c.eps, "rope_theta": c.theta, "tie_word_embeddings": True, "hidden_act": "silu",
        "torch_dtype": "float32", "bos_token_id": None,
        "eos_token_id": [tok.token_to_id(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>", "<|im_end|>")],
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


class WeightAverage:
    """An exponential moving average of the weights over the steps after `start`, bias-corrected
    so that it is a true weighted mean of those steps' weights (the steps before it, far from
    the end, take no part). Averaging the last steps' weights smooths out the noise of the last
    batches, which is what makes two seeds of one recipe differ (training/README, "Two seeds")."""

    def __init__(self, model: Llama, decay: float, start: int):
        self.decay, self.start, self.n = decay, start, 0
        self.acc = {k: torch.zeros_like(p, dtype=torch.float32) for k, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: Llama, step: int) -> None:
        if step <= self.start:
            return
        self.n += 1
        for k, p in model.named_parameters():
            self.acc[k].mul_(self.decay).add_(p.detach().float(), alpha=1 - self.decay)

    def export(self, model: Llama, tok: Tokenizer, out: Path, ctx: int, store: str) -> None:
        """OUT/ema-DECAY/: the averaged weights, with the tokenizer and templates of OUT."""
        if self.n == 0:
            return
        dest = out / f"ema-{self.decay:g}"
        if not dest.exists():
            dest.mkdir(parents=True)
            for f in [out / "tokenizer.json", *out.glob("*.jinja")]:
                shutil.copyfile(f, dest / f.name)
        mean = {k: a / (1 - self.decay ** self.n) for k, a in self.acc.items()}
        export(model, tok, dest, ctx, store, weights=mean)


def load_exported(model: Llama, src: Path) -> None:
    """Start from the weights of an exported model directory (what export() writes, e.g. the
    shipped colibri/models/tiny): a fine-tune instead of a run from random weights. The shape
    must be the model's; a missing or misshapen tensor is refused by name."""
    path = src / "model.safetensors"
    if not path.is_file():
        raise SystemExit(f"train.py: --init-from {src}: no model.safetensors there")
    theirs = load_file(str(path))
    mine = model.state_dict()
    sd = {}
    for name, hf in hf_names(model.cfg.n_layers).items():
        if hf not in theirs:
            raise SystemExit(f"train.py: --init-from {src}: no tensor {hf}")
        if tuple(theirs[hf].shape) != tuple(mine[name].shape):
            raise SystemExit(f"train.py: --init-from {src}: {hf} is {tuple(theirs[hf].shape)}, "
                             f"this run's shape wants {tuple(mine[name].shape)}")
        sd[name] = theirs[hf].to(torch.float32)
    model.load_state_dict(sd)


CHECKPOINT = "checkpoint.pt"
#: The settings a resumed run must share with the run that wrote the checkpoint.
RUN_SETTINGS = ("corpus", "max_steps", "batch", "seq", "lr", "warmup", "seed", "bf16", "dim", "layers", "heads",
                "kv_heads", "ffn", "ema", "ema_start", "align_copies", "init_from")


def save_checkpoint(path: Path, a: argparse.Namespace, step: int, model: Llama, opt: torch.optim.Optimizer,
                    averages: list[WeightAverage], pos: int, smooth: float | None, packed_from: object) -> None:
    """Everything the next step depends on, written beside and then renamed over the old file,
    so that a run stopped while writing keeps the previous checkpoint."""
    state = {"step": step, "settings": {k: getattr(a, k) for k in RUN_SETTINGS}, "model": model.state_dict(),
             "opt": opt.state_dict(), "pos": pos, "smooth": smooth, "packed_from": packed_from,
             "torch_rng": torch.get_rng_state(), "averages": [(avg.n, avg.acc) for avg in averages]}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def resume(path: Path, a: argparse.Namespace, model: Llama, opt: torch.optim.Optimizer,
           averages: list[WeightAverage]) -> tuple[int, int, float | None, object]:
    """Load a checkpoint into the model, optimizer and averages; returns the first step to run,
    the data position, the smoothed loss and the random state the current packing came from."""
    if not path.exists():
        raise SystemExit(f"train.py: --resume, but there is no {path}")
    state = torch.load(path, weights_only=False)
    differ = {k: (v, getattr(a, k)) for k, v in state["settings"].items() if getattr(a, k) != v}
    if differ:
        raise SystemExit("train.py: --resume with other settings than the checkpoint's: "
                         + ", ".join(f"--{k.replace('_', '-')} {new} (checkpoint: {old})" for k, (old, new) in differ.items()))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["torch_rng"])
    for avg, (n, acc) in zip(averages, state["averages"], strict=True):
        avg.n, avg.acc = n, acc
    return state["step"] + 1, state["pos"], state["smooth"], state["packed_from"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--out", default="colibri/models/tiny")
    ap.add_argument("--max-steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=2048, help="context written to config.json")
    ap.add_argument("--lr", type=float, default=3e-3,
                    help="peak learning rate; at d=320, 3e-3 collapsed attention and 1.5e-3 with --warmup 300 did "
                         "not (training/README)")
    ap.add_argument("--warmup", type=int, default=50, help="steps of linear warm-up")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--bf16", action="store_true",
                    help="matrix products under bf16 autocast (float32 master weights); 1.4x faster here, with AMX")
    ap.add_argument("--store", choices=["float32", "bfloat16"], default="float32",
                    help="dtype of the exported matrices (norms stay float32); bfloat16 halves the file")
    # The shape; the defaults are the shipped model's (1.97M parameters, 7.9 MB as float32). The
    # first shipped model and the d=128 runs of training/README: --dim 128 --heads 4 --ffn 352.
    ap.add_argument("--dim", type=int, default=192, help="hidden size")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=512, help="intermediate size of the MLP")
    ap.add_argument("--ema", type=float, nargs="*", default=[], metavar="DECAY",
                    help="also keep an exponential moving average of the weights for each DECAY (e.g. 0.999), "
                         "from --ema-start on, exported beside the last weights to OUT/ema-DECAY/ with the "
                         "tokenizer and templates, so that both come from one run and can be compared")
    ap.add_argument("--ema-start", type=float, default=0.5,
                    help="the fraction of --max-steps after which the averages start (default 0.5)")
    ap.add_argument("--checkpoint-every", type=int, default=1000, metavar="STEPS",
                    help="write OUT/checkpoint.pt (weights, optimizer, data position, random states, "
                         "averages) every STEPS steps, with the exported weights (default 1000)")
    ap.add_argument("--until", type=int, default=None, metavar="STEP",
                    help="stop after this step, with a checkpoint, so that a run longer than one sitting "
                         "goes on later with --resume (the schedule stays that of --max-steps)")
    ap.add_argument("--align-copies", action="store_true",
                    help="tokenize a target word the context holds after a space in the context's pieces "
                         "(training/targets.py)")
    ap.add_argument("--init-from", default=None, metavar="DIR",
                    help="start from the weights exported in DIR (model.safetensors of this run's shape) "
                         "instead of random ones: a fine-tune; pair it with a lower --lr")
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUT/checkpoint.pt; the run's settings must equal the checkpoint's")
    a = ap.parse_args()
    if any(not 0 < d < 1 for d in a.ema) or not 0 <= a.ema_start < 1:
        ap.error("each --ema DECAY must lie in (0, 1) and --ema-start in [0, 1)")
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    out = Path(a.out)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    train = load_examples(Path(a.corpus) / "train.jsonl", tok, a.align_copies)
    valid = load_examples(Path(a.corpus) / "valid.jsonl", tok, a.align_copies)
    if a.dim % a.heads or a.heads % a.kv_heads:
        ap.error(f"--dim ({a.dim}) must divide by --heads ({a.heads}), and --heads by --kv-heads ({a.kv_heads})")
    cfg = Config(vocab=tok.get_vocab_size(), seq=a.seq, dim=a.dim, n_layers=a.layers, n_heads=a.heads,
                 n_kv_heads=a.kv_heads, ffn=a.ffn)
    model = Llama(cfg)
    if a.init_from and not a.resume:  # a resumed run takes its weights from the checkpoint
        load_exported(model, Path(a.init_from))
    print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M, train examples {len(train)}", flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    step_fn = model if a.no_compile else torch.compile(model)
    pad = tok.token_to_id("<|pad|>")
    vx, vm = pack(valid, a.seq, pad, random.Random(0))
    averages = [WeightAverage(model, d, int(a.ema_start * a.max_steps)) for d in a.ema]
    pos, smooth, t0, first = 0, None, time.time(), 1
    if a.resume:
        first, pos, smooth, packed_from = resume(out / CHECKPOINT, a, model, opt, averages)
        rng.setstate(packed_from)  # packed again below: the same windows in the same order
        print(f"resumed after step {first - 1} from {out / CHECKPOINT}", flush=True)
    packed_from = rng.getstate()  # the state the current packing was drawn from
    X, M = pack(train, a.seq, pad, rng)
    last = min(a.max_steps, a.until or a.max_steps)
    for step in range(first, last + 1):
        if pos + a.batch > len(X):
            packed_from = rng.getstate()
            X, M = pack(train, a.seq, pad, rng)
            pos = 0
        x, m = X[pos:pos + a.batch], M[pos:pos + a.batch]
        pos += a.batch
        warm = min(1.0, step / a.warmup)
        lr = a.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.max_steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = step_fn(x[:, :-1])
        loss = (F.cross_entropy(logits.float().reshape(-1, cfg.vocab), x[:, 1:].reshape(-1), reduction="none")
                * m[:, 1:].reshape(-1)).sum() / m[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for avg in averages:
            avg.update(model, step)
        smooth = loss.item() if smooth is None else 0.98 * smooth + 0.02 * loss.item()
        if step % 100 == 0 or step == a.max_steps:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                vl = model(vx[:16, :-1]).float()
                vloss = ((F.cross_entropy(vl.reshape(-1, cfg.vocab), vx[:16, 1:].reshape(-1), reduction="none")
                          * vm[:16, 1:].reshape(-1)).sum() / vm[:16, 1:].sum()).item()
            print(f"step {step}/{a.max_steps} loss {smooth:.4f} val {vloss:.4f} lr {lr:.2e} "
                  f"{time.time() - t0:.0f}s", flush=True)
        if step % 1000 == 0 or step == a.max_steps:
            export(model, tok, out, a.ctx, a.store)
            for avg in averages:
                avg.export(model, tok, out, a.ctx, a.store)
        if step < a.max_steps and (step % a.checkpoint_every == 0 or step == last):
            save_checkpoint(out / CHECKPOINT, a, step, model, opt, averages, pos, smooth, packed_from)
    if last < a.max_steps:
        print(f"stopped after step {last} of {a.max_steps} in {time.time() - t0:.0f}s; go on with --resume",
              flush=True)
        return
    (out / CHECKPOINT).unlink(missing_ok=True)  # the run is complete: nothing left to resume
    print(f"done in {time.time() - t0:.0f}s -> {out}", flush=True)


if __name__ == "__main__":
    main()
