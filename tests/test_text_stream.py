"""The text pipeline stages, fed one character at a time and all at once: the same output."""
from __future__ import annotations

import pytest

from colibri.server.text_stream import ContentShaper, Piece, ReasoningSplitter, StopFilter, Utf8Assembler


def run_stop(stops, chunks, ignore_leading=False):
    f = StopFilter(stops, ignore_leading)
    out = []
    for c in chunks:
        out += f.feed(c)
    out += f.finish()
    return "".join(p.text for p in out), f.matched


@pytest.mark.parametrize("chunked", [False, True])
def test_stop_removes_match_and_rest(chunked):
    text = "ALPHA STOP BETA"
    chunks = list(text) if chunked else [text]
    assert run_stop(["STOP"], chunks) == ("ALPHA ", "STOP")


def test_partial_stop_is_held_then_flushed():
    f = StopFilter(["STOP"])
    assert [p.text for p in f.feed("answer ST")] == ["answer "]
    assert [p.text for p in f.finish()] == ["ST"]


def test_earliest_match_wins_then_list_order():
    assert run_stop(["BETA", "ALPHA"], ["one ALPHA two BETA"]) == ("one ", "ALPHA")
    assert run_stop(["AB", "A"], ["xAB"]) == ("x", "AB")


def test_leading_ignore():
    assert run_stop(["END"], list("END done END more"), ignore_leading=True) == (" done ", "END")
    assert run_stop(["END"], ["  END x"], ignore_leading=True) == (" x", None)


def test_offsets_follow_the_raw_text():
    f = StopFilter(["zz"])
    pieces = f.feed("abc") + f.feed("dz") + f.feed("ze")
    assert [(p.offset, p.text) for p in pieces] == [(0, "abc"), (3, "d")]


def test_utf8_assembler_splits_nothing():
    data = "é😊x".encode()
    a = Utf8Assembler()
    out = [a.feed(data[i:i + 1]) for i in range(len(data))]
    assert "".join(out) == "é😊x" and out[1] == "é" and out[2:5] == ["", "", ""]


def split(text, in_reasoning, chunked, markup=True):
    s = ReasoningSplitter(in_reasoning, markup)
    out = []
    chunks = [Piece(i, ch) for i, ch in enumerate(text)] if chunked else [Piece(0, text)]
    for c in chunks:
        out += s.feed(c)
    out += s.finish()
    r = "".join(p.text for k, p in out if k == "reasoning")
    c = "".join(p.text for k, p in out if k == "content")
    return r, c


@pytest.mark.parametrize("chunked", [False, True])
def test_reasoning_split(chunked):
    assert split("I think.\n</think>\n\nThe answer.", True, chunked) == ("I think.", "\n\nThe answer.")
    assert split("plain answer", False, chunked) == ("", "plain answer")
    assert split("<think>\nhmm\n</think>\n\nok", False, chunked) == ("\nhmm", "\n\nok")
    assert split("never closed\n", True, chunked) == ("never closed", "")


@pytest.mark.parametrize("chunked", [False, True])
def test_reasoning_not_in_content_markup_in_content_is_still_markup(chunked):
    """Rule reasoning.not-in-content: the embedded model once answered "Please say back, word
    for word: marble." with thinking off as below; the stray close tag never reaches content."""
    assert split("'m doing well, '</think>marble", False, chunked) == ("", "'m doing well, 'marble")
    assert split("ok.</think> done", False, chunked) == ("", "ok. done")
    # a second block, after the first closed, is reasoning too; a stray close after it dropped
    assert split("a</think>b <think>c</think> d</think>e", True, chunked) == ("ac", "b  de")
    # text that only looks like the start of a tag is content once it is clear it is not one
    assert split("x </thin y <th", False, chunked) == ("", "x </thin y <th")


@pytest.mark.parametrize("chunked", [False, True])
def test_a_legacy_completion_keeps_think_markup_as_text(chunked):
    """/v1/completions has no reasoning field: its text is every character the model wrote."""
    text = "<think>a</think> b </think> c <think>d"
    assert split(text, False, chunked, markup=False) == ("", text)


def shape(text, tools, chunked):
    s = ContentShaper(tools)
    out = []
    for i, ch in (enumerate(text) if chunked else [(0, text)]):
        out += s.feed(Piece(i, ch))
    tail, withheld = s.finish()
    out += tail
    return "".join(p.text for p in out), withheld.text if withheld else None


@pytest.mark.parametrize("chunked", [False, True])
def test_content_shaper(chunked):
    assert shape("\n\n  hello world  \n", False, chunked) == ("hello world", None)
    assert shape("Sure. <tool_call>x</tool_call>", True, chunked) == ("Sure.", "<tool_call>x</tool_call>")
    assert shape("a <tool_ca", True, chunked) == ("a <tool_ca", None)
    assert shape("<tool_call>x", True, chunked) == ("", "<tool_call>x")
