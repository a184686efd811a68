"""A conversation's segments as token ids and a loss mask (train.py), and the copy-aligned
reading of its targets (`train.py --align-copies`).

Byte-level BPE writes a word one way after a space and another way at the start of a text or
after punctuation: " fahrenheit" is `Ġf a h ren he it`, while the same word as an argument value
(after `<arg_value>` or a quote) or as the first word of a repeated text is `fa h ren he it`. To
copy it, the model has to merge two of the prompt's pieces into a token the prompt does not
hold; the shipped model writes `fe` there (log-probability -0.83 against -1.0 for `fa`), and
that one word is 21 of its 94 argument misses on the held-out set. Repeating the same word it
writes `f`, `a`, `h`, ...: the prompt's own pieces, which decode to the same text.

Aligned, a target word that starts after something other than a space, and that the context
holds only after a space, is written in the context's pieces: the first piece without its
space, then the same tokens. Copying is then token for token. The text is unchanged (checked
for every word that is rewritten), only its tokenization, and the server decodes any sequence
of tokens. A word the context also holds after punctuation or at a line's start (a tool's
name or parameter copied from the schema, a quoted word) already has its source in the
tokenizer's own pieces and keeps them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

SPACE = "Ġ"  # byte-level BPE's letter for the space byte


def _word_start(text: str, s: int) -> bool:
    """A letter that begins a word not preceded by a space (the start, or after punctuation)."""
    return text[s:s + 1].isalpha() and (s == 0 or not (text[s - 1].isalpha() or text[s - 1] == " "))


def _sources(context: str, word: str) -> tuple[bool, bool]:
    """Whether `context` holds `word` as a whole word after a space, and after anything else."""
    spaced = other = False
    at = context.find(word)
    while at >= 0 and not (spaced and other):
        end = at + len(word)
        if (at == 0 or not context[at - 1].isalpha()) and not context[end:end + 1].isalpha():
            if at > 0 and context[at - 1] == " ":
                spaced = True
            else:
                other = True
        at = context.find(word, at + 1)
    return spaced, other


def _as_after_space(tok: Any, word: str) -> list[int] | None:
    """`word` in the pieces it has after a space, that space dropped; None if that cannot be
    written without changing the text."""
    spaced = tok.encode(" " + word, add_special_tokens=False).ids
    first = tok.id_to_token(spaced[0])
    if not first.startswith(SPACE):
        return None
    head = first[len(SPACE):]
    if not head:
        ids = spaced[1:]
    else:
        single = tok.token_to_id(head)
        ids = ([single] if single is not None else tok.encode(tok.decode([spaced[0]])[1:], add_special_tokens=False).ids) + spaced[1:]
    return ids if ids and tok.decode(ids) == word else None


def aligned(tok: Any, context: str, text: str, enc: Any = None) -> list[int]:
    """`text`'s token ids, with each word that starts after a non-space and appears in `context`
    only after a space written in the context's pieces (see the module docstring). `enc` is
    `text`'s encoding when the caller already has it."""
    enc = enc or tok.encode(text)
    ids, offs = enc.ids, enc.offsets
    out: list[int] = []
    i = 0
    while i < len(ids):
        s = offs[i][0]
        if (i == 0 or offs[i - 1][1] <= s) and _word_start(text, s):
            e = s
            while e < len(text) and text[e].isalpha():
                e += 1
            word = text[s:e]
            j = i
            while j < len(ids) and offs[j][0] >= s and offs[j][1] <= e:
                j += 1
            spaced, other = _sources(context, word)
            new = _as_after_space(tok, word) if spaced and not other else None
            if new is not None:
                out += new
                i = j
                continue
        out.append(ids[i])
        i += 1
    return out


def segment_ids(tok: Any, segments: list[list[Any]], align: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and loss mask of one conversation. Each segment is tokenized on its own, as the
    server tokenizes a prompt that ends where a target starts; with `align`, targets are read
    copy-aligned against everything before them."""
    enc = tok.encode_batch([s for s, _ in segments])
    parts, masks, context = [], [], ""
    for e, (text, target) in zip(enc, segments, strict=True):
        got = aligned(tok, context, text, e) if align and target else e.ids
        parts.append(np.array(got, np.int64))
        masks.append(np.full(len(got), target, np.int64))
        context += text
    return np.concatenate(parts), np.concatenate(masks)
