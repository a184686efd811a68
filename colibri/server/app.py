"""The Falcon app factory: middleware (host guard, CORS, origin guard, auth, request id), routes, and the
error handlers that turn every failure into the right envelope."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import uuid
from typing import Any

import falcon

from ..paths import data_dir
from ..spec.vectors import LONG_PROMPT_PLACEHOLDER, expand_model, request_for
from .anthropic_api import MessagesResource
from .errors import ApiError, envelope_for, error
from .openai_api import ChatResource, CompletionsResource, RenderResource
from .profile import arrived
from .responder import dumps
from .responses_api import ResponseResource, ResponsesResource
from .service import Service, Settings
from .systemone import SystemOneResource
from .task import ClientGone

log = logging.getLogger("colibri.server")
LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}
CORS_ALLOW_HEADERS = "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta"
CORS_EXPOSE_HEADERS = "x-request-id, x-colibri-queue-wait-ms, Retry-After"


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _header_bytes(value: str) -> bytes:
    """A header value as the bytes the client sent: WSGI servers hand headers over decoded as
    ISO-8859-1 (PEP 3333), so a UTF-8 key arrives as one character per byte."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # not from a WSGI server (a test client passing text as it is)
        return value.encode("utf-8", "surrogateescape")


class RequestId:
    def process_request(self, req: Any, resp: Any) -> None:
        req.context.request_id = f"req_{uuid.uuid4().hex}"
        req.context.turn = arrived(req.context.request_id, req.path)  # its profile, if it reaches the engine

    def process_response(self, req: Any, resp: Any, resource: Any, ok: bool) -> None:
        resp.set_header("x-request-id", req.context.request_id)


class HostGuard:
    """DNS-rebinding defence: the Host must be loopback, the bind address or allow-listed."""

    def __init__(self, settings: Settings):
        self.allowed = LOOPBACK | {settings.host.lower()} | {h.strip().lower() for h in settings.allowed_hosts}

    def process_request(self, req: Any, resp: Any) -> None:
        if "*" in self.allowed:
            return
        host = _host_name(req.get_header("Host") or "")
        if host not in self.allowed:
            raise error("forbidden_host", f"The Host header {host!r} is not allowed; start the server with "
                                          f"--allowed-host {host} if you trust it.")


#: The dashboard's Content-Security-Policy (rule ops.dashboard.csp): its own scripts and styles only;
#: connections to itself and to servers on this machine (the Spec page's "try it" and the Reports
#: page may address another local server); no inline script, no plugin, no framing, no <base> rewrite.
DASHBOARD_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self' http://127.0.0.1:* http://localhost:*; "
                 "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


class DashboardHeaders:
    def process_response(self, req: Any, resp: Any, resource: Any, ok: bool) -> None:
        if req.path == "/" or req.path == "/ui" or req.path.startswith("/ui/"):
            resp.set_header("Content-Security-Policy", DASHBOARD_CSP)
            resp.set_header("X-Content-Type-Options", "nosniff")
        elif req.path in ("/spec", "/spec.json"):
            if resp.get_header("Content-Security-Policy") is None:  # the page names its stylesheet's hash
                resp.set_header("Content-Security-Policy", SpecPage.csp)
            resp.set_header("X-Content-Type-Options", "nosniff")


class Cors:
    def __init__(self, settings: Settings):
        self.origins = set(settings.cors_origins)

    def process_request(self, req: Any, resp: Any) -> None:
        if req.method == "OPTIONS":
            resp.status = falcon.HTTP_204
            resp.complete = True

    def process_response(self, req: Any, resp: Any, resource: Any, ok: bool) -> None:
        origin = req.get_header("Origin")
        if not origin or req.path in ("/metrics", "/profile") or not ("*" in self.origins or origin in self.origins):
            return
        resp.set_header("Access-Control-Allow-Origin", "*" if "*" in self.origins else origin)
        if "*" not in self.origins:
            resp.append_header("Vary", "Origin")
        resp.set_header("Access-Control-Expose-Headers", CORS_EXPOSE_HEADERS)
        if req.method == "OPTIONS":
            resp.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
            resp.set_header("Access-Control-Allow-Headers", CORS_ALLOW_HEADERS)
            resp.set_header("Access-Control-Max-Age", "600")


class OriginGuard:
    """Cross-site request forgery defence (rule ops.origin.cross-site-refused).

    A web page may POST to a loopback server without asking first (a "simple" request:
    form or text/plain body), and this server parses JSON whatever the label says. Browsers
    always name the page's origin on such a POST, programs (curl, SDKs) send none; so a POST
    whose Origin is neither this server's own nor an allowed CORS origin is refused before
    its body is read."""

    SAFE = {"GET", "HEAD", "OPTIONS"}

    def __init__(self, settings: Settings):
        self.origins = set(settings.cors_origins)

    def process_request(self, req: Any, resp: Any) -> None:
        origin = req.get_header("Origin")
        if origin is None or req.method in self.SAFE or "*" in self.origins or origin in self.origins:
            return
        host = (req.get_header("Host") or "").lower()
        if host and origin.lower() in (f"http://{host}", f"https://{host}"):
            return  # the server's own pages (the chat page, the dashboard)
        raise error("origin_not_allowed", f"Requests from the web origin {origin!r} are not allowed; start the "
                                          f"server with --cors-origin {origin} if you trust that page.")


class Auth:
    """Bearer or x-api-key, compared in constant time. /health answers everyone (less detail)."""

    OPEN = {"/", "/health", "/openapi.json", "/spec"}

    def __init__(self, settings: Settings):
        self.key = settings.api_key
        # A key given on the command line or in COLI_API_KEY is compared as the bytes a client
        # sends for it (UTF-8; surrogateescape keeps an environment's undecodable bytes as they were).
        self.key_bytes = (self.key or "").encode("utf-8", "surrogateescape")

    def authorised(self, req: Any) -> bool:
        if not self.key:
            return True
        bearer = req.get_header("Authorization") or ""
        given = bearer[7:] if bearer.startswith("Bearer ") else (req.get_header("x-api-key") or "")
        return hmac.compare_digest(_header_bytes(given), self.key_bytes)

    def process_request(self, req: Any, resp: Any) -> None:
        req.context.authed = self.authorised(req)
        # The dashboard's static files are public (they hold no data); falcon hands "/ui/" over as
        # "/ui", so both spellings of its folder are open, as every file under it is.
        if req.method != "OPTIONS" and not req.context.authed and req.path not in self.OPEN \
                and req.path != "/ui" and not req.path.startswith("/ui/"):
            raise error("invalid_api_key")


def _send(req: Any, resp: Any, ex: ApiError) -> None:
    resp.status = falcon.code_to_http_status(ex.status)
    resp.content_type = "application/json"
    resp.data = ex.body(envelope_for(req.path))
    resp.stream = None
    for k, v in ex.headers.items():
        resp.set_header(k, v)


def handle_api_error(req: Any, resp: Any, ex: ApiError, params: Any) -> None:
    _send(req, resp, ex)


def handle_http_error(req: Any, resp: Any, ex: falcon.HTTPError, params: Any) -> None:
    if ex.status_code == 405:
        _send(req, resp, error("method_not_allowed"))
        allow = dict(ex.headers or {}).get("Allow")
        if allow:
            resp.set_header("Allow", allow)
    elif ex.status_code == 404:
        _send(req, resp, error("not_found"))
    elif ex.status_code == 416:  # a Range beyond a static file's end (rule ops.static.no-traversal)
        _send(req, resp, error("range_not_satisfiable"))
        for k, v in dict(ex.headers or {}).items():
            resp.set_header(k, v)
    else:
        _send(req, resp, error("invalid_json" if ex.status_code == 400 else "engine_error"))


def handle_client_gone(req: Any, resp: Any, ex: ClientGone, params: Any) -> None:
    """Nobody is left to read an answer; the work was cancelled and counted as such."""
    log.info("client went away: %s %s (%s)", req.method, req.path, getattr(req.context, "request_id", "-"))
    resp.status = falcon.HTTP_400
    resp.data = b""


def handle_unexpected(req: Any, resp: Any, ex: Exception, params: Any) -> None:
    log.exception("unexpected failure in %s %s (%s)", req.method, req.path, getattr(req.context, "request_id", "-"))
    _send(req, resp, error("engine_error"))


class Models:
    def __init__(self, svc: Service):
        self.svc = svc

    def entry(self) -> dict[str, Any]:
        return {"id": self.svc.settings.model_id, "object": "model", "created": self.svc.started, "owned_by": "colibri",
                "family": self.svc.settings.family, "context_length": self.svc.model.config.n_ctx}

    def on_get(self, req: Any, resp: Any) -> None:
        resp.data = dumps({"object": "list", "data": [self.entry()]})

    def on_get_one(self, req: Any, resp: Any, model: str) -> None:
        if model != self.svc.settings.model_id:
            raise error("model_not_found", f"The model '{model}' does not exist.", param="model")
        resp.data = dumps(self.entry())


class Health:
    def __init__(self, svc: Service):
        self.svc = svc

    def on_get(self, req: Any, resp: Any) -> None:
        failed = self.svc.scheduler.failed
        doc: dict[str, Any] = {"status": "failed", "engine": "failed"} if failed else {"status": "ok", "engine": "ok"}
        if failed:
            resp.status = 503  # ops.engine.supervised: a load balancer must stop sending work here
        if req.context.authed:
            fam = self.svc.family
            doc.update({"family": self.svc.settings.family, "kv_slots": self.svc.settings.kv_slots,
                        "continue_assistant": self.svc.settings.continue_assistant and bool(fam["continuation"]),
                        "capabilities": {k: fam[k] for k in ("tools", "tool_format", "forced_tool_choice",
                                                             "reasoning", "continuation", "logprobs")},
                        "systemone": {**self.svc.systemone_labels.report(),
                                      "prompt": self.svc.settings.systemone_prompt},
                        "scheduler": self.svc.scheduler.snapshot()})
        resp.data = dumps(doc)


class Metrics:
    def __init__(self, svc: Service):
        self.svc = svc

    def on_get(self, req: Any, resp: Any) -> None:
        from prometheus_client import generate_latest

        resp.data = generate_latest(self.svc.metrics.registry)
        resp.content_type = "text/plain; version=0.0.4; charset=utf-8"
        resp.set_header("Cache-Control", "no-store")


class Profile:
    """/profile: the last finished turns' phase times (rule ops.profile.ring), behind the same key
    as /metrics and, like it, without CORS headers."""

    def __init__(self, svc: Service):
        self.svc = svc

    def on_get(self, req: Any, resp: Any) -> None:
        resp.data = dumps(self.svc.scheduler.profiles.doc())
        resp.content_type = "application/json"
        resp.set_header("Cache-Control", "no-store")


class OpenAPI:
    def on_get(self, req: Any, resp: Any) -> None:
        resp.data = (data_dir("schemas") / "openapi.json").read_bytes()


class Home:
    """/ goes to the dashboard (its query, such as ?q=…, goes along)."""

    def on_get(self, req: Any, resp: Any) -> None:
        raise falcon.HTTPFound("/ui/index.html" + (f"?{req.query_string}" if req.query_string else ""))


class SpecPage:
    """The rendered spec, built on first request from the spec the server runs on.

    Its Content-Security-Policy (rule ops.dashboard.csp) allows nothing but the page's one
    inline stylesheet, named by its hash: no script, no framing, no form, no <base>."""

    csp = "default-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

    def __init__(self, svc: Service):
        self.svc = svc
        self.page: bytes | None = None

    def on_get(self, req: Any, resp: Any) -> None:
        if self.page is None:
            from ..spec.docs import render_html

            self.page = render_html(self.svc.spec).encode()
        resp.data = self.page
        resp.content_type = "text/html; charset=utf-8"
        resp.set_header("Content-Security-Policy", self._csp(self.page))

    @classmethod
    def _csp(cls, page: bytes) -> str:
        styles = re.findall(rb"<style>(.*?)</style>", page, re.S)
        hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(css).digest()).decode()}'" for css in styles)
        return f"{cls.csp}; style-src {hashes}" if hashes else cls.csp


class SpecJson:
    """/spec.json: the rule tables this server runs on, each vector with its whole request (the
    endpoint's minimal request merged with the vector's, the served model filled in), for the
    dashboard's Spec page. A vector a browser cannot send and judge by itself (server
    settings, a raw or placeholder body, a named check) says why in `not_here`."""

    def __init__(self, svc: Service):
        self.svc = svc
        self.doc: bytes | None = None

    def _vector(self, v: Any) -> dict[str, Any]:
        spec, model = self.svc.spec, self.svc.settings.model_id
        body = request_for(spec, v, model)
        why = ("needs server settings " + ", ".join(sorted(v.server)) if v.server
               else "sends a raw body" if v.raw_body is not None
               else "needs a placeholder the suite expands" if LONG_PROMPT_PLACEHOLDER in json.dumps(body)
               else "judged by named checks: " + ", ".join(v.expect["checks"]) if v.expect.get("checks")
               else "judged by JSON paths the suite reads" if v.expect.get("json") or v.expect.get("absent")
               else None)
        return {"name": v.name, "method": v.method, "path": expand_model(v.path or spec.endpoints[v.endpoint].path, model),
                "headers": v.headers, "request": body, "expect": v.expect, "contract": v.contract,
                "generated": v.generated, "not_here": why}

    def on_get(self, req: Any, resp: Any) -> None:
        if self.doc is None:
            spec = self.svc.spec
            rules = [{"id": r.id, "title": r.title, "level": r.level, "profiles": r.profiles, "topic": r.topic,
                      "kind": r.kind, "endpoints": r.endpoints, "body": r.body, "source": r.source,
                      "checks": r.checks, "vectors": [self._vector(v) for v in r.vectors]} for r in spec.rules]
            self.doc = json.dumps({"model": self.svc.settings.model_id, "rules": rules}, ensure_ascii=False).encode()
        resp.data = self.doc
        resp.content_type = "application/json"


def create_app(service: Service) -> falcon.App:
    """The WSGI app over an already built Service (tests pass one with fakes injected)."""
    s = service.settings
    middleware: list[Any] = [RequestId(), HostGuard(s), Cors(s), OriginGuard(s), Auth(s), DashboardHeaders()]
    app = falcon.App(middleware=middleware, media_type="application/json")
    app.req_options.strip_url_path_trailing_slash = True
    models = Models(service)
    app.add_route("/v1/models", models)
    app.add_route("/v1/models/{model}", models, suffix="one")
    app.add_route("/v1/chat/completions", ChatResource(service))
    app.add_route("/v1/completions", CompletionsResource(service))
    app.add_route("/v1/messages", MessagesResource(service))
    app.add_route("/v1/render", RenderResource(service))
    app.add_route("/v1/systemone", SystemOneResource(service))
    app.add_route("/v1/responses", ResponsesResource(service))
    app.add_route("/v1/responses/{response_id}", ResponseResource(service))
    app.add_route("/health", Health(service))
    app.add_route("/metrics", Metrics(service))
    app.add_route("/profile", Profile(service))
    app.add_route("/openapi.json", OpenAPI())
    app.add_route("/spec", SpecPage(service))
    app.add_route("/spec.json", SpecJson(service))
    web = data_dir("web")
    if web.is_dir():  # the dashboard: static files, no build step; falcon refuses traversal
        app.add_route("/", Home())
        app.add_static_route("/ui", str(web.resolve()), fallback_filename="index.html")
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(falcon.HTTPError, handle_http_error)
    app.add_error_handler(ApiError, handle_api_error)
    app.add_error_handler(ClientGone, handle_client_gone)
    return app


def build_app(settings: Settings | None = None, **kw: Any) -> falcon.App:
    return create_app(Service(settings or Settings(), **kw))


__all__ = ["build_app", "create_app"]
