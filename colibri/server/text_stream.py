"""Generated tokens → the text a client sees, one incremental pipeline for JSON and SSE alike
(so a stream always reassembles to the unary answer):

    token bytes → Utf8Assembler → StopFilter → ReasoningSplitter → ContentShaper → deltas

Every stage passes `Piece`s: text plus its offset in the raw generated text, so the logprob
records of the tokens can be cut to exactly the characters that reached the client.
"""
from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN = "<tool_call>"


@dataclass(frozen=True)
class Piece:
    offset: int  # in the raw generated text
    text: str

    @property
    def end(self) -> int:
        return self.offset + len(self.text)


def _partial_suffix(text: str, needles: list[str]) -> int:
    """Length of the longest suffix of text that is a proper prefix of one of the needles."""
    best = 0
    for n in needles:
        for k in range(min(len(n) - 1, len(text)), best, -1):
            if text.endswith(n[:k]):
                best = k
                break
    return best


class Utf8Assembler:
    """Token bytes in, whole characters out: a token carrying part of a multi-byte character
    yields "" and the character appears with the token that completes it."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, data: bytes) -> str:
        buf = self.pending + data
        for cut in range(len(buf), max(len(buf) - 4, -1), -1):
            try:
                text = buf[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.pending = buf[cut:]
            return text
        self.pending = b""
        return buf.decode("utf-8", "replace")  # invalid bytes, not just incomplete ones

    def flush(self) -> str:
        text, self.pending = self.pending.decode("utf-8", "replace"), b""
        return text


class StopFilter:
    """Earliest match wins (ties: listed first); text that could start a stop is held back."""

    def __init__(self, stops: list[str], ignore_leading: bool = False):
        self.stops = [s for s in stops if s]
        self.ignore_leading = ignore_leading
        self.buf = ""
        self.offset = 0  # raw offset of buf[0]
        self.visible = False  # a non-whitespace character has been emitted
        self.matched: str | None = None
        self.leading_ignored = 0

    def feed(self, text: str) -> list[Piece]:
        if self.matched is not None:
            return []
        self.buf += text
        out: list[Piece] = []
        while True:
            hit = min(((i, n, s) for n, s in enumerate(self.stops) if (i := self.buf.find(s)) != -1), default=None)
            if hit is None:
                break
            i, _, stop = hit
            before = self.buf[:i]
            if self.ignore_leading and not self.visible and not before.strip():
                self.leading_ignored += 1
                self.offset += i + len(stop)
                self.buf = self.buf[i + len(stop):]
                continue
            out += self._emit(len(before))
            self.matched = stop
            self.buf = ""
            return out
        hold = _partial_suffix(self.buf, self.stops)
        return out + self._emit(len(self.buf) - hold)

    def _emit(self, n: int) -> list[Piece]:
        if n <= 0:
            return []
        p = Piece(self.offset, self.buf[:n])
        self.buf, self.offset = self.buf[n:], self.offset + n
        self.visible = self.visible or bool(p.text.strip())
        return [p]

    def finish(self) -> list[Piece]:
        return [] if self.matched is not None else self._emit(len(self.buf))


class ReasoningSplitter:
    """Splits `reasoning</think>content`. Starts in reasoning mode when the prompt opened the
    block; otherwise a reply that opens with <think> is split the same way. In content the
    markup is still markup (rule reasoning.not-in-content): a <think> opens another block, and
    a </think> that closes none (a small model writes one with thinking off) is dropped.
    `markup=False` (a legacy completion, raw text) passes every character on as content."""

    def __init__(self, in_reasoning: bool, markup: bool = True):
        self.mode = "reasoning" if in_reasoning else "start" if markup else "raw"
        self.buf = ""
        self.offset = 0

    def feed(self, piece: Piece) -> list[tuple[str, Piece]]:
        if not self.buf:
            self.offset = piece.offset
        self.buf += piece.text
        out: list[tuple[str, Piece]] = []
        if self.mode == "raw":
            return [("content", p) for p in self._take(len(self.buf))]
        while True:
            if self.mode == "start":
                stripped = self.buf.lstrip()
                if THINK_OPEN.startswith(stripped) and len(stripped) < len(THINK_OPEN):
                    return out  # could still become <think>
                if stripped.startswith(THINK_OPEN):
                    skip = len(self.buf) - len(stripped) + len(THINK_OPEN)
                    self._drop(skip)
                    self.mode = "reasoning"
                    continue
                self.mode = "content"
            if self.mode == "content":
                found = [(i, tag) for tag in (THINK_OPEN, THINK_CLOSE) if (i := self.buf.find(tag)) != -1]
                if found:
                    i, tag = min(found)
                    out += [("content", p) for p in self._take(i)]
                    self._drop(len(tag))
                    if tag == THINK_OPEN:
                        self.mode = "reasoning"
                    continue
                hold = _partial_suffix(self.buf, [THINK_OPEN, THINK_CLOSE])
                out += [("content", p) for p in self._take(len(self.buf) - hold)]
                return out
            i = self.buf.find(THINK_CLOSE)
            if i != -1:
                body = self.buf[:i].rstrip()
                out += [("reasoning", p) for p in self._take(len(body))]
                self._drop(i - len(body) + len(THINK_CLOSE))
                self.mode = "content"
                continue
            hold = _partial_suffix(self.buf, [THINK_CLOSE])
            keep = len(self.buf[: len(self.buf) - hold].rstrip())
            out += [("reasoning", p) for p in self._take(keep)]
            return out

    def _take(self, n: int) -> list[Piece]:
        if n <= 0:
            return []
        p = Piece(self.offset, self.buf[:n])
        self._drop(n)
        return [p]

    def _drop(self, n: int) -> None:
        self.buf, self.offset = self.buf[n:], self.offset + n

    def finish(self) -> list[tuple[str, Piece]]:
        kind = "content" if self.mode in ("content", "start", "raw") else "reasoning"
        text = self.buf if kind == "content" else self.buf.rstrip()
        return [(kind, p) for p in self._take(len(text))]


class ContentShaper:
    """Content as the client sees it: leading and trailing whitespace dropped (held until more
    text decides), and with tools active everything from the first <tool_call> withheld for
    the parser."""

    def __init__(self, tools_active: bool, strip: bool = True):
        self.tools_active = tools_active
        self.strip = strip  # chat strips the reply; a legacy completion keeps every character
        self.started = not strip
        self.pending: list[Piece] = []  # held: trailing whitespace or a partial tool marker
        self.withheld: Piece | None = None

    def feed(self, piece: Piece) -> list[Piece]:
        if self.withheld is not None:
            self.withheld = Piece(self.withheld.offset, self.withheld.text + piece.text)
            return []
        text, off = piece.text, piece.offset
        if not self.started:
            stripped = text.lstrip()
            off += len(text) - len(stripped)
            text = stripped
            if not text:
                return []
            self.started = True
        self.pending.append(Piece(off, text))
        joined = "".join(p.text for p in self.pending)
        base = self.pending[0].offset
        if self.tools_active and (i := joined.find(TOOL_OPEN)) != -1:
            out = self._cut(joined, base, len(joined[:i].rstrip()))
            self.withheld = Piece(base + i, joined[i:])
            self.pending = []
            return out
        hold = _partial_suffix(joined, [TOOL_OPEN]) if self.tools_active else 0
        keep = len(joined) - hold
        if self.strip:
            keep = len(joined[:keep].rstrip())
        out = self._cut(joined, base, keep)
        self.pending = [Piece(base + keep, joined[keep:])] if keep < len(joined) else []
        return out

    @staticmethod
    def _cut(joined: str, base: int, n: int) -> list[Piece]:
        return [Piece(base, joined[:n])] if n > 0 else []

    def finish(self, keep_trailing: bool = False) -> tuple[list[Piece], Piece | None]:
        """Flush: a held partial marker is text after all; trailing whitespace is dropped unless
        the client's stop sequence ended the text (then the text before it is returned as is)."""
        joined = "".join(p.text for p in self.pending)
        keep = len(joined.rstrip()) if self.strip and not keep_trailing else len(joined)
        out = self._cut(joined, self.pending[0].offset, keep) if self.pending else []
        self.pending = []
        return out, self.withheld
