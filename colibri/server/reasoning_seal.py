"""The `encrypted_content` of a Responses reasoning item (rule resp.reasoning.encrypted_content).

This server returns reasoning in clear, so the envelope hides nothing: it carries the same
text in an opaque string, so a stateless client that sends back only the item's id, summary
and `encrypted_content` still gives the model its reasoning. The rule's pattern check
refuses a string of another form before `open_seal` sees it."""
from __future__ import annotations

import base64

PREFIX = "colibri.rs1."


def seal(text: str) -> str:
    return PREFIX + base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def open_seal(sealed: str) -> str:
    """The reasoning text of a sealed string (validated: the prefix and base64url letters).
    A length no base64 has, or bytes that are not UTF-8, come from a forged string: the
    readable part is kept rather than failing a turn over reasoning the client altered."""
    body = sealed[len(PREFIX):]
    body = body[: len(body) - (len(body) % 4 == 1)]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8", errors="replace")
