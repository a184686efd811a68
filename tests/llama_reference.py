"""A NumPy Llama forward pass that reads a model directory (config.json + model.safetensors)
on its own: the reference the C engine must reproduce. Float64 throughout, so the
comparison measures the engine's error, not the reference's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file


def _inverse_frequencies(rope: dict, theta: float, hs: int) -> np.ndarray:
    """RoPE frequencies, vectorised: plain, linear, or Llama 3's banded scaling."""
    freq = theta ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "linear":
        return freq / rope["factor"]
    if kind == "llama3":
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wave = 2 * np.pi / freq
        scaled = np.where(wave > old / lo, freq / factor, freq)
        t = (old / wave - lo) / (hi - lo)
        middle = (wave >= old / hi) & (wave <= old / lo)
        return np.where(middle, (1 - t) * scaled / factor + t * scaled, scaled)
    # dynamic NTK scaling only changes anything past the original context, which these
    # reference runs never reach
    assert kind in ("default", "dynamic"), kind
    return freq


def _round_blocks(a: np.ndarray) -> np.ndarray:
    """Each row's 32-value blocks rounded to multiples of amax/127 (round half to even)."""
    b = a.reshape(*a.shape[:-1], -1, 32).astype(np.float32)
    amax = np.abs(b).max(-1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), np.float32(0))
    q = np.rint(b * inv)
    return (q * (amax / np.float32(127))).reshape(a.shape).astype(np.float64)


def _round_bf16(a: np.ndarray) -> np.ndarray:
    """Each value as float32 rounded to bfloat16 (to nearest, ties to even), as the avx512bf16
    kernel path rounds a BF16 matmul's inputs."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


class ReferenceLlama:
    def __init__(self, path: Path):
        cfg = json.loads((path / "config.json").read_text())
        self.dim = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.hs = cfg.get("head_dim") or self.dim // self.n_heads
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        rope = {**(cfg.get("rope_scaling") or {}), **(cfg.get("rope_parameters") or {})}
        self.theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        self.freq = _inverse_frequencies(rope, self.theta, self.hs)
        w = {k: v.astype(np.float64) for k, v in load_file(str(path / "model.safetensors")).items()}
        self.w = w
        self.lm_head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]

    def _norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def _rope(self, x, positions):  # x (T, heads, hs), rotate-half pairing
        half = self.hs // 2
        ang = positions[:, None] * self.freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def logits(self, tokens: list[int], *, quantized_inputs: bool = False, bf16_inputs: bool = False) -> np.ndarray:
        """Logits (T, vocab) for every position of `tokens`. With quantized_inputs, every
        matmul's input is first rounded the way the engine's block kernels round it (per
        32-value block to int8 steps of amax/127): the arithmetic of a Q8_0/Q4_0/Q4_1 model
        with its activation rounding, and nothing else, in float64. With bf16_inputs, rounded to
        bfloat16 instead, as the avx512bf16 path rounds a BF16 model's."""
        T = len(tokens)
        rq = _round_blocks if quantized_inputs else _round_bf16 if bf16_inputs else (lambda a: a)
        pos = np.arange(T, dtype=np.float64)
        x = self.w["model.embed_tokens.weight"][tokens]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            h = self._norm(x, self.w[p + "input_layernorm.weight"])
            q = (rq(h) @ self.w[p + "self_attn.q_proj.weight"].T).reshape(T, self.n_heads, self.hs)
            k = (rq(h) @ self.w[p + "self_attn.k_proj.weight"].T).reshape(T, self.n_kv, self.hs)
            v = (rq(h) @ self.w[p + "self_attn.v_proj.weight"].T).reshape(T, self.n_kv, self.hs)
            q, k = self._rope(q, pos), self._rope(k, pos)
            rep = self.n_heads // self.n_kv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            att = np.einsum("thd,shd->hts", q, k) / np.sqrt(self.hs) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            out = np.einsum("hts,shd->thd", att, v).reshape(T, -1)
            x = x + rq(out) @ self.w[p + "self_attn.o_proj.weight"].T
            h = self._norm(x, self.w[p + "post_attention_layernorm.weight"])
            g = rq(h) @ self.w[p + "mlp.gate_proj.weight"].T
            u = rq(h) @ self.w[p + "mlp.up_proj.weight"].T
            x = x + rq(g / (1 + np.exp(-g)) * u) @ self.w[p + "mlp.down_proj.weight"].T
        return rq(self._norm(x, self.w["model.norm.weight"])) @ self.lm_head.T


def write_random_model(path: Path, *, seed: int = 0, dim: int = 64, hidden: int = 160, layers: int = 2,
                       heads: int = 4, kv_heads: int = 2, vocab: int = 97, ctx: int = 128, tied: bool = True,
                       dtype: str = "float32", head_dim: int | None = None, rope: dict | None = None,
                       layout: str = "transformers4") -> Path:
    """A seeded random-weight Llama in the real directory layout (config.json + model.safetensors).

    `rope` holds RoPE settings beyond theta (rope_type, factor, ...); `layout` "transformers5"
    writes them, theta included, as `rope_parameters` the way transformers 5 does, and
    "transformers4" as a top-level rope_theta plus `rope_scaling`."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    hs = head_dim or dim // heads
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, dim)),
                                "model.norm.weight": rng.uniform(0.5, 1.5, dim)}
    if not tied:
        t["lm_head.weight"] = rng.normal(0, 0.2, (vocab, dim))
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, dim)
        t[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, dim)
        t[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.2, (heads * hs, dim))
        t[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.2, (kv_heads * hs, dim))
        t[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.2, (kv_heads * hs, dim))
        t[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.2, (dim, heads * hs))
        t[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.2, (hidden, dim))
        t[p + "mlp.up_proj.weight"] = rng.normal(0, 0.2, (hidden, dim))
        t[p + "mlp.down_proj.weight"] = rng.normal(0, 0.2, (dim, hidden))
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.astype(dtype) for k, v in t.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
        "intermediate_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": ctx,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": tied, "hidden_act": "silu",
        **({"head_dim": head_dim} if head_dim else {}), **_rope_layout(rope or {}, layout)}))
    return path


def _rope_layout(rope: dict, layout: str) -> dict:
    theta = rope.get("rope_theta", 10000.0)
    extra = {k: v for k, v in rope.items() if k != "rope_theta"}
    if layout == "transformers5":
        return {"rope_parameters": {"rope_type": "default", "rope_theta": theta, **extra}}
    return {"rope_theta": theta, **({"rope_scaling": extra} if extra else {})}
