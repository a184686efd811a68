"""Loading a Hugging Face style Llama model directory onto the C engine.

A model directory holds config.json, model.safetensors, tokenizer.json and a chat template
(chat_template.<family>.jinja, chat_template.jinja, or tokenizer_config.json's
`chat_template`). The embedded model ships in colibri/models/tiny; any Llama-family
directory a user already has loads the same way.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from .engine_errors import ConfigMismatchError, WeightsIOError
from .paths import EMBEDDED_MODEL

#: Stored bits per weight (scales included) of the GGUF block types that lose enough to change a
#: small model's answers; Q8_0 (8.5) and BF16 are left out: their answers agree with F32's (BF16's
#: exactly but on the avx512bf16 kernel path, which rounds its inputs: quality_note says so).
BITS_PER_WEIGHT = {"Q2_K": 2.6, "Q3_K": 3.4, "Q4_0": 4.5, "Q4_K": 4.5, "Q4_1": 5.0, "Q5_0": 5.5, "Q5_K": 5.5,
                   "Q5_1": 6.0, "Q6_K": 6.6}

LLAMA_ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM"}


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    n_ctx: int
    tie_embeddings: bool
    rope_theta: float
    norm_eps: float
    head_dim: int = 0  # 0: dim / n_heads
    rope_inv_freq: tuple[float, ...] | None = None  # a scaled RoPE's frequencies; None: plain rope_theta

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], n_ctx: int | None = None) -> ModelConfig:
        """Read a transformers config.json: the 4.x layout (`rope_theta`, `rope_scaling`) and the
        5.x one (`rope_parameters` holding both)."""
        arch = set(cfg.get("architectures") or [])
        if cfg.get("model_type") not in ("llama", "mistral") and not arch & LLAMA_ARCHITECTURES:
            raise ConfigMismatchError(f"not a Llama-family config (model_type={cfg.get('model_type')!r})")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ConfigMismatchError(f"hidden_act {cfg['hidden_act']!r} is not supported (silu only)")
        try:
            heads = int(cfg["num_attention_heads"])
            dim = int(cfg["hidden_size"])
            head_dim = int(cfg.get("head_dim") or 0)
            if head_dim == dim // heads and dim % heads == 0:
                head_dim = 0  # the usual width: leave it implicit
            params = rope_parameters(cfg)
            theta = float(params.get("rope_theta", 10000.0))
            ctx = int(n_ctx or cfg.get("max_position_embeddings", 2048))
            return cls(
                dim=dim, hidden_dim=int(cfg["intermediate_size"]),
                n_layers=int(cfg["num_hidden_layers"]), n_heads=heads,
                n_kv_heads=int(cfg.get("num_key_value_heads") or heads), vocab_size=int(cfg["vocab_size"]),
                n_ctx=ctx, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                rope_theta=theta, norm_eps=float(cfg.get("rms_norm_eps", 1e-5)), head_dim=head_dim,
                rope_inv_freq=tuple(cfg["rope_inv_freq"]) if cfg.get("rope_inv_freq")  # a GGUF's rope_freqs
                else scaled_rope(params, theta, head_dim or dim // heads, ctx),
            )
        except KeyError as e:
            raise ConfigMismatchError(f"config.json lacks {e.args[0]!r}") from None


def rope_parameters(cfg: dict[str, Any]) -> dict[str, Any]:
    """One dict of RoPE settings from either config layout: transformers 5 writes
    `rope_parameters: {rope_type, rope_theta, ...}`; 4.x a top-level `rope_theta` and an
    optional `rope_scaling: {rope_type or type, factor, ...}`."""
    params: dict[str, Any] = {}
    if isinstance(cfg.get("rope_parameters"), dict):
        params.update(cfg["rope_parameters"])
    if isinstance(cfg.get("rope_scaling"), dict):
        params.update({k: v for k, v in cfg["rope_scaling"].items() if k not in params})
    if "rope_theta" in cfg and "rope_theta" not in params:
        params["rope_theta"] = cfg["rope_theta"]
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params["type"]
    return params


def scaled_rope(params: dict[str, Any], theta: float, head_dim: int, n_ctx: int) -> tuple[float, ...] | None:
    """The inverse frequencies of a scaled RoPE, or None for the plain one.

    `linear` divides every frequency by the factor (positions stretched evenly). `llama3`
    leaves short wavelengths alone, divides long ones by the factor and blends in between,
    with the band edges set by the original context length over the low and high frequency
    factors. `dynamic` equals the plain RoPE up to the original context, which is all it is
    used for here; beyond it, and for the other kinds, the config is refused by name."""
    kind = params.get("rope_type") or "default"
    if kind == "default":
        return None
    base = [theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]
    factor = float(params.get("factor", 1.0))
    if factor <= 0:
        raise ConfigMismatchError(f"rope scaling factor must be positive, not {factor}")
    if kind == "linear":
        return tuple(f / factor for f in base)
    if kind == "dynamic":
        original = int(params.get("original_max_position_embeddings") or n_ctx)
        if n_ctx <= original:
            return None
        raise ConfigMismatchError(f"dynamic RoPE scaling beyond {original} positions is not supported; "
                                  f"serve with --ctx {original}")
    if kind == "llama3":
        low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        span = float(params["original_max_position_embeddings"])
        if high <= low:
            raise ConfigMismatchError("llama3 RoPE scaling needs high_freq_factor > low_freq_factor")
        out = []
        for f in base:
            wavelength = 2 * math.pi / f
            if wavelength < span / high:  # short: kept
                out.append(f)
            elif wavelength > span / low:  # long: scaled
                out.append(f / factor)
            else:  # between: a blend of the two, by where the wavelength falls
                blend = (span / wavelength - low) / (high - low)
                out.append((1 - blend) * f / factor + blend * f)
        return tuple(out)
    raise ConfigMismatchError(f"RoPE scaling {kind!r} is not supported (default, linear, llama3, dynamic within "
                              "the original context)")


def open_engine(weights: Path, config: ModelConfig, n_slots: int = 1, n_threads: int = 0,
                dequantize: bool = False) -> Any:
    """The C engine over a safetensors or GGUF file (n_threads 0: every usable core). GGUF block
    types stay quantized and BF16 stays BF16 unless `dequantize` expands everything to F32."""
    from .engine_kernels import kernel_cap
    from .engine_threads import load_engine_module

    _engine = load_engine_module()  # n_threads 0: the engine counts the cores in this process's affinity mask
    c = config
    return _engine.Engine(str(weights), dim=c.dim, hidden_dim=c.hidden_dim, n_layers=c.n_layers, n_heads=c.n_heads,
                          n_kv_heads=c.n_kv_heads, vocab_size=c.vocab_size, n_ctx=c.n_ctx,
                          tie_embeddings=c.tie_embeddings, rope_theta=c.rope_theta, norm_eps=c.norm_eps,
                          n_slots=n_slots, n_threads=n_threads, head_dim=c.head_dim,
                          rope_inv_freq=None if c.rope_inv_freq is None else list(c.rope_inv_freq),
                          dequantize=dequantize, kernels=kernel_cap(_engine))


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-ins for bytes, inverted (byte-level BPE token text -> byte)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_BYTE_DECODER = _byte_decoder()


def _byte_level_bytes(text: str) -> bytes:
    dec = _BYTE_DECODER
    return bytes(dec[ch] for ch in text) if all(ch in dec for ch in text) else text.encode()


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _piece_bytes(text: str) -> bytes:
    """A SentencePiece piece: `<0xNN>` is that one byte (byte fallback); `▁` is a space."""
    m = _BYTE_TOKEN.fullmatch(text)
    return bytes([int(m.group(1), 16)]) if m else text.replace("\u2581", " ").encode()


class Model:
    """A model directory (or a llama GGUF file): config, tokenizer, templates, and an engine
    built on demand."""

    def __init__(self, path: Path | str | None = None, *, n_ctx: int | None = None):
        self.path = Path(path) if path else EMBEDDED_MODEL
        self.gguf: Any = None
        if self.path.is_file():
            from .gguf_file import read_gguf

            self.gguf = read_gguf(self.path)
            self.hf_config = self.gguf.hf_config
            self.config = ModelConfig.from_hf(self.hf_config, n_ctx)
            self.weights = self.path
            self.tokenizer = self.gguf.tokenizer
            return
        if not self.path.is_dir():
            raise WeightsIOError(f"{self.path} is neither a model directory nor a GGUF file")
        cfg_file = self.path / "config.json"
        if not cfg_file.is_file():
            raise WeightsIOError(f"{self.path} has no config.json")
        self.hf_config = json.loads(cfg_file.read_text())
        self.config = ModelConfig.from_hf(self.hf_config, n_ctx)
        self.weights = self.path / "model.safetensors"
        if not self.weights.is_file():
            raise WeightsIOError(f"{self.path} has no model.safetensors")
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))

    @property
    def name(self) -> str:
        """The default served id: the directory's name, or the GGUF file's without .gguf."""
        return self.path.stem if self.gguf else self.path.name

    def own_template(self) -> str | None:
        """The template the model directory ships for itself (not a family's file), if any."""
        if self.gguf:
            return self.gguf.template  # type: ignore[no-any-return]
        f = self.path / "chat_template.jinja"
        if f.is_file():
            return f.read_text()
        tc = self.path / "tokenizer_config.json"
        if tc.is_file():
            tpl = json.loads(tc.read_text()).get("chat_template")
            if isinstance(tpl, str):
                return tpl
        return None

    def template(self, name: str | None = None) -> str:
        """The chat template: the named family file if the directory has it, else the model's
        own (chat_template.jinja, tokenizer_config.json's, or a GGUF's metadata)."""
        named = self.path / name if name and not self.gguf else None
        if named is not None and named.is_file():
            return named.read_text()
        own = self.own_template()
        if own is None:
            raise WeightsIOError(f"{self.path} carries no chat template{f' (nor {name})' if name else ''}")
        return own

    def weights_note(self, dequantize: bool = False) -> str:
        """How the weights are held, for the start-up line: the file's tensor types and what the
        engine does with them."""
        if not self.gguf:
            return f"safetensors {self.weights.name}"
        from .gguf_file import KEPT_TYPES

        types = ", ".join(f"{n} {t}" for t, n in self.gguf.tensor_types.items())
        kept = set(KEPT_TYPES) & set(self.gguf.tensor_types)
        if not kept:
            return f"GGUF tensors {types}"
        how = "expanded to F32 (--dequantize)" if dequantize else (
            f"{'/'.join(sorted(kept))} kept as stored (block types: integer kernels on inputs rounded per "
            "32-value block; --dequantize for exact F32)")
        return f"GGUF tensors {types}; {how}"

    @cached_property
    def stored_types(self) -> frozenset[str]:
        """The tensor types the weights file holds: GGUF's type names, or safetensors' dtypes (F32,
        F16, BF16), from its header (no tensor is read)."""
        if self.gguf:
            return frozenset(self.gguf.tensor_types)
        from safetensors import safe_open

        with safe_open(str(self.weights), framework="numpy") as f:
            return frozenset(f.get_slice(name).get_dtype() for name in f.keys())

    def quality_note(self, dequantize: bool = False, kernels: str | None = None) -> str | None:
        """What a low-bit format costs in answers, and what to do, for the start-up lines; None
        for exact weights (F32, F16, and BF16 but on the avx512bf16 kernel path), for Q8_0, and
        under --dequantize. `kernels`: the kernel path the engine runs (Engine.kernels)."""
        if dequantize:
            return None
        notes = []
        if kernels == "avx512bf16" and "BF16" in self.stored_types:
            notes.append("BF16 matrices multiply their inputs rounded to bfloat16 on this CPU (kernels avx512bf16, "
                         "as llama.cpp's do): logits about 1% off F32's, and a greedy answer can part from the "
                         "exact one (SmolLM2-135M: 6 of 8 answers identical over 48 tokens); COLIBRI_ISA=avx512vnni "
                         "computes them exactly")
        lossy = sorted((t for t in self.stored_types if t in BITS_PER_WEIGHT), key=BITS_PER_WEIGHT.__getitem__)
        if lossy:
            worst = lossy[0]
            notes.append(f"{worst} keeps about {BITS_PER_WEIGHT[worst]} bits per weight, and the block kernels round "
                         "each input to 8 bits: a small model's answers can differ from its full-precision ones, down "
                         "to looping (SmolLM2-135M as Q4_1 repeats itself on \"What is the capital of France?\"); "
                         "--dequantize computes in F32 on the same file (more memory, a slower decode) and answers it")
        return "; ".join(notes) or None

    def engine(self, n_slots: int = 1, n_threads: int = 0, dequantize: bool = False) -> Any:
        return open_engine(self.weights, self.config, n_slots, n_threads, dequantize)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    @cached_property
    def special_texts(self) -> frozenset[str]:
        """The text of every special (control) token: role markers, end tokens."""
        return frozenset(t.content for t in self._added() if t.special)

    @cached_property
    def special_ids(self) -> frozenset[int]:
        return frozenset(t.id for t in self._added() if t.special)

    @cached_property
    def _literal_tokenizer(self) -> Tokenizer:
        # A second instance: encode_special_tokens is state on the object, and HTTP threads
        # encode concurrently, so the shared tokenizer's flag must never be toggled.
        t = Tokenizer.from_str(self.tokenizer.to_str())
        t.encode_special_tokens = True
        return t

    def encode_pieces(self, pieces: list[tuple[str, bool]]) -> list[int]:
        """Token ids for (text, is_control) pieces: a control piece is one special token; every
        other piece is plain text, in which special-token text is spelled out, never matched
        (what the reference tokenizers call split_special_tokens)."""
        texts = [text for text, control in pieces if not control and text]
        encoded = iter(self._literal_tokenizer.encode_batch(texts, add_special_tokens=False)) if texts else iter(())
        ids: list[int] = []
        for text, control in pieces:
            if control:
                token = self.tokenizer.token_to_id(text)
                assert token is not None, text  # pieces come from splitting on special_texts
                ids.append(token)
            elif text:
                ids.extend(next(encoded).ids)
        return ids

    def token_id(self, text: str) -> int | None:
        return self.tokenizer.token_to_id(text)

    @cached_property
    def eos_ids(self) -> frozenset[int]:
        """End-of-sequence ids the model directory declares (config.json, generation_config.json):
        a model from elsewhere stops on its own end token even if the family row names others."""
        ids: set[int] = set(self.gguf.eos_ids) if self.gguf else set()
        for name in () if self.gguf else ("config.json", "generation_config.json"):
            f = self.path / name
            raw = json.loads(f.read_text()).get("eos_token_id") if f.is_file() else None
            for v in raw if isinstance(raw, list) else [raw]:
                if isinstance(v, int) and 0 <= v < self.config.vocab_size:
                    ids.add(v)
        return frozenset(ids)

    @cached_property
    def template_tokens(self) -> dict[str, str]:
        """bos_token / eos_token as chat templates use them (Llama 2 and Mistral templates open
        with `{{ bos_token }}`): from a GGUF's token ids, or tokenizer_config.json."""
        out: dict[str, str] = {}
        if self.gguf:
            ids = {"bos_token": self.gguf.bos_id, "eos_token": min(self.gguf.eos_ids, default=None)}
            for key, i in ids.items():
                if i is not None and (text := self.tokenizer.id_to_token(i)) is not None:
                    out[key] = text
            return out
        tc = self.path / "tokenizer_config.json"
        doc = json.loads(tc.read_text()) if tc.is_file() else {}
        for key in ("bos_token", "eos_token"):
            v = doc.get(key)
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str):
                out[key] = v
        return out

    def _added(self) -> list[Any]:
        return [type("Added", (), {"id": i, "special": tok.special, "content": tok.content})
                for i, tok in self.tokenizer.get_added_tokens_decoder().items()]

    @cached_property
    def sentencepiece(self) -> bool:
        """Whether token texts are SentencePiece pieces (`▁` for a space, `<0x0A>` byte
        tokens) rather than byte-level BPE's printable stand-ins for bytes."""
        doc = json.loads(self.tokenizer.to_str())
        kinds: set[str] = set()
        for part in (doc.get("decoder"), doc.get("pre_tokenizer")):
            stack = [part]
            while stack:
                node = stack.pop()
                if isinstance(node, dict):
                    kinds.add(str(node.get("type")))
                    stack.extend(node.get("decoders") or node.get("pretokenizers") or [])
        if "ByteLevel" in kinds:
            return False
        return bool(kinds & {"Metaspace", "ByteFallback", "Replace"}) or bool((doc.get("model") or {}).get("byte_fallback"))

    @cached_property
    def token_bytes(self) -> list[bytes]:
        """The UTF-8 bytes each token id stands for (special tokens: empty). A token may hold
        only part of a multi-byte character; callers must assemble bytes, not decode ids alone."""
        piece = _piece_bytes if self.sentencepiece else _byte_level_bytes
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        table = [b""] * self.config.vocab_size
        added = {t.id: t for t in self._added()}
        for text, i in vocab.items():
            if i >= len(table):
                continue
            if i in added:
                table[i] = b"" if added[i].special else added[i].content.encode()
            else:
                table[i] = piece(text)
        return table
