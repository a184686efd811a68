"""Mix two exported models of one shape: every tensor (1 - t) * FROM + t * TO.

Usage: python training/interpolate.py --from colibri/models/tiny --to build/ft/ema-0.998 --t 0.5 --out build/mix

A fine-tune and the weights it started from lie close enough in weight space that the points
between them are models too; a point between can keep more of what the start did on text
unlike the fine-tune's corpus while keeping part of what the fine-tune gained. Both
directories must hold the same tensor names and shapes (a missing, extra or misshapen tensor
is refused by name); config.json, the tokenizer and the templates are copied from TO. Needs
numpy and safetensors only.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

COPIED = ("config.json", "tokenizer.json")  # and every chat_template*.jinja


def mix(a: dict[str, np.ndarray], b: dict[str, np.ndarray], t: float) -> dict[str, np.ndarray]:
    """(1 - t) a + t b per tensor, in float32 (the engine's load type for these files)."""
    if a.keys() != b.keys():
        only = sorted(a.keys() ^ b.keys())
        raise ValueError(f"the two models' tensors differ by name: {only[:5]}")
    out = {}
    for name in sorted(a):
        if a[name].shape != b[name].shape:
            raise ValueError(f"tensor {name}: shape {a[name].shape} against {b[name].shape}")
        x, y = a[name].astype(np.float32), b[name].astype(np.float32)
        out[name] = ((1.0 - t) * x + t * y).astype(a[name].dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", required=True, metavar="DIR", help="the model at t=0")
    ap.add_argument("--to", dest="dst", required=True, metavar="DIR", help="the model at t=1")
    ap.add_argument("--t", type=float, required=True, help="where between them, in [0, 1]")
    ap.add_argument("--out", required=True, metavar="DIR")
    a = ap.parse_args(argv)
    if not 0.0 <= a.t <= 1.0:
        ap.error("--t must lie in [0, 1]")
    src, dst, out = Path(a.src), Path(a.dst), Path(a.out)
    for d in (src, dst):
        if not (d / "model.safetensors").is_file():
            ap.error(f"{d}: no model.safetensors there")
    try:
        mixed = mix(load_file(str(src / "model.safetensors")), load_file(str(dst / "model.safetensors")), a.t)
    except ValueError as e:
        print(f"interpolate.py: {e}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    save_file(mixed, str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in [*COPIED, *(p.name for p in dst.glob("chat_template*.jinja"))]:
        shutil.copyfile(dst / f, out / f)
    print(f"{len(mixed)} tensors, t={a.t} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
