"""What `colibri serve` checks before it starts gunicorn, so a mistake is one line that says
what is wrong and what to do (exit 2) rather than a traceback from deep in a loader or five
seconds of gunicorn retrying a busy port."""
from __future__ import annotations

import difflib
import errno
import json
import socket
import struct
from pathlib import Path
from typing import Any

from .paths import NAMED_MODELS, ModelNotFound, resolve_model

#: What a model directory must hold for `Model` to load it.
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
WHAT_MODEL_TAKES = ("--model takes a Llama-family model folder (config.json, model.safetensors, tokenizer.json: "
                    "a Hugging Face download), a llama .gguf file, or a name: " + ", ".join(NAMED_MODELS))


class UsageError(Exception):
    """A setting `colibri serve` cannot start with; the message is the one line the user reads."""


def port_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be bound now, or None. gunicorn would retry a busy port five
    times a second apart and end with "Can't connect"; this says why at once."""
    if not 1 <= port <= 65535:
        return f"--port must be 1..65535, not {port}"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # gunicorn binds with SO_REUSEADDR too: a port whose old connections sit in TIME_WAIT is free to it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return (f"port {port} on {host} is already in use (another server, perhaps another colibri serve); "
                        "stop it, or choose a free port with --port")
            if e.errno == errno.EACCES:
                return f"no permission to bind port {port} (ports below 1024 need root); choose another with --port"
            if e.errno == errno.EADDRNOTAVAIL:
                return f"cannot bind {host}: no such address on this machine; choose another with --host"
            return f"cannot bind {host}:{port}: {e.strerror or e}; check --host and --port"
    return None


def model_path(value: str) -> Path:
    """The --model value as a path that exists, or a UsageError saying what to give instead."""
    try:
        path = resolve_model(value)
    except ModelNotFound as e:
        raise UsageError(str(e)) from None
    if path.exists():
        return path
    close = difflib.get_close_matches(value, list(NAMED_MODELS), n=1, cutoff=0.6)
    if close:
        raise UsageError(f"--model {value}: no such file or folder; did you mean --model {close[0]}?")
    raise UsageError(f"--model {value}: no such file or folder. {WHAT_MODEL_TAKES}")


def model_files_problem(path: Path) -> str | None:
    """What keeps `path` from being a loadable model, found without loading it, or None."""
    if path.is_file():
        with path.open("rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            return f"--model {path}: not a GGUF file (it does not start with GGUF). {WHAT_MODEL_TAKES}"
        return None
    if not any(path.iterdir()):
        return f"--model {path}: the folder is empty. {WHAT_MODEL_TAKES}"
    missing = [name for name in MODEL_FILES if not (path / name).is_file()]
    ggufs = sorted(path.glob("*.gguf"))
    if missing and ggufs:
        return f"--model {path}: a folder of GGUF files; name the file: --model {ggufs[0]}"
    if missing:
        sharded = sorted(p.name for p in path.glob("model-*-of-*.safetensors"))
        why = (" (the weights are split into shards; merge them into one model.safetensors)"
               if sharded and "model.safetensors" in missing else
               " (a partial download? fetch the missing files)")
        return f"--model {path}: the folder lacks {', '.join(missing)}{why}"
    return _safetensors_problem(path / "model.safetensors")


def _safetensors_problem(file: Path) -> str | None:
    """A truncated or foreign model.safetensors, judged from its header: the engine would
    otherwise fail inside the server's worker process, after gunicorn started."""
    size = file.stat().st_size
    try:
        with file.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size:
                raise ValueError("header length beyond the file")
            header: Any = json.loads(f.read(n))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (struct.error, ValueError, KeyError, TypeError, IndexError):
        return f"--model {file}: not a safetensors file (its header does not parse); download it again"
    if 8 + n + end > size:
        return (f"--model {file}: truncated ({size} bytes of the {8 + n + end} its header describes); "
                "the download did not finish: fetch it again")
    return None


def open_model(value: str | None, n_ctx: int | None) -> Any:
    """The Model for --model (None: the embedded one), or a UsageError with one line."""
    from .engine_errors import EngineError
    from .model import Model

    if value is None:
        return Model(None, n_ctx=n_ctx)
    path = model_path(value)
    problem = model_files_problem(path)
    if problem:
        raise UsageError(problem)
    try:
        return Model(path, n_ctx=n_ctx)
    except (EngineError, ValueError, OSError) as e:  # json's errors are ValueErrors
        raise UsageError(f"--model {path}: cannot be served: {e}") from None
    except Exception as e:  # the tokenizers library raises its own, untyped, on a bad tokenizer.json
        raise UsageError(f"--model {path}: cannot be served: {type(e).__name__}: {e}") from None


def template_problem(model: Any, family_template: str | None) -> str | None:
    """A model without any chat template cannot render a conversation: say so before start-up."""
    from .engine_errors import WeightsIOError

    try:
        model.template(family_template)
    except WeightsIOError:
        return (f"--model {model.path}: carries no chat template (chat_template.jinja, or chat_template in "
                "tokenizer_config.json); add the one the model was trained with")
    return None
