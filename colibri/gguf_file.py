"""What a llama GGUF file says about itself: the model config, the tokenizer, the chat
template and the end tokens, read from its metadata with the `gguf` package (llama.cpp's
own reader). The tensors themselves are read by the C engine (csrc/engine.c, `gguf_parse`).

The tokenizer is rebuilt as a Hugging Face `tokenizers` object from the vocabulary, merges
and token types the file carries. Only the kinds whose text splitting is known here are
accepted (`tokenizer.ggml.pre` below); any other is refused by name rather than tokenized
differently from the model's training.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from .engine_errors import ConfigMismatchError, WeightsFormatError

#: tokenizer.ggml.pre values that split text with GPT-2's own pattern (ByteLevel's regex).
#: (starcoder and refact split digits one by one: not these, refused until they are added.)
GPT2_SPLIT = {"default", "gpt2", "gpt-2", "smollm"}
#: tokenizer.ggml.pre values that split with Llama 3's pattern (digits in threes, then bytes)
LLAMA3_SPLIT = {"llama3", "llama-v3", "llama-bpe"}
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4  # llama.cpp's token types

#: Tensor types the engine keeps as stored (csrc/engine.c: bind_matrix: block types run on
#: integer kernels, BF16 widens in the kernel or, on the avx512bf16 path, multiplies bfloat16
#: pairs); F32 and F16 compute in F32.
KEPT_TYPES = ("BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
READABLE_TYPES = ("F32", "F16", *KEPT_TYPES)


@dataclass
class GgufModel:
    hf_config: dict[str, Any]  # the config a transformers directory would carry
    tokenizer: Tokenizer
    template: str | None
    eos_ids: frozenset[int]
    tensor_types: dict[str, int]  # tensors per ggml type name, e.g. {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    bos_id: int | None = None


def _fields(path: Path) -> tuple[dict[str, Any], set[str], Any]:
    try:
        from gguf import GGUFReader
    except ImportError as e:  # pragma: no cover - a dependency of colibri
        raise WeightsFormatError("reading GGUF needs the 'gguf' package (pip install gguf)") from e
    try:
        reader = GGUFReader(str(path))
    except (ValueError, IndexError, KeyError, OSError) as e:
        raise WeightsFormatError(f"{path} is not a readable GGUF file: {e}") from None
    meta = {}
    for key, field in reader.fields.items():
        try:
            meta[key] = field.contents()
        except (ValueError, IndexError, TypeError):
            continue
    return meta, {t.name for t in reader.tensors}, reader


def _sentencepiece_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """A SentencePiece BPE vocabulary's merges, which GGUF does not store: every way to split a
    normal piece into two pieces of the vocabulary, most valuable merged piece first. That
    is the order llama.cpp merges in (the adjacent pair whose union scores highest) and the
    one Hugging Face's own SentencePiece conversion writes; equal scores keep vocabulary order."""
    rank = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, piece in enumerate(tokens):
        if types and types[i] != NORMAL:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in rank and piece[k:] in rank]
        merges += [(scores[i], i, rank[a], rank[b], a, b) for a, b in local]
    merges.sort(key=lambda m: (-m[0], m[1], m[2], m[3]))
    return [(a, b) for *_, a, b in merges]


def _sentencepiece_tokenizer(meta: dict[str, Any], tokens: list[str]) -> Tokenizer:
    """tokenizer.ggml.model "llama": SentencePiece BPE (Llama 1/2, Mistral, TinyLlama): `▁` for
    a space, a space prefixed to the text, bytes outside the vocabulary as <0xNN> pieces."""
    scores = [float(s) for s in meta.get("tokenizer.ggml.scores", [])]
    if len(scores) != len(tokens):
        raise WeightsFormatError("GGUF SentencePiece vocabulary without one score per token")
    types = list(meta.get("tokenizer.ggml.token_type", []))
    unk_id = int(meta.get("tokenizer.ggml.unknown_token_id", 0))
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, _sentencepiece_merges(tokens, scores, types),
                               unk_token=tokens[unk_id], fuse_unk=True, byte_fallback=True))
    prefix = [normalizers.Prepend("▁")] if meta.get("tokenizer.ggml.add_space_prefix", True) else []
    tok.normalizer = normalizers.Sequence([*prefix, normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
                                    + ([decoders.Strip(" ", 1, 0)] if meta.get("tokenizer.ggml.add_space_prefix", True)
                                       else []))
    return tok


def _tokenizer(meta: dict[str, Any]) -> Tokenizer:
    kind = meta.get("tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
        raise ConfigMismatchError(f"GGUF tokenizer model {kind!r} is not supported yet "
                                  "(gpt2-style BPE and llama-style SentencePiece only)")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    if kind == "llama":
        tok = _sentencepiece_tokenizer(meta, tokens)
        _add_control_tokens(tok, meta, tokens)
        return tok
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    pre = meta.get("tokenizer.ggml.pre", "default")
    # Llama 3 takes a split-off word that is itself in the vocabulary as one token, whether or
    # not the merges would build it (its tokenizer.json says ignore_merges).
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False,
                               ignore_merges=pre in LLAMA3_SPLIT))
    if pre in GPT2_SPLIT:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre in LLAMA3_SPLIT:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        raise ConfigMismatchError(f"GGUF pre-tokenizer {pre!r} is not supported yet "
                                  f"(known: {', '.join(sorted(GPT2_SPLIT | LLAMA3_SPLIT))})")
    tok.decoder = decoders.ByteLevel()
    _add_control_tokens(tok, meta, tokens)
    return tok


def _add_control_tokens(tok: Tokenizer, meta: dict[str, Any], tokens: list[str]) -> None:
    """Control tokens become special tokens and user-defined ones added tokens: both are matched
    whole in text instead of being built by merges."""
    types = list(meta.get("tokenizer.ggml.token_type", []))
    added = [AddedToken(tokens[i], special=t == CONTROL, normalized=False)
             for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED)]
    tok.add_special_tokens([a for a in added if a.special])
    tok.add_tokens([a for a in added if not a.special])


def read_gguf(path: Path) -> GgufModel:
    meta, tensors, reader = _fields(path)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ConfigMismatchError(f"GGUF architecture {arch!r} is not supported (llama only)")

    def need(key: str) -> Any:
        if key not in meta:
            raise WeightsFormatError(f"{path.name}: GGUF metadata lacks {key}")
        return meta[key]

    heads = int(need("llama.attention.head_count"))
    dim = int(need("llama.embedding_length"))
    tokenizer = _tokenizer(meta)
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
        "intermediate_size": int(need("llama.feed_forward_length")),
        "num_hidden_layers": int(need("llama.block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get("llama.attention.head_count_kv", heads)),
        "vocab_size": int(meta.get("llama.vocab_size", len(meta["tokenizer.ggml.tokens"]))),
        "max_position_embeddings": int(meta.get("llama.context_length", 2048)),
        "rms_norm_eps": float(meta.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(meta.get("llama.rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in tensors, "hidden_act": "silu",
    }
    head_dim = int(meta.get("llama.attention.key_length", dim // heads))
    if head_dim != dim // heads:
        cfg["head_dim"] = head_dim
    if int(meta.get("llama.rope.dimension_count", head_dim)) != head_dim:
        raise ConfigMismatchError("partial RoPE (rope.dimension_count below the head width) is not supported")
    scaling = meta.get("llama.rope.scaling.type")
    if scaling not in (None, "none"):
        cfg["rope_scaling"] = {"rope_type": scaling, "factor": float(meta.get("llama.rope.scaling.factor", 1.0))}
    if "rope_freqs.weight" in tensors:
        # Llama 3.1-style scaling stored as per-frequency divisors (llama.cpp's rope_freqs).
        factors = next(t for t in reader.tensors if t.name == "rope_freqs.weight").data
        theta = cfg["rope_theta"]
        cfg["rope_inv_freq"] = [theta ** (-2.0 * i / head_dim) / float(f) for i, f in enumerate(factors)]
    # llama.cpp ends generation on each of the three (end of text, of turn, of a tool-calling message)
    eos = {int(meta[k]) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                  "tokenizer.ggml.eom_token_id") if k in meta}
    template = meta.get("tokenizer.chat_template")
    types = Counter(t.tensor_type.name for t in reader.tensors)
    unreadable = [f"{t} ({n} tensor{'s' if n > 1 else ''})" for t, n in types.most_common() if t not in READABLE_TYPES]
    if unreadable:
        raise WeightsFormatError(f"{path.name} holds tensors of a type colibri cannot read: {', '.join(unreadable)}; "
                                 f"it reads {', '.join(READABLE_TYPES)} (llama-quantize can rewrite a file "
                                 "into these, e.g. Q4_K_M)")
    bos = meta.get("tokenizer.ggml.bos_token_id")
    return GgufModel(cfg, tokenizer, template if isinstance(template, str) else None, frozenset(eos),
                     dict(types.most_common()), int(bos) if bos is not None else None)
