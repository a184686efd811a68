"""The tokenizers colibri rebuilds from GGUF metadata, checked against llama.cpp's own
tokenizer test vocabularies (models/ggml-vocab-*.gguf with their .inp/.out pairs, which
llama.cpp generates with the Hugging Face tokenizers of the same models).

Usage: PYTHONPATH=. python bench/peers/gguf_vocabularies.py [NAME ...]   (default: every one with tests)
Needs the llama-cpp-python sdist in the peers cache (bench/peers/run.py --install-only).
A vocabulary colibri refuses is listed as refused, with the reason it gives users.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachedir import CACHE  # noqa: E402

from colibri.gguf_file import _fields, _tokenizer  # noqa: E402

MODELS = next((CACHE / "src").glob("llama_cpp_python-*/vendor/llama.cpp/models"), CACHE / "src")
SEPARATOR = "\n__ggml_vocab_test__\n"


def check(name: str) -> str:
    meta, _, _ = _fields(MODELS / f"ggml-vocab-{name}.gguf")
    kind = f"{meta.get('tokenizer.ggml.model')}/{meta.get('tokenizer.ggml.pre')}"
    try:
        tok = _tokenizer(meta)
    except Exception as e:  # noqa: BLE001 - the refusal is the finding
        return f"{name:20} {kind:22} refused: {e}"
    texts = (MODELS / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split(SEPARATOR)
    wants = (MODELS / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    same = sum(tok.encode(t, add_special_tokens=False).ids == [int(x) for x in w.split()]
               for t, w in zip(texts, wants, strict=False))
    return f"{name:20} {kind:22} {same}/{len(texts)} texts tokenized identically"


def main() -> int:
    names = sys.argv[1:] or sorted(p.name[len("ggml-vocab-"):-len(".gguf.inp")]
                                   for p in MODELS.glob("ggml-vocab-*.gguf.inp"))
    for name in names:
        print(check(name), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
