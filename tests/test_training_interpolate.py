"""training/interpolate.py: points between two exported models of one shape."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

import interpolate  # noqa: E402

from colibri.model import Model  # noqa: E402

TINY = Path(__file__).resolve().parents[1] / "colibri" / "models" / "tiny"


def _pair():
    rng = np.random.default_rng(0)
    a = {"w": rng.standard_normal((3, 4)).astype(np.float32), "n": np.ones(4, np.float32)}
    b = {"w": rng.standard_normal((3, 4)).astype(np.float32), "n": np.zeros(4, np.float32)}
    return a, b


def test_the_ends_are_the_models_and_the_middle_is_their_mean():
    a, b = _pair()
    assert all(np.array_equal(interpolate.mix(a, b, 0.0)[k], a[k]) for k in a)
    assert all(np.array_equal(interpolate.mix(a, b, 1.0)[k], b[k]) for k in a)
    mid = interpolate.mix(a, b, 0.5)
    assert np.allclose(mid["w"], (a["w"] + b["w"]) / 2, atol=1e-7)
    assert np.array_equal(mid["n"], np.full(4, 0.5, np.float32)) and mid["n"].dtype == np.float32


def test_a_missing_or_misshapen_tensor_is_refused_by_name():
    a, b = _pair()
    with pytest.raises(ValueError, match=r"differ by name: \['n'\]"):
        interpolate.mix(a, {"w": b["w"]}, 0.5)
    with pytest.raises(ValueError, match=r"tensor w: shape \(3, 4\) against \(4, 3\)"):
        interpolate.mix(a, {"w": b["w"].T.copy(), "n": b["n"]}, 0.5)


def test_the_cli_writes_a_model_colibri_loads(tmp_path, capsys):
    zero = tmp_path / "zero"
    zero.mkdir()
    save_file({k: np.zeros_like(v) for k, v in load_file(str(TINY / "model.safetensors")).items()},
              str(zero / "model.safetensors"))
    out = tmp_path / "mix"
    assert interpolate.main(["--from", str(zero), "--to", str(TINY), "--t", "0.25", "--out", str(out)]) == 0
    mixed, shipped = load_file(str(out / "model.safetensors")), load_file(str(TINY / "model.safetensors"))
    assert all(np.allclose(mixed[k], 0.25 * shipped[k], rtol=1e-6) for k in shipped)
    assert {p.name for p in out.iterdir()} >= {"config.json", "tokenizer.json", "chat_template.glm.jinja"}
    _, logits = Model(out).engine(1, 1).prefill(0, [5, 6, 7])  # the engine loads and runs it
    assert np.isfinite(logits).all() and logits.shape[-1] == Model(TINY).config.vocab_size
    assert "38 tensors, t=0.25" in capsys.readouterr().out


@pytest.mark.parametrize("weightless_from, t, why", [(False, "1.5", "--t must lie in [0, 1]"),
                                                     (True, "0.5", "no model.safetensors there")])
def test_the_cli_refuses_a_t_outside_0_1_and_a_directory_without_weights(tmp_path, capsys, weightless_from, t, why):
    src = tmp_path if weightless_from else TINY
    with pytest.raises(SystemExit) as e:
        interpolate.main(["--from", str(src), "--to", str(TINY), "--out", str(tmp_path / "o"), "--t", t])
    assert e.value.code == 2 and why in capsys.readouterr().err
