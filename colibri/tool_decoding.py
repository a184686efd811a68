"""Tool names and argument keys decoded from the offered set (rule tools.decode.offered-names).

A small model often opens a call well and then names a tool it met elsewhere (`query_track`
where `play_track` was offered) or a parameter of another tool. The parser refuses such a call
afterwards (rule tools.call.offered-only), which costs the user the call. This module keeps it
from being written: once the family's native syntax has opened a name slot, only tokens that
continue one of the offered names (then the syntax's end of the name) may be sampled; in the
XML formats the same holds for each argument key, drawn from the named tool's declared
properties. Everything else the model writes, values included, is left alone: a slot is a few
tokens, so the model's own choice decides every call it would have written correctly anyway.

The decoder follows the bytes the model writes, token by token, not the parsed text: a slot
opens when an opener pattern completes inside the newest token, and closes when the bytes
written since reach a candidate followed by one of its end markers.
"""
from __future__ import annotations

import bisect
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from .tool_parsers import declared


@dataclass(frozen=True)
class Slot:
    kind: str  # "name": a tool's name; "key": an argument key of the tool just named
    opener: re.Pattern[bytes]  # the bytes after which the slot's text starts
    ends: tuple[bytes, ...]  # what may follow the name or key; reaching one closes the slot

    @property
    def last(self) -> bytes:
        """The opener's final byte: a token without it cannot complete the opener, so most
        tokens skip the search."""
        return self.opener.pattern[-1:]


#: Per tool_format of spec/families.yaml: the native syntax's name and key slots, as the
#: parsers in tool_parsers.py read them (a glm name ends at the newline before its first key,
#: or at the block's end when it has no arguments). json-tags keys are not constrained: a key
#: there cannot be told from a string value without parsing JSON as it streams.
SLOTS: dict[str, tuple[Slot, ...]] = {
    "glm-xml": (Slot("name", re.compile(rb"<tool_call>"), (b"\n", b"</tool_call>")),
                Slot("key", re.compile(rb"<arg_key>"), (b"</arg_key>",))),
    "json-tags": (Slot("name", re.compile(rb'<tool_call>\s*\{\s*"name"\s*:\s*"'), (b'"',)),),
    "qwen-xml": (Slot("name", re.compile(rb"<tool_call>\s*<function="), (b">",)),
                 Slot("key", re.compile(rb"<parameter="), (b">",))),
}

_TAIL = 256  # bytes of recent output searched for an opener (openers are a few dozen bytes)


class TokenIndex:
    """The vocabulary by bytes: which tokens spell exactly some bytes, and which start with them.
    Built once per model; special tokens (empty bytes) are in neither, so a slot never admits
    them (an end-of-turn token cannot cut a name short)."""

    def __init__(self, token_bytes: list[bytes]):
        self.token_bytes = token_bytes
        self.exact: dict[bytes, list[int]] = {}
        for i, b in enumerate(token_bytes):
            if b:
                self.exact.setdefault(b, []).append(i)
        self._sorted = sorted((b, i) for i, b in enumerate(token_bytes) if b)
        self._keys = [b for b, _ in self._sorted]

    def starting_with(self, prefix: bytes) -> list[int]:
        """Tokens whose bytes begin with `prefix` (a token may run past a slot's end)."""
        out = []
        at = bisect.bisect_left(self._keys, prefix)
        while at < len(self._keys) and self._keys[at].startswith(prefix):
            out.append(self._sorted[at][1])
            at += 1
        return out

    def allowed(self, written: bytes, targets: frozenset[bytes]) -> list[int]:
        """Tokens that keep `written` on the way to one of `targets`: each spells a next piece
        of a target's rest, or the whole rest and more. Clients send the same tools turn after
        turn, so the answers are kept (a few thousand, least recently used dropped)."""
        return self._allowed(frozenset(t[len(written):] for t in targets
                                       if t.startswith(written) and len(t) > len(written)))

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one index per model, kept for the server's life
    def _allowed(self, rests: frozenset[bytes]) -> list[int]:
        ids: set[int] = set()
        for piece in {r[:n] for r in rests for n in range(1, len(r))}:
            ids.update(self.exact.get(piece, ()))
        for rest in rests:
            ids.update(self.starting_with(rest))
        return sorted(ids)


def _name_bytes(name: str, fmt: str) -> bytes:
    # a JSON string carries the name escaped; the XML formats carry it as is
    return json.dumps(name, ensure_ascii=False)[1:-1].encode() if fmt == "json-tags" else name.encode()


class ToolDecoder:
    """One request's constraint. The scheduler asks `allowed()` before sampling (None: any
    token) and tells `feed(token)` what was sampled."""

    def __init__(self, index: TokenIndex, fmt: str, tools: list[dict[str, Any]]):
        self.index, self.slots = index, SLOTS[fmt]
        self.names = {n: _name_bytes(n, fmt) for n in declared(tools)}
        self.keys = {n: [k.encode() for k in ((fn.get("parameters") or fn.get("input_schema") or {})
                                              .get("properties") or {})]
                     for n, fn in declared(tools).items()}
        self.tail = b""  # recent output, outside any slot
        self.slot: Slot | None = None
        self.written = b""  # the open slot's bytes so far
        # the open slot's targets (candidate + end, and the tool a name target names) that
        # `written` is still a beginning of: all of them when the slot opens, fewer each token
        self.live: list[tuple[bytes, str | None]] = []
        self.tool: str | None = None  # the last name written, whose keys the key slots take

    def _candidates(self, slot: Slot) -> list[tuple[bytes, str | None]]:
        if slot.kind == "name":
            return [(b + end, n) for n, b in self.names.items() for end in slot.ends]
        return [(k + end, None) for k in self.keys.get(self.tool or "", []) for end in slot.ends]

    def allowed(self) -> list[int] | None:
        if self.slot is None:
            return None
        return self.index.allowed(self.written, frozenset(t for t, _ in self.live)) or None

    def feed(self, token: int) -> None:
        piece = self.index.token_bytes[token] if 0 <= token < len(self.index.token_bytes) else b""
        if self.slot is not None:
            self.written += piece
            self._step()
        else:
            self._scan(piece)

    def _step(self) -> None:
        """Close the slot once `written` reaches a target; narrow the live targets otherwise."""
        assert self.slot is not None
        for target, tool in self.live:
            if self.written.startswith(target):
                if self.slot.kind == "name":
                    self.tool = tool
                after = self.written[len(target):]
                self.slot, self.written, self.live, self.tail = None, b"", [], b""
                self._scan(after)  # the token that closed a slot may open the next one
                return
        self.live = [(t, n) for t, n in self.live if t.startswith(self.written)]
        if not self.live:  # left the set (only when the slot was entered already off it)
            self.slot, self.written = None, b""

    def _scan(self, piece: bytes) -> None:
        """Open a slot when an opener completes inside `piece`, the newest bytes."""
        self.tail = (self.tail + piece)[-_TAIL:]
        fresh_from = len(self.tail) - len(piece)
        best: tuple[int, Slot] | None = None
        for slot in self.slots:
            if slot.last not in piece:
                continue
            if slot.kind == "key" and not self.keys.get(self.tool or ""):
                continue  # no tool named yet, or one without declared properties: keys stay free
            for m in slot.opener.finditer(self.tail):
                if m.end() > fresh_from and (best is None or m.end() > best[0]):
                    best = (m.end(), slot)
        if best is None:
            return
        end, slot = best
        written = self.tail[end:]
        live = [(t, n) for t, n in self._candidates(slot) if t.startswith(written) or written.startswith(t)]
        if not live:
            return  # the token that opened the slot already left the offered set: the parser judges it
        self.slot, self.written, self.live = slot, written, live
        self._step()
