"""The engine's portable kernel path on aarch64 (issue 52, point 2): csrc/ cross-compiled with
aarch64-linux-gnu-gcc and run under QEMU user emulation (qemu-aarch64), through the flat C API
(tests/c/engine_logits.c: load, prefill, print the logits), on the same tiny models and against
the same references and bounds as the x86 tests:

- F32 and BF16 panels (safetensors, write_random_model): the float64 reference to TOL (1e-4), as
  tests/test_engine.py asks;
- block formats (GGUF, write_gguf; the forms tests/test_kernel_paths.py covers: Q8_0, Q5_0, Q4_0,
  Q4_1, Q3_K, Q6_K, Q8_0 fused with Q6_K): most positions equal the block-rounded reference and
  the logits stay within BLOCK_ERROR_BOUND / K_BLOCK_ERROR_BOUND of the dequantized weights'.
  aarch64's `char` is unsigned, so an int8 quant read through a plain `char` is the classic ARM
  bug; these formats are where it would show;
- aarch64 against this machine's own engine (the extension) with the kernel cap at portable: the
  same sums, see ARCH_BOUND.

What this does not test: a real ARM CPU (QEMU emulates the instructions, not an ARM core's
memory ordering or timing), speed on ARM, and NEON/dotprod kernels (none are written). The
aarch64 binary is built once per session from setup.py's own sources and flags, with
COLIBRI_MARCH=armv8-a; each run is a process, so each prefill starts from a fresh slot."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from llama_reference import ReferenceLlama, write_random_model

from colibri import _engine

TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64")
SYSROOT = Path("/usr/aarch64-linux-gnu")  # the cross toolchain's libc, for qemu -L
if not all(shutil.which(t) for t in TOOLS) or not SYSROOT.is_dir():
    pytest.skip("the aarch64 tests need a cross compiler and QEMU user emulation: "
                "apt-get install gcc-aarch64-linux-gnu qemu-user", allow_module_level=True)

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from test_engine import TOL, tokens  # noqa: E402
from test_gguf import (  # noqa: E402
    BLOCK_ERROR_BOUND,
    K_BLOCK_ERROR_BOUND,
    _tokens,
    assert_block_rounded,
    write_gguf,
    write_k_gguf,
)

from colibri.model import Model, ModelConfig, open_engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PORTABLE = int(_engine.KERNEL_PATHS["portable"])
# setup.py's COLIBRI_MARCH for the cross build: ARMv8-A, the baseline every aarch64 CPU runs (what a
# distribution would build).
AARCH64_MARCH = "armv8-a"

# aarch64 and native x86 run the same C source in float32 but not the same instructions: GCC
# fuses a*b+c into one FMA where -ffp-contract=fast lets it (everywhere on aarch64, whose base
# ARMv8 has FMA; on x86 where -march=native vectorises), and an `omp simd` reduction adds in
# vector-lane order (4 lanes on NEON, 16 on AVX-512; attention's vectors are as wide). So F32 and BF16 logits differ in float32
# rounding only: measured at most 1.5e-6 of the largest |logit| at any position (BF16; F32 1.1e-6),
# against this Xeon's AVX-512 build (16-float attention); an AVX2 host's 8-float attention was not
# measured against it.
# ARCH_BOUND is 3.4x that and, at these models' largest |logit| (10-15), below the reference's TOL.
# A block kernel first rounds its inputs to int8 steps, and an input a hair from a rounding
# boundary can round the other way on the other machine (as against the float64 reference:
# test_gguf.assert_block_rounded), moving that position's logits and every later one that attends
# to it. Measured over six seeds on each of the seven block models, about a third of the prompts
# agreed to 1e-6 of the largest |logit| at every position and the others by 0.08-1.0% relative
# RMS, each machine as close to the block-rounded reference as the other; over each model's
# prompts here, at most 0.39% (Q5_0). ARCH_BLOCK_BOUND is 2%, 5x that and well under the stated
# block error; an int8 quant read with the wrong sign is off by the size of the logits.
ARCH_BOUND = 5e-6
ARCH_BLOCK_BOUND = 0.02


def _setup_build(march: str) -> tuple[list[str], list[str], list[str]]:
    """setup.py's C sources, compile flags (its macros as -D) and link flags with COLIBRI_MARCH=march,
    read from its text: only the expressions that give them are evaluated, with MARCH = march."""
    found: dict[str, ast.expr] = {}
    for node in ast.walk(ast.parse((ROOT / "setup.py").read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KERNEL_PATHS" for t in node.targets):
            found["paths"] = node.value
        elif isinstance(node, ast.keyword) and node.arg in ("sources", "extra_compile_args", "extra_link_args",
                                                             "define_macros"):
            found[node.arg] = node.value
    assert len(found) == 5, f"setup.py no longer names its sources, kernel paths, flags and macros: {sorted(found)}"
    value = {k: eval(compile(ast.Expression(v), "setup.py", "eval"), {"MARCH": march}) for k, v in found.items()
             if k != "sources"}
    sources = eval(compile(ast.Expression(found["sources"]), "setup.py", "eval"), {"KERNEL_PATHS": value["paths"]})
    return ([src for src in sources if src.endswith(".c")],
            [*value["extra_compile_args"], *(f"-D{k}={v}" for k, v in value["define_macros"])],
            list(value["extra_link_args"]))


def _cc(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr}"


def _compile(job: tuple[str, list[str], Path, Path]) -> None:
    cc, flags, src, out = job
    _cc([cc, *flags, "-c", str(src), "-o", str(out)])


@pytest.fixture(scope="session")
def drivers(tmp_path_factory) -> dict[str, list[str]]:
    """The command that runs engine_logits cross-built for aarch64, under QEMU. Objects compile in
    parallel, a job per core of the 2-core CI machine. The native side of the comparisons is the
    Python extension itself with COLIBRI_ISA=portable (native_logits): the same engine, already
    built."""
    cc, sources, flags, link = ("aarch64-linux-gnu-gcc", *_setup_build(AARCH64_MARCH))
    out = tmp_path_factory.mktemp("aarch64")
    sources = [*sources, "tests/c/engine_logits.c"]
    objects = [out / (Path(s).stem + ".o") for s in sources]
    jobs = [(cc, [*flags, f"-I{ROOT / 'csrc'}"], ROOT / s, o) for s, o in zip(sources, objects, strict=True)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(_compile, jobs))
    exe = out / "engine_logits"
    _cc([cc, *map(str, objects), *link, "-o", str(exe)])
    return {"aarch64": ["qemu-aarch64", "-L", str(SYSROOT), str(exe)]}


def native_logits(weights: Path, cfg: ModelConfig, toks: list[int], monkeypatch) -> np.ndarray:
    """This machine's answer on the portable path: the extension, capped by COLIBRI_ISA."""
    monkeypatch.setenv("COLIBRI_ISA", "portable")
    eng = open_engine(weights, cfg, n_slots=1, n_threads=2)
    assert eng.kernels == "portable"
    return eng.prefill(0, toks, reuse=False, all_logits=True)[1]


class Driver:
    """One weights file run by one engine_logits binary with the kernel cap at portable; prefill()
    answers as Engine.prefill does, so test_gguf.assert_block_rounded takes it as an engine."""

    def __init__(self, command: list[str], weights: Path, cfg: ModelConfig, threads: int = 2):
        assert cfg.rope_inv_freq is None  # the driver passes NULL: plain rope_theta
        self.command, self.weights, self.vocab = command, weights, cfg.vocab_size
        self.seen: dict[tuple[int, ...], np.ndarray] = {}
        self.options = [f"dim={cfg.dim}", f"hidden_dim={cfg.hidden_dim}", f"n_layers={cfg.n_layers}",
                        f"n_heads={cfg.n_heads}", f"n_kv_heads={cfg.n_kv_heads}", f"vocab_size={cfg.vocab_size}",
                        f"n_ctx={cfg.n_ctx}", f"tie_embeddings={int(cfg.tie_embeddings)}",
                        f"rope_theta={np.float32(cfg.rope_theta)}", f"norm_eps={np.float32(cfg.norm_eps)}",
                        f"head_dim={cfg.head_dim}", f"kernels={PORTABLE}", f"threads={threads}"]

    def run(self, toks: list[int]) -> subprocess.CompletedProcess:
        return subprocess.run([*self.command, str(self.weights), *self.options, "--", *map(str, toks)],
                              capture_output=True, timeout=60)

    def prefill(self, slot: int, toks: list[int], reuse: bool = False, all_logits: bool = True):
        assert slot == 0 and not reuse and all_logits  # what the driver does
        if tuple(toks) not in self.seen:  # one run per prompt (QEMU is the slow part)
            done = self.run(toks)
            err = done.stderr.decode()
            assert done.returncode == 0, err
            assert err.startswith("kernels=portable "), err  # the cap was obeyed
            self.seen[tuple(toks)] = np.frombuffer(done.stdout, np.float32).reshape(len(toks), self.vocab)
        return 0, self.seen[tuple(toks)]


def _logits(driver: Driver, toks: list[int]) -> np.ndarray:
    return driver.prefill(0, toks)[1]


# F32 at the default shape and at one with a partial output panel (test_engine's shapes); BF16.
PANEL_MODELS = {
    "F32": dict(),
    "F32-partial-panel": dict(dim=36, heads=3, kv_heads=3, hidden=20, vocab=17),
    "BF16": dict(dtype="bfloat16"),
}


@pytest.mark.parametrize("name", sorted(PANEL_MODELS))
def test_panels_on_aarch64_equal_the_reference_and_the_native_portable_path(tmp_path, drivers, name, monkeypatch):
    kw = PANEL_MODELS[name]
    if kw.get("dtype") == "bfloat16":
        pytest.importorskip("ml_dtypes")
    d = write_random_model(tmp_path, seed=11, **kw)
    cfg = ModelConfig.from_hf(json.loads((d / "config.json").read_text()))
    arm = Driver(drivers["aarch64"], d / "model.safetensors", cfg)
    toks = tokens(24, seed=12, vocab=cfg.vocab_size)
    got = _logits(arm, toks)
    assert np.max(np.abs(got - ReferenceLlama(d).logits(toks))) < TOL
    want = native_logits(d / "model.safetensors", cfg, toks, monkeypatch)
    assert np.max(np.abs(got - want)) <= ARCH_BOUND * float(np.max(np.abs(want)))


# name: (write_gguf or write_k_gguf, type, mix), one per form the block kernels have (kernels.h):
# W_Q32 as bytes with a Q8_0 part, bytes below 64, nibbles with and without a min; W_Q16 as
# nibbles, bytes, and fused with a Q8_0 part.
BLOCK_MODELS = {
    "Q8_0": (write_gguf, Q.Q8_0, None), "Q5_0": (write_gguf, Q.Q5_0, None),
    "Q4_0": (write_gguf, Q.Q4_0, None), "Q4_1": (write_gguf, Q.Q4_1, None),
    "Q3_K": (write_k_gguf, Q.Q3_K, None), "Q6_K": (write_k_gguf, Q.Q6_K, None),
    "Q8_0+Q6_K": (write_k_gguf, Q.Q8_0, {"v_proj.weight": Q.Q6_K}),
}


@pytest.mark.parametrize("name", sorted(BLOCK_MODELS))
def test_blocks_on_aarch64_stay_within_the_block_error_and_match_the_native_portable_path(tmp_path, drivers, name,
                                                                                       monkeypatch):
    write, qtype, mix = BLOCK_MODELS[name]
    path, ref_dir = write(tmp_path, qtype, mix=mix)
    cfg = Model(path).config
    arm = Driver(drivers["aarch64"], path, cfg)
    ref = ReferenceLlama(ref_dir)
    wide = write is write_k_gguf  # the K types' wider model: its stated bound, test_kernel_paths' four seeds
    seeds = range(1, 5) if wide else range(1, 7)
    assert_block_rounded(arm, ref, seeds=seeds)
    toks = _tokens(5)
    got, want = _logits(arm, toks), ref.logits(toks)
    assert 0 < float(np.linalg.norm(got - want) / np.linalg.norm(want)) < (K_BLOCK_ERROR_BOUND if wide else BLOCK_ERROR_BOUND)
    prompts = [_tokens(s) for s in seeds]  # assert_block_rounded's: the aarch64 runs are done
    got = np.concatenate([_logits(arm, p) for p in prompts])
    native = np.concatenate([native_logits(path, cfg, p, monkeypatch) for p in prompts])
    assert float(np.linalg.norm(got - native) / np.linalg.norm(native)) < ARCH_BLOCK_BOUND


def test_aarch64_reports_its_only_path_and_failures_by_status(tmp_path, drivers):
    """Off x86 the widest path is portable, and an engine failure is its status, not a crash."""
    path, _ = write_gguf(tmp_path, Q.Q8_0)
    arm = Driver(drivers["aarch64"], path, Model(path).config)
    assert arm.run([1]).stderr.decode().startswith("kernels=portable available=portable threads=2")
    path.write_bytes(path.read_bytes()[:100])  # a truncated header
    done = arm.run([1])
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == "engine_logits: colibri_load returned status -2 (malformed or truncated weights file (safetensors or GGUF))\n"
