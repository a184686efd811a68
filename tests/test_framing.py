"""The event loop's request reader (colibri/server/framing.py), in-process: where a request
ends for each body framing, and the 4 MiB limit on every one (rule ops.body.every-framing)."""
from __future__ import annotations

from colibri.server.body import MAX_BODY
from colibri.server.framing import MORE, READY, RequestReader

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n"


def _feed_bytewise(data: bytes) -> tuple[str, RequestReader]:
    reader = RequestReader()
    outcome = MORE
    for i in range(len(data)):
        outcome = reader.feed(data[i:i + 1])
        if outcome != MORE:
            break
    return outcome, reader


def test_ops_body_every_framing_chunked_decodes_to_a_content_length_request():
    raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n3;a=b\r\n{\"a\r\n4\r\n\": 1\r\n1\r\n}\r\n0;last\r\nT: 1\r\n\r\nGET /next"
    outcome, reader = _feed_bytewise(raw)
    assert outcome == READY and reader.body_in_hand
    assert reader.whole == HEAD + b"Content-Length: 8\r\n\r\n{\"a\": 1}"
    reader = RequestReader()
    assert reader.feed(raw) == READY and reader.whole.endswith(b"{\"a\": 1}GET /next")  # pipelined bytes kept


def test_ops_body_every_framing_limits():
    reader = RequestReader()
    assert reader.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n") == MORE
    piece = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n"
    outcome = MORE
    for _ in range(MAX_BODY // 65536 + 1):
        outcome = reader.feed(piece)
        if outcome != MORE:
            break
    assert outcome == "request_too_large" and reader.held <= MAX_BODY + len(piece) + 200
    assert RequestReader().feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (MAX_BODY + 1)) == "request_too_large"
    assert RequestReader().feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 5000) == "malformed_request"
    assert RequestReader().feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n") == "malformed_request"
    assert RequestReader().feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n1\r\nabc") == "malformed_request"
    assert RequestReader().feed(HEAD + b"X: " + b"a" * 70000) == "headers_too_large"
    big = RequestReader()
    assert big.feed(HEAD + b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1)) == READY and not big.body_in_hand
    assert RequestReader().feed(HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n") == "unsupported_transfer_coding"
    assert RequestReader().feed(HEAD + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n") == "malformed_request"


def test_expect_continue_is_answered_by_the_loop_and_stripped():
    reader = RequestReader()
    assert reader.feed(HEAD + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n") == MORE
    assert reader.expects_continue
    assert reader.feed(b"{}") == READY
    assert reader.whole == HEAD + b"Content-Length: 2\r\n\r\n{}"
