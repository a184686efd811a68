"""The C engine against the NumPy reference, on seeded random-weight models written by the
tests in the real directory layout: prefill, decode, prefix reuse, batched multi-slot decode,
dtypes, sampling, logprobs, and every fault as a named exception."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from llama_reference import ReferenceLlama, write_random_model

from colibri import _engine
from colibri.engine_errors import (
    ConfigMismatchError,
    ContextOverflowError,
    EngineArgumentError,
    EngineStateError,
    SlotError,
    WeightsFormatError,
    WeightsIOError,
)
from colibri.model import ModelConfig, open_engine

TOL = 1e-4


def engine_for(path: Path, n_slots: int = 1, **overrides):
    cfg = ModelConfig.from_hf(dict(json.loads((path / "config.json").read_text()), **overrides))
    return open_engine(path / "model.safetensors", cfg, n_slots=n_slots, n_threads=2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return write_random_model(tmp_path_factory.mktemp("rand"), seed=1)


@pytest.fixture(scope="module")
def ref(model_dir) -> ReferenceLlama:
    return ReferenceLlama(model_dir)


def tokens(n: int, seed: int = 0, vocab: int = 97) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def test_prefill_matches_reference_at_every_position(model_dir, ref):
    toks = tokens(40)
    eng = engine_for(model_dir)
    reused, logits = eng.prefill(0, toks, all_logits=True)
    assert reused == 0
    assert np.max(np.abs(logits - ref.logits(toks))) < TOL


def test_decode_matches_reference(model_dir, ref):
    toks = tokens(30, seed=2)
    eng = engine_for(model_dir)
    _, last = eng.prefill(0, toks[:10])
    want = ref.logits(toks)
    assert np.max(np.abs(last - want[9])) < TOL
    for i in range(10, 30):
        got = eng.decode([0], [toks[i]])[0]
        assert np.max(np.abs(got - want[i])) < TOL, f"position {i}"


def test_prefix_reuse_computes_only_the_suffix_and_matches_fresh(model_dir, ref):
    a, b = tokens(25, seed=3), tokens(12, seed=4)
    eng = engine_for(model_dir)
    eng.prefill(0, a)
    reused, logits = eng.prefill(0, a + b)
    assert reused == 25
    assert np.max(np.abs(logits - ref.logits(a + b)[-1])) < TOL
    # A diverging prompt reuses only the common part.
    reused, logits = eng.prefill(0, a[:10] + b)
    assert reused == 10
    assert np.max(np.abs(logits - ref.logits(a[:10] + b)[-1])) < TOL
    # The identical prompt recomputes its last position only.
    reused, _ = eng.prefill(0, a[:10] + b)
    assert reused == 21
    assert eng.slot_tokens(0) == a[:10] + b


def test_no_reuse_flag_recomputes_everything(model_dir):
    eng = engine_for(model_dir)
    eng.prefill(0, tokens(20))
    reused, _ = eng.prefill(0, tokens(20), reuse=False)
    assert reused == 0


def greedy(eng, slot, prompt, steps):
    _, logits = eng.prefill(slot, prompt)
    out = []
    for _ in range(steps):
        t = int(np.argmax(logits))
        out.append(t)
        logits = eng.decode([slot], [t])[0]
    return out


def test_batched_decode_is_token_identical_to_single_slot_runs(model_dir, ref):
    prompts = [tokens(n, seed=10 + n) for n in (5, 17, 9, 30)]
    alone = [greedy(engine_for(model_dir), 0, p, 20) for p in prompts]
    eng = engine_for(model_dir, n_slots=4)
    logits = [eng.prefill(s, p)[1] for s, p in enumerate(prompts)]
    outs: list[list[int]] = [[] for _ in prompts]
    for _ in range(20):
        toks = [int(np.argmax(lg)) for lg in logits]
        for s, t in enumerate(toks):
            outs[s].append(t)
        batch = eng.decode([0, 1, 2, 3], toks)
        logits = list(batch)
    assert outs == alone
    # and the batched logits are the reference's
    seq = prompts[1] + outs[1][:-1]
    assert np.max(np.abs(batch[1] - ref.logits(seq + [outs[1][-1]])[-1])) < TOL


def test_decode_slots_in_any_order_and_subsets(model_dir):
    eng = engine_for(model_dir, n_slots=3)
    for s in range(3):
        eng.prefill(s, tokens(6, seed=s))
    a = eng.decode([2, 0], [5, 6])
    single = engine_for(model_dir)
    single.prefill(0, tokens(6, seed=2))
    assert np.max(np.abs(a[0] - single.decode([0], [5])[0])) < 1e-5


# Shapes that take each kernel path: head sizes that are not a multiple of 16 (the plain
# attention loops) and that are (whole vectors); output widths that leave a partial panel or
# a partial group of four panels; input widths that are not a multiple of anything.
@pytest.mark.parametrize("shape", [
    dict(dim=48, heads=4, kv_heads=2, hidden=100, vocab=53),  # head size 12, 7 panels of output
    dict(dim=128, heads=2, kv_heads=1, hidden=96, vocab=70),  # head size 64, GQA 2:1
    dict(dim=36, heads=3, kv_heads=3, hidden=20, vocab=17),   # head size 12, one partial panel
])
def test_kernel_paths_match_reference(tmp_path, shape):
    d = write_random_model(tmp_path / "shape", seed=11, **shape)
    ref = ReferenceLlama(d)
    toks = tokens(24, seed=12, vocab=shape["vocab"])
    eng = engine_for(d, n_slots=3)
    got = eng.prefill(0, toks[:16], all_logits=True)[1]
    want = ref.logits(toks)
    assert np.max(np.abs(got - want[:16])) < TOL
    for s in (1, 2):
        eng.prefill(s, toks[:16])
    for i in range(16, 24):
        batch = eng.decode([0, 1, 2], [toks[i]] * 3)
        assert np.max(np.abs(batch[0] - want[i])) < TOL, f"position {i}"
        # every output is the same sequential sum whatever the batch: bit-identical rows
        assert np.array_equal(batch[0], batch[1]) and np.array_equal(batch[0], batch[2])


def test_batched_rows_are_bit_identical_to_a_single_slot_step(model_dir):
    prompts = [tokens(n, seed=20 + n) for n in (7, 11, 3, 19)]
    single = engine_for(model_dir)
    batched = engine_for(model_dir, n_slots=4)
    for s, p in enumerate(prompts):
        batched.prefill(s, p)
    rows = batched.decode([0, 1, 2, 3], [4, 5, 6, 7])
    for s, p in enumerate(prompts):
        single.prefill(0, p, reuse=False)
        assert np.array_equal(single.decode([0], [4 + s])[0], rows[s])


@pytest.mark.parametrize("dtype,tol", [("float16", 0.05), ("bfloat16", 0.6)])
def test_half_precision_weights_are_converted_on_load(tmp_path, dtype, tol):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    f32 = write_random_model(tmp_path / "f32", seed=5)
    half = write_random_model(tmp_path / dtype, seed=5, dtype=dtype)
    toks = tokens(16)
    a = engine_for(f32).prefill(0, toks, all_logits=True)[1]
    eng = engine_for(half)
    b = eng.prefill(0, toks, all_logits=True)[1]
    assert np.max(np.abs(a - b)) < tol
    if eng.kernels != "avx512bf16" or dtype != "bfloat16":
        # exact against the reference of the rounded weights
        assert np.max(np.abs(b - ReferenceLlama(half).logits(toks))) < TOL
        return
    # AVX-512 BF16 pairs round the inputs too (tests/test_kernel_paths.py): most positions exact
    # against the reference that does (one near a rounding boundary may round the other way)
    err = np.max(np.abs(b - ReferenceLlama(half).logits(toks, bf16_inputs=True)), axis=1)
    assert int(np.sum(err < TOL)) >= len(toks) * 9 // 10, err


def test_untied_output_projection(tmp_path):
    d = write_random_model(tmp_path / "untied", seed=6, tied=False)
    toks = tokens(12)
    got = engine_for(d).prefill(0, toks, all_logits=True)[1]
    assert np.max(np.abs(got - ReferenceLlama(d).logits(toks))) < TOL


def test_long_prefill_crosses_chunks(tmp_path):
    d = write_random_model(tmp_path / "long", seed=7, ctx=700, layers=1)
    toks = tokens(600, seed=8)
    got = engine_for(d).prefill(0, toks, all_logits=True)[1]
    assert np.max(np.abs(got - ReferenceLlama(d).logits(toks))) < 5e-4


def test_attention_blocks_are_bit_identical_to_row_by_row(tmp_path):
    """A prefill's rows go through attention in blocks that read their shared history once
    (attend_block); each row must still get exactly what it gets alone, as a decode step:
    every position's logits bit-identical, across K/V chunks and the unaligned remainder, for
    a head size on the vector path (64) and one off it (24)."""
    for hs in (64, 24):
        d = write_random_model(tmp_path / f"hs{hs}", seed=13, dim=128, heads=4, kv_heads=2, head_dim=hs,
                               layers=1, ctx=400)
        toks = tokens(300, seed=14)
        whole = engine_for(d).prefill(0, toks, all_logits=True)[1]
        eng = engine_for(d)
        eng.prefill(0, toks[:1])
        for i in range(1, len(toks)):
            assert np.array_equal(eng.decode([0], [toks[i]])[0], whole[i]), f"head size {hs}, position {i}"


def test_branches_each_see_the_history_and_themselves_only(tmp_path):
    """prefill_branches (System One's questions after one state): every branch's last logits
    equal the reference's on history + that branch alone, branches longer than a prefill chunk
    included, and the slot's history is left as it was."""
    d = write_random_model(tmp_path / "br", seed=9, ctx=700, layers=2)
    ref = ReferenceLlama(d)
    history = tokens(50, seed=10)
    branches = [tokens(n, seed=11 + i) for i, n in enumerate((1, 7, 300, 2, 40))]
    eng = engine_for(d)
    eng.prefill(0, history)
    got = eng.prefill_branches(0, branches)
    assert got.shape == (5, eng.vocab_size)
    for i, b in enumerate(branches):
        assert np.max(np.abs(got[i] - ref.logits(history + b)[-1])) < 5e-4, f"branch {i}"
    assert eng.slot_tokens(0) == history
    # The history and all branches must fit in the context together.
    with pytest.raises(ContextOverflowError):
        eng.prefill_branches(0, [tokens(330), tokens(330)])
    with pytest.raises(EngineArgumentError):
        eng.prefill_branches(0, [tokens(3), []])
    with pytest.raises(EngineArgumentError):
        eng.prefill_branches(0, [])


# ------------------------------------------------------------------ faults


def test_missing_file(tmp_path):
    d = write_random_model(tmp_path / "m", seed=1)
    (d / "model.safetensors").unlink()
    with pytest.raises(WeightsIOError):
        engine_for(d)


def test_truncated_file(tmp_path):
    d = write_random_model(tmp_path / "t", seed=1)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsFormatError):
        engine_for(d)


@pytest.mark.parametrize("header", [b"not json at all", b'{"a": {"dtype": "F32"', b"[]", b'{"x": 1}'])
def test_malformed_header(tmp_path, header):
    d = write_random_model(tmp_path / "h", seed=1)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(WeightsFormatError):
        engine_for(d)


def test_header_length_beyond_file(tmp_path):
    d = write_random_model(tmp_path / "h2", seed=1)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(WeightsFormatError):
        engine_for(d)


def test_config_that_does_not_match_the_tensors(model_dir):
    with pytest.raises(ConfigMismatchError):
        engine_for(model_dir, hidden_size=96)
    with pytest.raises(ConfigMismatchError):
        engine_for(model_dir, num_attention_heads=3)


def test_missing_tensor(tmp_path):
    from safetensors.numpy import load_file, save_file

    d = write_random_model(tmp_path / "mt", seed=1)
    t = load_file(str(d / "model.safetensors"))
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(WeightsFormatError, match="missing"):
        engine_for(d)


def test_unsupported_dtype(tmp_path):
    from safetensors.numpy import load_file, save_file

    d = write_random_model(tmp_path / "dt", seed=1)
    t = load_file(str(d / "model.safetensors"))
    t["model.norm.weight"] = t["model.norm.weight"].astype(np.int32)
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(WeightsFormatError, match="dtype"):
        engine_for(d)


def test_prompt_over_context(model_dir):
    eng = engine_for(model_dir)
    with pytest.raises(ContextOverflowError):
        eng.prefill(0, tokens(129))
    eng.prefill(0, tokens(128))
    with pytest.raises(ContextOverflowError):
        eng.decode([0], [1])


def test_bad_arguments(model_dir):
    eng = engine_for(model_dir, n_slots=2)
    with pytest.raises(SlotError):
        eng.prefill(2, [1, 2])
    with pytest.raises(EngineStateError):
        eng.decode([1], [3])
    eng.prefill(0, [1, 2])
    eng.prefill(1, [1, 2])
    with pytest.raises(SlotError):
        eng.decode([0, 0], [3, 4])
    with pytest.raises(EngineArgumentError):
        eng.prefill(0, [1, 500])
    with pytest.raises(EngineArgumentError):
        eng.prefill(0, [])
    with pytest.raises(SlotError):
        engine_for(model_dir, n_slots=17)


# ------------------------------------------------------------------ sampling and logprobs


def test_logprobs_match_log_softmax_and_top_k_is_descending():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, 500).astype(np.float32)
    ls = logits.astype(np.float64) - np.log(np.sum(np.exp(logits.astype(np.float64))))
    lp, ids, lps = _engine.logprobs(logits, 7, 32)
    assert abs(lp - ls[7]) < 1e-5
    assert ids == list(np.argsort(-ls)[:32])
    assert np.allclose(lps, ls[ids], atol=1e-5)
    assert lps == sorted(lps, reverse=True)
    with pytest.raises(EngineArgumentError):
        _engine.logprobs(logits, 7, 33)


def test_greedy_and_seeded_sampling():
    logits = np.array([0.0, 3.0, 1.0, 2.9], np.float32)
    assert _engine.sample(logits, 0.0, 1.0, 1)[0] == 1
    draws = []
    state = 42
    for _ in range(200):
        t, state = _engine.sample(logits, 1.0, 1.0, state)
        draws.append(t)
    again = []
    state = 42
    for _ in range(200):
        t, state = _engine.sample(logits, 1.0, 1.0, state)
        again.append(t)
    assert draws == again and set(draws) >= {1, 3}
    # a tiny top_p keeps only the most likely token
    assert {_engine.sample(logits, 1.0, 0.01, s)[0] for s in range(1, 50)} == {1}
    with pytest.raises(EngineArgumentError):
        _engine.sample(logits, 1.0, 1.0, 0)


def test_sample_rows_is_sample_applied_to_each_row():
    rows = np.random.default_rng(3).normal(0, 2, (5, 40)).astype(np.float32)
    temps = np.array([0.0, 1.0, 0.7, 1.0, 1.3], np.float32)
    tops = np.array([1.0, 1.0, 0.9, 0.05, 1.0], np.float32)
    states = np.array([1, 42, 7, 99, 2**63 + 5], np.uint64)
    want = [_engine.sample(rows[i], float(temps[i]), float(tops[i]), int(states[i])) for i in range(5)]
    got = _engine.sample_rows(rows, temps, tops, states)
    assert got.tolist() == [t for t, _ in want]
    assert states.tolist() == [s for _, s in want]  # advanced in place
    with pytest.raises(EngineArgumentError):
        _engine.sample_rows(rows, temps[:4], tops, states)
