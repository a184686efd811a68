"""A PyTorch eager Llama with a KV cache over the same safetensors weights: the baseline the
C engine is measured against (same threads, same run)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file


class TorchLlama:
    """`batch` sequences of equal length decoded together (batch 1: a single sequence)."""

    def __init__(self, path: Path, batch: int = 1):
        cfg = json.loads((path / "config.json").read_text())
        self.dim, self.n_layers = cfg["hidden_size"], cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.hs = self.dim // self.n_heads
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.ctx = cfg.get("max_position_embeddings", 2048)
        self.batch = batch
        w = {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}
        self.w = w
        self.lm_head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
        half = self.hs // 2
        freq = cfg.get("rope_theta", 10000.0) ** (-torch.arange(half, dtype=torch.float64) * 2 / self.hs)
        ang = torch.arange(self.ctx, dtype=torch.float64)[:, None] * freq[None, :]
        self.cos, self.sin = ang.cos().float(), ang.sin().float()
        self.reset()

    def reset(self) -> None:
        self.k = [torch.zeros(self.batch, self.ctx, self.n_kv, self.hs) for _ in range(self.n_layers)]
        self.v = [torch.zeros(self.batch, self.ctx, self.n_kv, self.hs) for _ in range(self.n_layers)]
        self.len = 0

    def truncate(self, n: int) -> None:
        """Keep the first n cached positions (a shared prefix); later ones are overwritten."""
        self.len = min(self.len, n)

    def _norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def _rope(self, x, pos):  # x (B, T, heads, hs)
        half = self.hs // 2
        c, s = self.cos[pos][None, :, None, :], self.sin[pos][None, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    @torch.inference_mode()
    def forward(self, tokens: list[int] | list[list[int]]) -> torch.Tensor:
        """Append tokens (one list, or one list per sequence) to the cache; logits of the last
        position, (vocab,) or (batch, vocab)."""
        seqs = tokens if tokens and isinstance(tokens[0], list) else [tokens]
        B, T = len(seqs), len(seqs[0])
        pos = torch.arange(self.len, self.len + T)
        x = self.w["model.embed_tokens.weight"][torch.tensor(seqs)]  # (B, T, dim)
        rep = self.n_heads // self.n_kv
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            h = self._norm(x, self.w[p + "input_layernorm.weight"])
            q = (h @ self.w[p + "self_attn.q_proj.weight"].T).view(B, T, self.n_heads, self.hs)
            k = (h @ self.w[p + "self_attn.k_proj.weight"].T).view(B, T, self.n_kv, self.hs)
            v = (h @ self.w[p + "self_attn.v_proj.weight"].T).view(B, T, self.n_kv, self.hs)
            q, k = self._rope(q, pos), self._rope(k, pos)
            self.k[i][:B, self.len:self.len + T] = k
            self.v[i][:B, self.len:self.len + T] = v
            K = self.k[i][:B, : self.len + T].repeat_interleave(rep, 2).transpose(1, 2)
            V = self.v[i][:B, : self.len + T].repeat_interleave(rep, 2).transpose(1, 2)
            a = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), K, V, is_causal=False,
                attn_mask=(torch.arange(self.len + T)[None, :] <= pos[:, None]))
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.w[p + "self_attn.o_proj.weight"].T
            h = self._norm(x, self.w[p + "post_attention_layernorm.weight"])
            g = h @ self.w[p + "mlp.gate_proj.weight"].T
            u = h @ self.w[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ self.w[p + "mlp.down_proj.weight"].T
        self.len += T
        logits = self._norm(x[:, -1], self.w["model.norm.weight"]) @ self.lm_head.T
        return logits if tokens and isinstance(tokens[0], list) else logits[0]
