"""Error answers the HTTP worker writes straight to a socket, as whole HTTP/1.1 responses:
refusals made on the event loop before any thread or the application sees the request, and
gunicorn's parser refusals (its own answers are HTML pages), each as a row of the error table
in the JSON envelope the request's path implies (rule ops.http-errors.envelope)."""
from __future__ import annotations

from gunicorn.http import errors as http_errors

from .errors import ApiError, envelope_for

_REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long",
            417: "Expectation Failed", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 501: "Not Implemented"}
#: gunicorn's parser refusals, as rows of the error table (its own answers are HTML pages).
_PARSER_REFUSALS: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    ((http_errors.LimitRequestLine,), "uri_too_long"),
    ((http_errors.LimitRequestHeaders,), "headers_too_large"),
    ((http_errors.UnsupportedTransferCoding,), "unsupported_transfer_coding"),
    ((http_errors.ExpectationFailed,), "expectation_failed"),
    ((http_errors.ParseException,), "malformed_request"),
)


def answer(ex: ApiError, path: bytes, extra: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 error response in the envelope the request's path implies."""
    body = ex.body(envelope_for(path.decode("latin-1")))
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close",
               **ex.headers, **(extra or {})}
    reason = _REASONS.get(ex.status, "Error")
    head = f"HTTP/1.1 {ex.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


def request_path(buf: bytes | bytearray) -> bytes:
    """The path of the request line at the start of `buf` ("/" when there is none yet)."""
    parts = bytes(buf[:buf.find(b"\r\n") if b"\r\n" in buf else 256]).split(b" ")
    return parts[1] if len(parts) > 1 else b"/"


def parser_refusal(exc: BaseException) -> str | None:
    """The error-table code for an exception gunicorn's request parser raised (None: not a
    refusal of the request, an application failure)."""
    # The application's or the configuration's fault, not the request's (looked up by name:
    # older gunicorn releases lack some of these classes).
    app_faults = tuple(getattr(http_errors, name) for name in
                       ("InvalidResponseHeader", "InvalidResponseHeaderName", "ConfigurationProblem")
                       if hasattr(http_errors, name))
    if isinstance(exc, app_faults):
        return None
    for kinds, code in _PARSER_REFUSALS:
        if isinstance(exc, kinds):
            return code
    return None
