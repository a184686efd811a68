"""The embedded model served by the other engines with their own tool-call and reasoning parsers
(issue 48): one peer per engine and family, started with the flags a user of that engine would
pass for a model of that family.

The model files come from `colibri export` (a transformers folder per family, and a GGUF per
family for the llama.cpp servers), produced into the cache and rebuilt when the shipped model
changes. SmolLM2 (smollm2.py) has no tools in its template, so only these peers can give the
tool and reasoning rules a verdict on real parsers.

Each row says which parser it uses and why that parser fits the family's native syntax:
- glm (`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`, `<think>`):
  vLLM's `glm45` tool and reasoning parsers (GLM-4.5/4.6/4.7 write exactly that syntax);
- chatml (`<tool_call>{"name": N, "arguments": {...}}</tool_call>`, `<think>`): vLLM's `hermes`
  tool parser and `qwen3` reasoning parser (Qwen2.5/Qwen3's own pair);
- qwen-xml (`<tool_call><function=N><parameter=K>V</parameter></function></tool_call>`):
  vLLM's `qwen3_xml` tool parser (Qwen3-Coder's syntax) and `qwen3` reasoning parser.
llama.cpp's llama-server picks its parser from the GGUF's template (`--jinja`); its /slots
endpoint says which (`chat_format`), and the harness copies it into the run's meta file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from cachedir import CACHE, sh, step, venv_dir

MODEL_DIR = CACHE / "model"
ROOT = Path(__file__).resolve().parents[2]
TINY_SRC = ROOT / "colibri" / "models" / "tiny"
FAMILIES = ("glm", "chatml", "qwen-xml")

#: The rules the tiny peers run: every tool, tool_choice and reasoning rule and the Anthropic /
#: Responses shapes of calls and thinking (`--rule` prefixes of colibri-conform).
RULES = ["tools.", "tool_choice.", "chat.tool_calls", "chat.finish_reason.tool_calls", "chat.stream.tool_calls",
         "chat.tool_result", "chat.reasoning", "reasoning.", "msgs.tool_use", "msgs.tool_result",
         "msgs.thinking", "msgs.stream.stop_reason.tool_use", "resp.function_call", "resp.reasoning"]
#: The official contracts plus the tools and reasoning profiles, SHOULD rules included
#: (chat.finish_reason.tool_calls is one): judged by the official APIs' contracts.
CONFORM_ARGS = [a for p in ("openai", "anthropic", "responses", "tools", "reasoning") for a in ("--profile", p)] + [
    "--include-should", *[a for r in RULES for a in ("--rule", r)]]


def model_id(family: str) -> str:
    return f"colibri-tiny-{family}"


def fingerprint() -> str:
    """The shipped model and its templates, and the exporter: a change to any rebuilds the exports."""
    h = hashlib.sha256()
    for p in sorted(TINY_SRC.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    for p in sorted((ROOT / "colibri").glob("export*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def export_path(family: str, fmt: str) -> Path:
    """The folder `colibri export` wrote (hf: the transformers folder itself; gguf: the folder
    holding the one .gguf file)."""
    return MODEL_DIR / f"{model_id(family)}-{fmt}"


def gguf_file(family: str) -> Path:
    """The GGUF file inside the gguf export (named by the exporter: colibri-tiny-FAMILY-TYPE.gguf)."""
    found = sorted(export_path(family, "gguf").glob("*.gguf"))
    return found[0] if found else export_path(family, "gguf") / f"{model_id(family)}-f32.gguf"


def _stamp(out: Path) -> Path:
    return out.with_name(out.name + ".sha256")


def exported(family: str, fmt: str) -> bool:
    out, stamp = export_path(family, fmt), _stamp(export_path(family, fmt))
    return out.exists() and stamp.exists() and stamp.read_text() == fingerprint()


def ensure_export(family: str, fmt: str) -> Path:
    """`colibri export --family FAMILY --format FMT OUT` into the cache, unless an export of the
    same model is there. A user would run exactly this command."""
    out = export_path(family, fmt)
    if exported(family, fmt):
        return out
    with step(f"{out.name} (colibri export --family {family} --format {fmt})"):
        partial = out.with_name(out.name + ".part")
        shutil.rmtree(partial, ignore_errors=True)  # the exporter refuses a folder that holds anything
        sh([sys.executable, "-m", "colibri.cli", "export", "--family", family, "--format", fmt, partial],
           "model-install")
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
        _stamp(out).write_text(fingerprint())
    return out


# --- vLLM: the tool and reasoning parsers that fit each family ---

VLLM_PARSERS = {"glm": ("glm45", "glm45"), "chatml": ("hermes", "qwen3"), "qwen-xml": ("qwen3_xml", "qwen3")}


def vllm_argv(vllm_bin: str, family: str) -> Callable[[int], list[str]]:
    tool, reasoning = VLLM_PARSERS[family]
    return lambda port: [vllm_bin, "serve", str(export_path(family, "hf")), "--served-model-name", model_id(family),
                         "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
                         "--dtype", "float32", "--enable-auto-tool-choice", "--tool-call-parser", tool,
                         "--reasoning-parser", reasoning]


# --- llama.cpp: --jinja reads the template from the GGUF and picks its parser from it ---

def llama_server_argv(binary: Path, family: str) -> Callable[[int], list[str]]:
    return lambda port: [str(binary), "-m", str(gguf_file(family)), "--alias", model_id(family),
                         "-c", "2048", "-np", "1", "-t", "2", "--jinja", "--host", "127.0.0.1", "--port", str(port)]


def chat_format(base: str) -> str | None:
    """The chat format and reasoning format llama-server chose for the template, as its /slots
    endpoint shows them in the last task's parameters (it logs them only with --verbose);
    None where the server has no such endpoint or has run no chat task yet."""
    import httpx

    try:
        slots = httpx.get(base + "/slots", timeout=10).json()
        params = next(s["params"] for s in slots if isinstance(s, dict) and (s.get("params") or {}).get("chat_format"))
    except (httpx.HTTPError, ValueError, TypeError, KeyError, StopIteration):
        return None
    return f"{params['chat_format']} (reasoning format {params.get('reasoning_format', '?')})"


# --- llama-cpp-python: its one tool-calling handler for a template it does not know ---

def llama_cpp_python_argv(python: str, family: str) -> Callable[[int], list[str]]:
    # chatml-function-calling is the handler its docs name for tools with any chatml model; it
    # renders its own prompt (not the GGUF's template) and constrains the call with a grammar.
    return lambda port: [python, "-m", "llama_cpp.server", "--model", str(gguf_file(family)),
                         "--model_alias", model_id(family), "--n_ctx", "2048", "--chat_format",
                         "chatml-function-calling", "--host", "127.0.0.1", "--port", str(port)]


# --- transformers serve: parses with the tokenizer's response_template, no flag to choose one ---

def transformers_argv(bin_: str, run_dir: Path, family: str) -> Callable[[int], list[str]]:
    def argv(port: int) -> list[str]:
        # it names the model by the path it is given: a link named like the model id in its cwd
        link = run_dir / model_id(family)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.readlink() != export_path(family, "hf"):
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(export_path(family, "hf"), target_is_directory=True)
        return [bin_, "serve", "--host", "127.0.0.1", "--port", str(port), model_id(family)]
    return argv


# --- LiteLLM proxy in front of a real engine (the path many production setups take) ---

LITELLM_UPSTREAM_CONFIG = """\
model_list:
  - model_name: {model}
    litellm_params:
      # hosted_vllm/ is LiteLLM's provider for an OpenAI-compatible vLLM or llama.cpp server:
      # it passes tools, tool_choice and reasoning fields through and reads reasoning_content back
      model: hosted_vllm/{model}
      api_base: {upstream}/v1
      api_key: sk-unused
router_settings:
  num_retries: 0
general_settings:
  dangerously_permit_weak_or_unset_master_key: true
"""


def litellm_argv(bin_: str, configs: Path, family: str) -> Callable[..., list[str]]:
    def argv(port: int, upstream: str = "") -> list[str]:
        configs.mkdir(parents=True, exist_ok=True)
        config = configs / f"litellm-{model_id(family)}.yaml"
        config.write_text(LITELLM_UPSTREAM_CONFIG.format(model=model_id(family), upstream=upstream))
        return [bin_, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    return argv


def peers(base: dict[str, object], peer_cls: type, helpers: dict[str, object]) -> list[object]:
    """The tiny rows, built from the SmolLM2 rows of catalog.py (their install steps and versions)."""
    vllm, llama_server, lcp, transformers, litellm = (base[n] for n in (
        "vllm", "llama-server", "llama-cpp-python", "transformers", "litellm"))
    run_dir: Callable[[str], Path] = helpers["run_dir"]  # type: ignore[assignment]
    out: list[object] = []

    def row(engine: object, name: str, family: str, fmt: str, argv: Callable[..., list[str]],
            **more: object) -> object:
        installed = engine.installed  # type: ignore[attr-defined]
        return dataclasses.replace(
            engine, name=name, model=model_id(family), argv=argv,
            install=lambda: (engine.install(), ensure_export(family, fmt)),  # type: ignore[attr-defined]
            installed=lambda: installed() and exported(family, fmt),
            conform_args=CONFORM_ARGS, family=family, **more)

    for fam in FAMILIES:
        out.append(row(vllm, f"vllm-tiny-{fam}", fam, "hf", vllm_argv(str(venv_dir("vllm") / "bin" / "vllm"), fam),
                       parsers=f"--tool-call-parser {VLLM_PARSERS[fam][0]} --reasoning-parser {VLLM_PARSERS[fam][1]}"))
    for fam in FAMILIES:
        out.append(row(llama_server, f"llama-server-tiny-{fam}", fam, "gguf",
                       llama_server_argv(helpers["llama_server"], fam),  # type: ignore[arg-type]
                       parsers="--jinja (chat format detected from the template)"))
    out.append(row(lcp, "llama-cpp-python-tiny-chatml", "chatml", "gguf",
                   llama_cpp_python_argv(str(venv_dir("llama-cpp-python") / "bin" / "python"), "chatml"),
                   parsers="--chat_format chatml-function-calling"))
    out.append(row(transformers, "transformers-tiny-chatml", "chatml", "hf",
                   transformers_argv(str(venv_dir("transformers") / "bin" / "transformers"),
                                     run_dir("transformers-tiny-chatml"), "chatml"),
                   parsers="the tokenizer's response_template (none for model_type llama: no parsing)"))
    out.append(row(litellm, "litellm-tiny-chatml", "chatml", "gguf",
                   litellm_argv(str(venv_dir("litellm") / "bin" / "litellm"), CACHE / "configs", "chatml"),
                   upstream="llama-server-tiny-chatml",
                   parsers="hosted_vllm/ provider in front of llama-server-tiny-chatml (--jinja)"))
    return out


__all__ = ["CONFORM_ARGS", "FAMILIES", "chat_format", "ensure_export", "export_path", "model_id", "peers"]
