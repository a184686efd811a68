"""API errors, one class per row of spec/errors.yaml (generated 1:1 at import), the two
envelopes they serialise to, and which envelope a request path answers in (spec/endpoints.yaml's
`envelope` column)."""
from __future__ import annotations

import json
from typing import Any, ClassVar

from ..spec.model import error_codes
from ..spec.tables import table


class ApiError(Exception):
    """Base of every error the API answers with. Class attributes come from the error table."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    anthropic_type: ClassVar[str] = "api_error"
    code: ClassVar[str] = "engine_error"
    default_message: ClassVar[str] = "The engine failed to process the request."
    headers: ClassVar[dict[str, str]] = {}

    def __init__(self, message: str | None = None, *, param: str | None = None, rule_id: str | None = None):
        self.message = message or self.default_message.replace("'{param}'", repr(param or "")).replace(
            "{param}", str(param or ""))
        self.param = param
        self.rule_id = rule_id
        super().__init__(self.message)

    def to_openai(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def to_anthropic(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.anthropic_type, "message": self.message}}

    def body(self, envelope: str) -> bytes:
        doc = self.to_anthropic() if envelope == "anthropic" else self.to_openai()
        return json.dumps(doc, ensure_ascii=False).encode()


def _class_name(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_")) + "Error"


def _build() -> dict[str, type[ApiError]]:
    """One class per row of spec/errors.yaml (only that table is read: it is all this needs,
    and `colibri spec lint` has validated it; the spec loader reuses the parse)."""
    classes: dict[str, type[ApiError]] = {}
    for code, e in error_codes(table("errors.yaml")["errors"]).items():
        attrs = {"status": e.status, "type": e.type, "anthropic_type": e.anthropic_type, "code": code,
                 "default_message": e.message, "headers": dict(e.headers), "__doc__": e.description}
        classes[code] = type(_class_name(code), (ApiError,), attrs)
    return classes


ERRORS: dict[str, type[ApiError]] = _build()


def error(code: str, message: str | None = None, *, param: str | None = None, rule_id: str | None = None) -> ApiError:
    """An instance of the class for `code` (KeyError for a code the table lacks: a spec bug)."""
    return ERRORS[code](message, param=param, rule_id=rule_id)


#: Endpoint path prefixes (a path template up to its first "{"), longest first, and their envelope.
_ENVELOPES = sorted(((row["path"].split("{")[0], row["envelope"]) for row in table("endpoints.yaml")["endpoints"]),
                    key=lambda p: -len(p[0]))


def envelope_for(path: str) -> str:
    """The error envelope of a request path: that of the endpoint whose path is its longest
    prefix (so /v1/messages/anything answers as Anthropic's API would); OpenAI's for any other
    path and for endpoints with no envelope of their own (`none`: /metrics, the spec pages)."""
    for prefix, envelope in _ENVELOPES:
        if path.startswith(prefix):
            return "openai" if envelope == "none" else envelope
    return "openai"
