"""Reading one HTTP/1.1 request off the wire without blocking, for the worker's event loop:
finding where its head ends, how its body is framed, and when the whole of it has arrived.

The event loop feeds bytes as they come; a `RequestReader` says when the request is whole
(a thread can then serve it without ever waiting on the client), or why it is refused before
any thread sees it. Every body passes the 4 MiB limit here, whatever its framing
(rule ops.body.every-framing): a Content-Length body is held as it arrives, and a chunked
body is decoded as it arrives, so the reader never holds more than the limit plus one chunk
line, and the thread receives it as the Content-Length request it amounts to.

Framing it cannot read (conflicting length headers, a transfer coding besides chunked,
malformed chunks) is refused here. A declared Content-Length over the limit is handed over
as it stands, marked `body_in_hand=False`: the app refuses it from its headers (after its
host and key checks, as for any request), and the connection is closed after that answer
instead of a thread waiting for a body (rule ops.refused.no-drain). A malformed request
line or header is gunicorn's parser's to refuse."""
from __future__ import annotations

import re

from .body import MAX_BODY

MAX_HEADER_BYTES = 64 * 1024
MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
MAX_TRAILER_BYTES = 16 * 1024

# The trailing CRLF is a lookahead, so that a repeated header on the next line is found too.
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n)", re.IGNORECASE)
_TRANSFER_ENCODING = re.compile(rb"\r\ntransfer-encoding:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n)", re.IGNORECASE)
_EXPECT_CONTINUE = re.compile(rb"\r\nexpect:[ \t]*100-continue[ \t]*(?=\r\n)", re.IGNORECASE)
_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")

MORE = "more"  # wait for more bytes
READY = "ready"  # `whole` is the request a thread serves
# Anything else `feed` returns is the error-table code the loop answers with, then closes:
TOO_LARGE = "request_too_large"  # the body passed MAX_BODY
HEAD_TOO_LARGE = "headers_too_large"  # no end of headers within MAX_HEADER_BYTES
MALFORMED = "malformed_request"  # unreadable chunked framing, or framing headers that conflict
UNSUPPORTED_CODING = "unsupported_transfer_coding"  # a transfer coding besides chunked


class ChunkDecoder:
    """Incremental chunked transfer-coding decoder (RFC 9112 section 7.1): extensions are
    skipped, trailer fields read and dropped."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.pending = bytearray()  # bytes not yet consumed
        self.phase = "size"  # size | data | crlf | trailer | done
        self.left = 0  # bytes of the current chunk still to come
        self.trailer = 0

    @property
    def held(self) -> int:
        return len(self.body) + len(self.pending)

    def feed(self, data: bytes | bytearray) -> str:
        self.pending += data
        while True:
            if self.phase == "size":
                end = self.pending.find(b"\r\n")
                if end < 0:
                    return MALFORMED if len(self.pending) > MAX_CHUNK_LINE else MORE
                size = bytes(self.pending[:end]).split(b";", 1)[0].strip(b" \t")
                del self.pending[:end + 2]
                if not _HEX.fullmatch(size):
                    return MALFORMED
                self.left = int(size, 16)
                if len(self.body) + self.left > MAX_BODY:
                    return TOO_LARGE
                self.phase = "data" if self.left else "trailer"
            elif self.phase == "data":
                if not self.pending:
                    return MORE
                take = min(self.left, len(self.pending))
                self.body += self.pending[:take]
                del self.pending[:take]
                self.left -= take
                if not self.left:
                    self.phase = "crlf"
            elif self.phase == "crlf":
                if len(self.pending) < 2:
                    return MORE
                if self.pending[:2] != b"\r\n":
                    return MALFORMED
                del self.pending[:2]
                self.phase = "size"
            else:  # trailer fields, each ending in CRLF, then an empty line
                end = self.pending.find(b"\r\n")
                if end < 0:
                    return MALFORMED if self.trailer + len(self.pending) > MAX_TRAILER_BYTES else MORE
                self.trailer += end + 2
                del self.pending[:end + 2]
                if self.trailer > MAX_TRAILER_BYTES:
                    return MALFORMED
                if end == 0:
                    self.phase = "done"
                    return READY


class RequestReader:
    """One request as it arrives. `feed` returns MORE, READY (then `whole` holds what the
    thread reads, `body_in_hand` whether its body is all there) or a refusal."""

    def __init__(self) -> None:
        self.raw = bytearray()  # the head while it arrives, then a Content-Length body
        self.head = b""
        self.length = -1  # Content-Length of a body read here; -1: not framed here
        self.chunks: ChunkDecoder | None = None
        self.expects_continue = False  # the client waits for "100 Continue" before its body
        self.whole = b""
        self.body_in_hand = True
        self.started = False  # a first byte has arrived

    @property
    def held(self) -> int:
        """Bytes of the request this reader holds in memory."""
        return len(self.raw) + len(self.head) + (self.chunks.held if self.chunks is not None else 0)

    def feed(self, data: bytes | bytearray) -> str:
        if data:
            self.started = True
        if self.chunks is not None:
            return self._chunked(data)
        self.raw += data
        if not self.head:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return HEAD_TOO_LARGE if len(self.raw) > MAX_HEADER_BYTES else MORE
            if end + 4 > MAX_HEADER_BYTES:
                return HEAD_TOO_LARGE
            return self._framed(end + 4)
        if len(self.raw) >= self.length:
            return self._ready(self.head + bytes(self.raw))
        return MORE

    def _framed(self, head_end: int) -> str:
        """The head is in: decide how the body is framed."""
        head = bytes(self.raw[:head_end])
        rest = bytes(self.raw[head_end:])
        http10 = head.split(b"\r\n", 1)[0].rstrip().endswith(b"HTTP/1.0")
        te = _TRANSFER_ENCODING.findall(head)
        cl = _CONTENT_LENGTH.findall(head)
        expect = bool(_EXPECT_CONTINUE.search(head))
        if te and not cl and len(te) == 1 and te[0].lower() == b"chunked" and not http10:
            self.raw = bytearray()
            self.head = _EXPECT_CONTINUE.sub(b"", _TRANSFER_ENCODING.sub(b"", head))
            self.chunks = ChunkDecoder()
            self.expects_continue = expect
            return self._chunked(rest)
        if te:
            # Only chunked alone is read. RFC 9112 section 6.3: with chunked not last, or with
            # a Content-Length beside it, or in HTTP/1.0, the body's length is unknowable (400);
            # a content coding under chunked is one this server does not decode (501).
            codings = [c.strip(b" \t").lower() for c in b",".join(te).split(b",")]
            if codings[-1] != b"chunked" or cl or http10 or len(te) > 1:
                return MALFORMED
            return UNSUPPORTED_CODING
        if len(cl) > 1 or (cl and not cl[0].isdigit()):
            return MALFORMED
        length = int(cl[0]) if cl else 0
        if length > MAX_BODY:
            return self._as_it_stands(head + rest)  # the app answers 413 from the headers
        self.head = _EXPECT_CONTINUE.sub(b"", head)
        self.length = length
        self.raw = bytearray(rest)
        if len(self.raw) >= length:
            return self._ready(self.head + rest)
        self.expects_continue = expect and not http10
        return MORE

    def _chunked(self, data: bytes | bytearray) -> str:
        assert self.chunks is not None
        state = self.chunks.feed(data)
        if state != READY:
            return state
        body, after = bytes(self.chunks.body), bytes(self.chunks.pending)
        head = self.head[:-2] + b"Content-Length: %d\r\n\r\n" % len(body)
        return self._ready(head + body + after)

    def _as_it_stands(self, whole: bytes) -> str:
        self.body_in_hand = False
        return self._ready(whole)

    def _ready(self, whole: bytes) -> str:
        self.whole = whole
        self.raw = bytearray()
        self.chunks = None
        self.head = b""
        return READY
