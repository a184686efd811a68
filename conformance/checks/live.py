"""Checks that need a live server process (sockets, restarts) or a model of their own: a rule
run, in or out of process, skips them and says where each is checked instead."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .core import CheckContext, NotApplicable

#: Checks that need a live server process (sockets, restarts) or a model of their own, run by
#: the tests named in their descriptions.
LIVE_ONLY = frozenset({"bound_to_loopback", "disconnect_cancels", "slow_client_dropped",
                       "prefix_reused_after_restart", "tool_parser_vectors", "full_pool_refused_at_once",
                       "connection_cap_refused", "idle_connection_kept", "differential_agreement",
                       "template_refusal_named", "loop_not_stalled", "chunked_body_bounded",
                       "request_buffer_bounded", "connection_cap_at_accept", "refused_without_drain",
                       "parser_errors_enveloped", "load_run"})


#: Why each of them cannot run in a rule run, in or out of process: what it needs beyond
#: requests to a running server, and where it is checked instead.
LIVE_ONLY_WHY = {
    "bound_to_loopback": "needs to start the server itself to see the address it binds (tests/test_live_server.py)",
    "disconnect_cancels": "needs to drop a connection mid-answer and read colibri's own slot counters "
                          "(tests/test_disconnect.py)",
    "slow_client_dropped": "needs a server started with a short read deadline (tests/test_admission.py)",
    "prefix_reused_after_restart": "needs to restart the server (tests/test_kv_store.py)",
    "tool_parser_vectors": "feeds the server's tool-call parsers directly, not over HTTP (tests/test_tool_parsers.py)",
    "full_pool_refused_at_once": "needs a server started with one slot, no queue and one thread (tests/test_admission.py)",
    "connection_cap_refused": "needs a server started with a small --max-client-connections (tests/test_admission.py)",
    "idle_connection_kept": "needs a server started with a short --idle-timeout (tests/test_admission.py)",
    "differential_agreement": "runs in `colibri-conform differential`, which compares servers on one model",
    "load_run": "runs in `colibri-conform load`, which judges every answer of many clients at once",
    "template_refusal_named": "needs a model whose own template refuses some messages (tests/test_chat_template.py)",
    "loop_not_stalled": "needs raw sockets that stall mid-request (tests/test_hostile_clients.py)",
    "chunked_body_bounded": "streams a chunked body past 4 MiB over a raw socket (tests/test_hostile_clients.py)",
    "request_buffer_bounded": "holds many partial bodies open from one address (tests/test_hostile_clients.py)",
    "connection_cap_at_accept": "opens 1,000 idle connections from one address (tests/test_hostile_clients.py)",
    "refused_without_drain": "announces an oversized body over a raw socket (tests/test_hostile_clients.py)",
    "parser_errors_enveloped": "sends malformed HTTP that an HTTP client library will not send "
                               "(tests/test_hostile_clients.py)",
}


def live_only_reason(names: Any) -> str:
    """The skip reason of a vector using these LIVE_ONLY checks."""
    return "; ".join(f"{n} {LIVE_ONLY_WHY.get(n, 'is checked by a test of its own (see spec/checks.yaml)')}"
                     for n in sorted(names))


def _live_only(name: str) -> Callable[[CheckContext], None]:
    def check(ctx: CheckContext) -> None:
        raise NotApplicable(live_only_reason([name]))
    check.__name__ = check.__qualname__ = name
    return check


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = tuple(_live_only(name) for name in sorted(LIVE_ONLY))
