"""Model directories as people have them (issue 13, point 1): transformers 4 and 5 config
layouts, scaled RoPE (linear, Llama 3), an explicit head_dim. Small random models written in
each layout must give the NumPy reference's logits (tests/llama_reference.py reads the
same config independently)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llama_reference import ReferenceLlama, write_random_model

from colibri.engine_errors import ConfigMismatchError
from colibri.model import ModelConfig, open_engine

TOL = 1e-4
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64, "rope_theta": 500000.0}


def _engine(path: Path):
    cfg = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
    return open_engine(path / "model.safetensors", cfg, n_slots=1, n_threads=2), cfg


def _matches_reference(path: Path, n: int = 60) -> float:
    toks = np.random.default_rng(3).integers(0, 97, n).tolist()
    eng, _ = _engine(path)
    _, logits = eng.prefill(0, toks, all_logits=True)
    err = float(np.max(np.abs(logits - ReferenceLlama(path).logits(toks))))
    decoded = eng.decode([0], [toks[0]])[0]  # and one decode step past the prompt
    want = ReferenceLlama(path).logits(toks + [toks[0]])[-1]
    return max(err, float(np.max(np.abs(decoded - want))))


def test_transformers5_rope_parameters_theta_is_read(tmp_path):
    path = write_random_model(tmp_path, rope={"rope_theta": 100000.0}, layout="transformers5")
    _, cfg = _engine(path)
    assert cfg.rope_theta == 100000.0 and cfg.rope_inv_freq is None
    assert _matches_reference(path) < TOL


@pytest.mark.parametrize("layout", ["transformers4", "transformers5"])
def test_llama3_rope_scaling_in_either_layout(tmp_path, layout):
    path = write_random_model(tmp_path, rope=LLAMA3, layout=layout)
    _, cfg = _engine(path)
    assert cfg.rope_inv_freq is not None and len(cfg.rope_inv_freq) == 8
    # the three bands: kept, blended, divided by the factor
    plain = [500000.0 ** (-2 * i / 16) for i in range(8)]
    ratios = [p / f for p, f in zip(plain, cfg.rope_inv_freq, strict=True)]
    assert ratios[0] == 1.0 and ratios[-1] == pytest.approx(8.0) and any(1 < r < 8 for r in ratios)
    assert _matches_reference(path) < TOL


def test_linear_rope_scaling(tmp_path):
    path = write_random_model(tmp_path, rope={"rope_type": "linear", "factor": 4.0})
    assert _matches_reference(path) < TOL


def test_explicit_head_dim_wider_than_dim_over_heads(tmp_path):
    path = write_random_model(tmp_path, dim=64, heads=4, kv_heads=2, head_dim=32)
    _, cfg = _engine(path)
    assert cfg.head_dim == 32
    assert _matches_reference(path) < TOL


def test_explicit_head_dim_equal_to_the_usual_one_is_implicit(tmp_path):
    path = write_random_model(tmp_path, dim=64, heads=4, head_dim=16)
    assert _engine(path)[1].head_dim == 0
    assert _matches_reference(path) < TOL


def test_untied_embeddings_in_the_transformers5_layout(tmp_path):
    path = write_random_model(tmp_path, tied=False, rope={"rope_theta": 50000.0}, layout="transformers5")
    assert _matches_reference(path) < TOL


def test_dynamic_scaling_within_the_original_context_is_plain_rope(tmp_path):
    path = write_random_model(tmp_path, ctx=128, rope={"rope_type": "dynamic", "factor": 2.0,
                                                        "original_max_position_embeddings": 128})
    assert _engine(path)[1].rope_inv_freq is None
    assert _matches_reference(path) < TOL


@pytest.mark.parametrize("rope, message", [
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}, "dynamic RoPE scaling beyond 64"),
    ({"rope_type": "yarn", "factor": 4.0}, "'yarn' is not supported"),
    ({"rope_type": "linear", "factor": 0}, "factor must be positive"),
    ({**LLAMA3, "high_freq_factor": 1.0}, "high_freq_factor > low_freq_factor"),
])
def test_unsupported_rope_scaling_is_refused_by_name(tmp_path, rope, message):
    path = write_random_model(tmp_path, ctx=128, rope=rope)
    with pytest.raises(ConfigMismatchError, match=message):
        _engine(path)


def test_the_engine_refuses_bad_frequencies_itself(tmp_path):
    from colibri import _engine as eng

    path = write_random_model(tmp_path)
    kw = dict(dim=64, hidden_dim=160, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97, n_ctx=128,
              tie_embeddings=True, rope_theta=10000.0, norm_eps=1e-5)
    with pytest.raises(ConfigMismatchError):
        eng.Engine(str(path / "model.safetensors"), **kw, rope_inv_freq=[1.0] * 7 + [float("nan")])
    with pytest.raises(ConfigMismatchError):
        eng.Engine(str(path / "model.safetensors"), **kw, rope_inv_freq=[1.0] * 3)
    with pytest.raises(ConfigMismatchError):
        eng.Engine(str(path / "model.safetensors"), **kw, head_dim=7)


def _sentencepiece_dir(tmp_path: Path) -> Path:
    """A random model with a Llama-2-style tokenizer: Unigram pieces with `▁` for spaces and
    <0xNN> byte-fallback tokens, written with HF tokenizers (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["▁", "▁hello", "▁world", "▁w", "hello", "r", "l", "d", "o", "h", "e", "w"]
    tok = Tokenizer(models.Unigram([(p, -1.0 - i / 100) for i, p in enumerate(pieces)], unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    path = write_random_model(tmp_path, vocab=len(pieces))
    tok.save(str(path / "tokenizer.json"))
    return path


def test_sentencepiece_token_bytes(tmp_path):
    from colibri.model import Model

    model = Model(_sentencepiece_dir(tmp_path))
    assert model.sentencepiece
    table = model.token_bytes
    tok = model.tokenizer
    assert table[tok.token_to_id("▁hello")] == b" hello"
    assert table[tok.token_to_id("<0x0A>")] == b"\n"
    text = "hello wörld\nhello"
    ids = model.encode(text)
    assert tok.token_to_id("<0xC3>") in ids  # ö came through byte fallback
    assert b"".join(table[i] for i in ids).decode() == " " + text  # the dummy prefix space, then the text


def test_byte_level_vocabulary_is_not_taken_for_sentencepiece():
    from colibri.model import Model

    model = Model()
    assert not model.sentencepiece
    ids = model.encode("héllo wörld\n")
    assert b"".join(model.token_bytes[i] for i in ids).decode() == "héllo wörld\n"
