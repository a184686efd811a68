"""Train the embedded model's byte-level BPE tokenizer on the corpus.

Usage: python training/tokenizer.py --corpus build/corpus --out colibri/models/tiny --vocab 2048
Role markers are special tokens (never produced by merges, skipped when decoding); the
reasoning and tool tags are added tokens that decode as text, so the server's parsers see them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

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


def words_apart(spaces: bool = True) -> pre_tokenizers.PreTokenizer:
    """The split used while learning merges with --split-words (spaces=True) or --split-digits
    (spaces=False): every digit, and with spaces every space, is a piece of its own, so no merge
    joins two digits or (with spaces) a space to the word after it. The tokenizer
    is saved with GPT-2's split all the same (what llama.cpp's "gpt-2" pre-tokenizer does too):
    with no such merge learnt, both give the same tokens. Why: a word then has the same tokens
    after a space as at the start of a reply or after a quote, so repeating a text or copying a
    value into a tool call is copying tokens, not respelling the first one ("Ġb os qu e" in the
    prompt against "b os qu e" in the reply), and a number is copied digit by digit."""
    # GPT-2's split first, then the space (a leading "Ġ" once bytes are mapped) and the digits
    # cut off its pieces: splitting spaces first would let "'t" in " 'tis" match as a contraction.
    # With spaces=False (--split-digits) only the digits are cut off: " 426" learns no merge of
    # its space with a digit, so it is "Ġ 4 2 6" both ways, and words keep their leading space.
    cut = [pre_tokenizers.Split(Regex("\u0120"), behavior="isolated")] if spaces else []
    return pre_tokenizers.Sequence([pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), *cut,
                                    pre_tokenizers.Digits(individual_digits=True)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--out", default="colibri/models/tiny")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--split-words", action="store_true",
                    help="learn no merge that holds a space or a digit (see words_apart)")
    ap.add_argument("--split-digits", action="store_true", help="learn no merge that holds a digit")
    a = ap.parse_args()
    tok = Tokenizer(models.BPE())
    shipped_split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    split = a.split_words or a.split_digits
    tok.pre_tokenizer = words_apart(spaces=a.split_words) if split else shipped_split
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts(Path(a.corpus)), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    tok.pre_tokenizer = shipped_split
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    print(f"vocab {tok.get_vocab_size()} -> {out / 'tokenizer.json'}")


if __name__ == "__main__":
    main()
