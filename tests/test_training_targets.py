"""Copy-aligned targets (training/targets.py, `train.py --align-copies`): a word the model
copies from after a space is written in the prompt's own pieces, and no text changes."""
from __future__ import annotations

import random
import sys
from itertools import islice
from pathlib import Path

import pytest
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

import corpus  # noqa: E402
import targets  # noqa: E402

TOK = Tokenizer.from_file(str(corpus.MODEL_DIR / "tokenizer.json"))


def pieces(ids: list[int]) -> list[str]:
    return [TOK.id_to_token(i) for i in ids]


def test_a_copied_value_takes_the_request_s_pieces():
    """The held-out miss: " fahrenheit" is Ġf|a|h..., the value after <arg_value> fa|h...;
    aligned, the value is f|a|h..., the request's pieces without the space."""
    context = "<|user|>\nConvert 24 celsius to fahrenheit.<|assistant|>\n"
    text = "<tool_call>convert_units\n<arg_key>to_unit</arg_key>\n<arg_value>fahrenheit</arg_value>\n</tool_call>"
    plain = TOK.encode(text).ids
    got = targets.aligned(TOK, context, text)
    assert "fa" in pieces(plain)
    request = pieces(TOK.encode(" fahrenheit", add_special_tokens=False).ids)
    assert request[0] == "Ġf"
    value = ["f"] + request[1:]
    start = pieces(got).index("<arg_value>") + 1
    assert pieces(got)[start:start + len(value)] == value
    assert TOK.decode(got, skip_special_tokens=False) == TOK.decode(plain, skip_special_tokens=False)


def test_words_with_a_source_outside_a_space_keep_the_tokenizer_s_pieces():
    """A word the context also holds after punctuation (a parameter or tool name copied from the
    schema, a quoted word), or never holds at all, is left as the tokenizer writes it; so is a
    word that follows a space in the target itself."""
    context = ('{"name": "read_directions", "properties": {"path": {}}}<|user|>\n'
               'Read directions for path "fahrenheit" and size.<|assistant|>\n')
    for text in ("<tool_call>read_directions\n<arg_key>path</arg_key>", "<arg_value>fahrenheit</arg_value>",
                 "<arg_value>unknown</arg_value>", "<tool_call>x fahrenheit"):
        assert targets.aligned(TOK, context, text) == TOK.encode(text).ids, text
    # the same word spaced only: aligned ("size" is held after a space, nowhere else)
    spaced = pieces(TOK.encode(" size", add_special_tokens=False).ids)
    assert spaced == ["Ġsi", "ze"] and pieces(TOK.encode("size").ids) == ["size"]
    assert pieces(targets.aligned(TOK, context, "<arg_value>size</arg_value>")) == \
        ["<arg_value>", "si", "ze", "</arg_value>"]


def test_a_first_letter_of_two_bytes_is_split_where_the_request_splits_it():
    got = targets.aligned(TOK, "Repeat exactly: ölçü kapı", "ölçü kapı")
    spaced = pieces(TOK.encode(" ölçü", add_special_tokens=False).ids)
    assert spaced[0] == "ĠÃ" and pieces(TOK.encode("ölçü").ids)[0] == "Ã¶"  # the two readings part in the first byte
    assert pieces(got)[:len(spaced)] == ["Ã"] + spaced[1:]
    assert TOK.decode(got) == "ölçü kapı"


def test_alignment_never_changes_a_target_s_text_and_moves_words_only():
    """Over the first 300 conversations of a corpus recipe, every aligned target decodes to its
    text, some targets change, and the mask covers exactly the targets."""
    changed = 0
    for segs in islice(_conversations(), 300):
        ids, mask = targets.segment_ids(TOK, segs, align=True)
        plain, plain_mask = targets.segment_ids(TOK, segs, align=False)
        assert TOK.decode(ids.tolist(), skip_special_tokens=False) == TOK.decode(plain.tolist(), skip_special_tokens=False)
        assert TOK.decode(ids[mask == 1].tolist(), skip_special_tokens=False) == \
            TOK.decode(plain[plain_mask == 1].tolist(), skip_special_tokens=False)
        changed += not (len(ids) == len(plain) and (ids == plain).all())
    assert 20 <= changed < 300, changed


def _conversations():
    gen = corpus.Gen(random.Random(1), "composed-colons", str(corpus.MODEL_DIR / "tokenizer.json"))
    while True:
        yield corpus.example(gen.conversation())["segments"]


if __name__ == "__main__":
    pytest.main([__file__])
