"""Dequantize a GGUF into a float32 Hugging Face folder: python gguf_to_hf.py FILE.gguf OUT_DIR.

Runs inside the transformers-serve venv (torch, transformers>=5, gguf), not the harness's.
transformers reads GGUF but its save_pretrained refuses a GGUF-loaded model, so the weights are
written by hand with safetensors.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(gguf: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # shares storage with the embeddings: safetensors refuses both
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)

    # transformers 5 writes rope_parameters only; loaders that read the top-level rope_theta would
    # silently use 10,000 (the model babbles), and llama.cpp's converter needs `architectures`.
    # The GGUF quantization_config it keeps would send loaders looking for the .gguf: the weights
    # here are plain float32.
    path = out / "config.json"
    config = json.loads(path.read_text())
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["rope_theta"] = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 100000.0))
    path.write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {out}: rope_theta={config['rope_theta']}, tied={model.config.tie_word_embeddings}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
