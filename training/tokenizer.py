"""Train the embedded model's byte-level BPE tokenizer on the corpus.

Usage: python training/tokenizer.py --corpus build/corpus --out colibri/models/tiny --vocab 2048
Role markers are special tokens (never produced by merges, skipped when decoding); the
reasoning and tool tags are added tokens that decode as text, so the server's parsers see them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = ["<|pad|>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
           "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
        "</arg_value>", "<tool_response>", "</tool_response>"]


def texts(corpus: Path):
    for line in open(corpus / "train.jsonl", encoding="utf-8"):
        d = json.loads(line)
        t = "".join(s for s, _ in d["segments"])
        for m in SPECIAL + TAGS:
            t = t.replace(m, "\n")
        yield t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--out", default="colibri/models/tiny")
    ap.add_argument("--vocab", type=int, default=2048)
    a = ap.parse_args()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts(Path(a.corpus)), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    print(f"vocab {tok.get_vocab_size()} -> {out / 'tokenizer.json'}")


if __name__ == "__main__":
    main()
