"""Tool names and argument keys decoded from the offered set (rule tools.decode.offered-names).

A small model often opens a call well and then names a tool it met elsewhere (`query_track`
where `play_track` was offered) or a parameter of another tool. The parser refuses such a call
afterwards (rule tools.call.offered-only), which costs the user the call. This module keeps it
from being written: once the family's native syntax has opened a name slot, only tokens that
continue one of the offered names (then the syntax's end of the name) may be sampled; in the
XML formats the same holds for each argument key, drawn from the named tool's declared
properties, and in the JSON format each key of the call's `arguments` object. Everything else
the model writes, values included, is left alone: a slot is a few tokens, so the model's own
choice decides every call it would have written correctly anyway.

The decoder follows the bytes the model writes, token by token, not the parsed text: a slot
opens when an opener pattern completes inside the newest token, and closes when the bytes
written since reach a candidate followed by one of its end markers. In the JSON format a key
cannot be told from a string value by a pattern, so from the `"arguments": {` of a named call
to its closing brace the decoder reads the bytes as JSON (strings, escapes, nesting): a string
that starts where the object expects a key, at its top level, is a key slot.
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


#: Per tool_format of spec/families.yaml: the native syntax's name and key slots, as the
#: parsers in tool_parsers.py read them (a glm name ends at the newline before its first key,
#: or at the block's end when it has no arguments).
SLOTS: dict[str, tuple[Slot, ...]] = {
    "glm-xml": (Slot("name", re.compile(rb"<tool_call>"), (b"\n", b"</tool_call>")),
                Slot("key", re.compile(rb"<arg_key>"), (b"</arg_key>",))),
    "json-tags": (Slot("name", re.compile(rb'<tool_call>\s*\{\s*"name"\s*:\s*"'), (b'"',)),),
    "qwen-xml": (Slot("name", re.compile(rb"<tool_call>\s*<function="), (b">",)),
                 Slot("key", re.compile(rb"<parameter="), (b">",))),
}
#: Formats whose keys live in a JSON object: where that object opens, after the name.
ARGUMENT_OBJECTS: dict[str, re.Pattern[bytes]] = {"json-tags": re.compile(rb'"arguments"\s*:\s*\{')}
JSON_KEY = Slot("key", re.compile(rb'"'), (b'"',))  # a key of such an object, ending at its quote (opened by _json, never searched for)

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
        self.index, self.slots, self.objects = index, SLOTS[fmt], ARGUMENT_OBJECTS.get(fmt)
        offered = declared(tools)
        self.names = {n: _name_bytes(n, fmt) for n in offered}
        self.keys = {n: [_name_bytes(k, fmt) for k in ((fn.get("parameters") or fn.get("input_schema") or {})
                                                       .get("properties") or {})]
                     for n, fn in offered.items()}
        self.tail = b""  # recent output, outside any slot
        self.slot: Slot | None = None
        self.written = b""  # the open slot's bytes so far
        # the open slot's targets (candidate + end, and the tool a name target names) that
        # `written` is still a beginning of: all of them when the slot opens, fewer each token
        self.live: list[tuple[bytes, str | None]] = []
        self.tool: str | None = None  # the last name written, whose keys the key slots take
        # inside a named call's JSON arguments object: nesting depth (0: not inside one),
        # whether a string is open (and its last byte a backslash), whether a key comes next
        self.depth, self.in_string, self.escaped, self.key_next = 0, False, False, False

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
            self._route(piece)

    def _route(self, data: bytes) -> None:
        """Bytes outside any slot: JSON arguments are read as JSON, anything else searched."""
        if self.depth:
            self._json(data)
        else:
            self._scan(data)

    def _open(self, slot: Slot, written: bytes) -> bool:
        """Enter `slot` with the bytes already written into it; False when they already left
        every target (the token that opened the slot carried a wrong start: the parser judges)."""
        live = [(t, n) for t, n in self._candidates(slot) if t.startswith(written) or written.startswith(t)]
        if not live:
            return False
        self.slot, self.written, self.live = slot, written, live
        self._step()
        return True

    def _step(self) -> None:
        """Close the slot once `written` reaches a target; narrow the live targets otherwise."""
        assert self.slot is not None
        for target, tool in self.live:
            if self.written.startswith(target):
                if self.slot.kind == "name":
                    self.tool = tool
                after = self.written[len(target):]
                self.slot, self.written, self.live = None, b"", []
                if self.depth:
                    self.key_next = False  # the key's own closing quote was part of the target
                else:
                    self.tail = b""
                self._route(after)  # the token that closed a slot may open the next one
                return
        self.live = [(t, n) for t, n in self.live if t.startswith(self.written)]
        if not self.live:  # left the set (only when the slot was entered already off it)
            self.slot, self.written = None, b""

    def _scan(self, piece: bytes) -> None:
        """Open a slot, or a named call's JSON arguments, when its opener completes inside
        `piece`, the newest bytes."""
        self.tail = (self.tail + piece)[-_TAIL:]
        fresh_from = len(self.tail) - len(piece)
        best: tuple[int, Slot | None] | None = None
        openers: list[tuple[re.Pattern[bytes], Slot | None]] = [(slot.opener, slot) for slot in self.slots]
        if self.objects is not None and self.keys.get(self.tool or ""):
            openers.append((self.objects, None))  # None: the arguments object, not a slot
        for opener, slot in openers:
            if opener.pattern[-1:] not in piece:
                continue  # a token without the opener's last byte cannot complete it
            if slot is not None and slot.kind == "key" and not self.keys.get(self.tool or ""):
                continue  # no tool named yet, or one without declared properties: keys stay free
            for m in opener.finditer(self.tail):
                if m.end() > fresh_from and (best is None or m.end() > best[0]):
                    best = (m.end(), slot)
        if best is None:
            return
        end, slot = best
        rest = self.tail[end:]
        if slot is None:
            self.depth, self.in_string, self.escaped, self.key_next = 1, False, False, True
            self._json(rest)
        else:
            self._open(slot, rest)

    def _json(self, data: bytes) -> None:
        """Read the arguments object byte by byte; a string that starts where a key is due at
        its top level opens a key slot."""
        for i, c in enumerate(data):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == 0x5C:  # backslash
                    self.escaped = True
                elif c == 0x22:  # closing quote
                    self.in_string = False
            elif c == 0x22:
                if self.depth == 1 and self.key_next and self._open(JSON_KEY, data[i + 1:]):
                    return  # the slot took the rest of the bytes
                self.in_string = True
            elif c in b"{[":
                self.depth += 1
            elif c in b"}]":
                self.depth -= 1
                if self.depth == 0:  # the object closed: back to searching for openers
                    self.tail = b""
                    self._scan(data[i + 1:])
                    return
            elif self.depth == 1 and c == 0x2C:  # comma: a key comes next
                self.key_next = True
            elif self.depth == 1 and c == 0x3A:  # colon: a value comes next
                self.key_next = False
