"""Write a small Llama folder (F32 or BF16 tensors) as an F32 GGUF: python hf_to_gguf.py MODEL_DIR OUT.gguf

For the embedded model in llama.cpp (the differential run's tool prompts, bench/peers/
differential.py). llama.cpp's own converter refuses tokenizers it does not know by the hash of
their pre-tokenizer, and this one is trained here; its split is GPT-2's (ByteLevel with the
regex), which llama.cpp calls `gpt-2`. Runs in the transformers-serve venv (numpy, safetensors,
gguf), not the harness's.

Layout: llama.cpp's Llama expects q and k rows in the interleaved-pair RoPE order, Hugging Face
stores them in halves, so each head's rows are reordered as llama.cpp's converter does.
Tokens: the byte-level strings in id order; the role markers as control tokens, the reasoning
and tool tags as user-defined ones (plain text that is never split), like the tokenizer.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import gguf
import numpy as np


def load_widened(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32. BF16 is the top half of a float32, so
    widening it is exact; safetensors.numpy cannot read it (NumPy has no bfloat16)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if t["dtype"] == "F32":
            arr = np.frombuffer(buf, np.float32)
        elif t["dtype"] == "BF16":
            arr = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name} is {t['dtype']}; only F32 and BF16 are converted")
        out[name] = arr.reshape(t["shape"])
    return out


def _halves_to_pairs(w: np.ndarray, n_head: int) -> np.ndarray:
    """(n_head * head_dim, dim) rows from [first halves | second halves] to [pairs] per head."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def main(src: Path, out: Path) -> None:
    cfg = json.loads((src / "config.json").read_text())
    tok = json.loads((src / "tokenizer.json").read_text())
    template = (src / "chat_template.jinja").read_text()
    weights = load_widened(src / "model.safetensors")
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(src.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocab = tok["model"]["vocab"]
    added = {a["id"]: a for a in tok["added_tokens"]}
    special = {a["content"]: i for i, a in added.items()}
    size = max([*vocab.values(), *added]) + 1
    tokens, types = [""] * size, [gguf.TokenType.NORMAL] * size
    for text, i in vocab.items():
        tokens[i] = text
    for i, a in added.items():
        tokens[i] = a["content"]
        types[i] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    if cfg["vocab_size"] != size:
        raise SystemExit(f"vocab_size {cfg['vocab_size']} but the tokenizer has {size} ids")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_add_bos_token(False)
    w.add_eos_token_id(special["<|im_end|>"])
    w.add_pad_token_id(special["<|pad|>"])
    w.add_chat_template(template)

    def put(name: str, array: np.ndarray) -> None:
        w.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    put("token_embd.weight", weights["model.embed_tokens.weight"])
    put("output_norm.weight", weights["model.norm.weight"])
    if "lm_head.weight" in weights and not cfg.get("tie_word_embeddings"):
        put("output.weight", weights["lm_head.weight"])
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", weights[p + "input_layernorm.weight"])
        put(f"blk.{i}.attn_q.weight", _halves_to_pairs(weights[p + "self_attn.q_proj.weight"], n_head))
        put(f"blk.{i}.attn_k.weight", _halves_to_pairs(weights[p + "self_attn.k_proj.weight"], n_kv))
        put(f"blk.{i}.attn_v.weight", weights[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", weights[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", weights[p + "post_attention_layernorm.weight"])
        put(f"blk.{i}.ffn_gate.weight", weights[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", weights[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", weights[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: {size} tokens, {cfg['num_hidden_layers']} layers, F32")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
