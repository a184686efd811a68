"""The differential run over the peers that load the same model (issue 18).

    PYTHONPATH=. python bench/peers/differential.py [--only NAME ...] [--out reports/differential]

Two groups, each with its reference: colibri in-process (`inprocess:`, weights as stored, F32
arithmetic; its logits are checked against a float64 NumPy model in tests/)
- on SmolLM2-135M-Instruct's float32 folder, for every peer that loads SmolLM2;
- on the embedded model as a plain folder with its ChatML template (colibri-tiny-chatml, built
  into the peers cache from the package), because SmolLM2's template has no tools: the tool
  prompts need a template that renders them. vLLM reads its calls with the hermes parser.
Each target is started in turn on a free port, compared with `colibri-conform differential`
logic, and stopped by its own process group. The tolerance follows what the target computes
with: `exact` for float32 weights and arithmetic, `rounded` for quantized GGUF files and bfloat16.
Writes NAME.json and NAME.md per target and summary.json into --out (docs/compat/differential:
the matrix's numerics column); then regenerate the matrix (`bench/peers/run.py --compat`, or
`colibri-conform compat REPORTS --out docs/compat`).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachedir import say, sh, step, venv_dir  # noqa: E402
from catalog import (  # noqa: E402
    ALIAS,
    COLIBRI_SMOLLM2,
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER,
    LLAMA_SERVER_PEER,
    TRANSFORMERS,
    VLLM,
    Peer,
    colibri_argv,
    working_dir,
)
from run import ensure_installed, serving  # noqa: E402
from server_process import stop  # noqa: E402
from smollm2 import HF_DIR, MODEL_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from conformance.differential import _reference_target, markdown, run, templates  # noqa: E402
from conformance.exchange import HttpTarget  # noqa: E402

COLIBRI_DIR = dataclasses.replace(
    COLIBRI_SMOLLM2, name="colibri-f32-dir",
    argv=colibri_argv(HF_DIR, ALIAS),
    installed=lambda: (HF_DIR / "model.safetensors").exists())


def _vllm_bf16_argv(port: int) -> list[str]:
    argv = VLLM.argv(port)
    return argv[:argv.index("--dtype")] + ["--dtype", "bfloat16"]


VLLM_BF16 = dataclasses.replace(VLLM, name="vllm-bf16", argv=_vllm_bf16_argv)

TINY_DIR = MODEL_DIR / "colibri-tiny-chatml"
TINY_GGUF = MODEL_DIR / "colibri-tiny-chatml.F32.gguf"
TINY_ID = "colibri-tiny-chatml"


TINY_SRC = ROOT / "colibri" / "models" / "tiny"


def tiny_fingerprint() -> str:
    """The shipped embedded model's identity: a retrained model makes the cached copies stale."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.chatml.jinja"):
        h.update((TINY_SRC / name).read_bytes())
    return h.hexdigest()


def ensure_tiny_dir() -> Path:
    """The embedded model as a folder other servers load: its weights, config and tokenizer as
    shipped, the ChatML template as chat_template.jinja (tools as JSON in <tool_call> tags), a
    tokenizer_config naming the fast tokenizer and <|im_end|>, and the two end ids. Rebuilt when
    the shipped model changed (its fingerprint is kept beside it)."""
    stamp = TINY_DIR / "colibri-source.sha256"
    if (TINY_DIR / "chat_template.jinja").exists() and stamp.exists() and stamp.read_text() == tiny_fingerprint():
        return TINY_DIR
    src = TINY_SRC
    with step(f"model folder {TINY_DIR.name} (the embedded model, ChatML template)"):
        partial = TINY_DIR.with_name(TINY_DIR.name + ".part")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            shutil.copyfile(src / name, partial / name)
        shutil.copyfile(src / "chat_template.chatml.jinja", partial / "chat_template.jinja")
        (partial / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|pad|>",
            "model_max_length": 2048, "clean_up_tokenization_spaces": False}))
        (partial / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 1]}))
        (partial / "colibri-source.sha256").write_text(tiny_fingerprint())
        shutil.rmtree(TINY_DIR, ignore_errors=True)
        partial.rename(TINY_DIR)
    return TINY_DIR


def ensure_tiny_gguf() -> Path:
    """That folder as an F32 GGUF for llama.cpp (hf_to_gguf.py, in the transformers venv: gguf),
    rebuilt when the shipped model changed."""
    stamp = TINY_GGUF.with_name(TINY_GGUF.name + ".sha256")
    if TINY_GGUF.exists() and stamp.exists() and stamp.read_text() == tiny_fingerprint():
        return TINY_GGUF
    with step(f"model file {TINY_GGUF.name} (the embedded model as F32 GGUF)"):
        partial = TINY_GGUF.with_suffix(".part")
        sh([venv_dir("transformers") / "bin" / "python", Path(__file__).with_name("hf_to_gguf.py"), ensure_tiny_dir(),
            partial], "model-install")
        partial.rename(TINY_GGUF)
        stamp.write_text(tiny_fingerprint())
    return TINY_GGUF


COLIBRI_TINY = dataclasses.replace(
    COLIBRI_DIR, name="colibri-tiny-chatml", model=TINY_ID, installed=lambda: TINY_DIR.exists(),
    argv=colibri_argv(TINY_DIR, TINY_ID))
VLLM_TINY = dataclasses.replace(
    VLLM, name="vllm-tiny-chatml", model=TINY_ID, installed=lambda: VLLM.installed() and TINY_DIR.exists(),
    argv=lambda port: [VLLM.argv(port)[0], "serve", str(TINY_DIR), "--served-model-name", TINY_ID,
                       "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "float32",
                       "--enable-auto-tool-choice", "--tool-call-parser", "hermes"])

# llama.cpp keeps its KV cache in F16 whatever the weights: rounded arithmetic, hence `rounded`.
LLAMA_SERVER_TINY = dataclasses.replace(
    LLAMA_SERVER_PEER, name="llama-server-tiny-chatml", model=TINY_ID,
    installed=lambda: LLAMA_SERVER_PEER.installed() and TINY_GGUF.exists(),
    argv=lambda port: [str(LLAMA_SERVER), "-m", str(TINY_GGUF), "--alias", TINY_ID, "-c", "2048", "-np", "1", "-t", "2",
                       "--jinja", "--host", "127.0.0.1", "--port", str(port)])


def _transformers_tiny_argv(port: int) -> list[str]:
    # transformers serve names the model by the path it is given: a link named like the model id
    # in its working folder (as for SmolLM2 in catalog.py)
    link = working_dir(TRANSFORMERS_TINY) / TINY_ID
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(TINY_DIR, target_is_directory=True)
    return [*TRANSFORMERS.argv(port)[:-1], TINY_ID]


TRANSFORMERS_TINY = dataclasses.replace(
    TRANSFORMERS, name="transformers-tiny-chatml", model=TINY_ID, argv=_transformers_tiny_argv,
    installed=lambda: TRANSFORMERS.installed() and TINY_DIR.exists())

#: reference model folder -> [(target, tolerance: what it computes with)]
GROUPS: dict[Path, list[tuple[Peer, str]]] = {
    HF_DIR: [(COLIBRI_DIR, "exact"), (TRANSFORMERS, "exact"), (VLLM, "exact"), (COLIBRI_SMOLLM2, "rounded"),
             (LLAMA_SERVER_PEER, "rounded"), (LLAMA_CPP_PYTHON, "rounded"), (VLLM_BF16, "rounded")],
    TINY_DIR: [(COLIBRI_TINY, "exact"), (TRANSFORMERS_TINY, "exact"), (VLLM_TINY, "exact"),
               (LLAMA_SERVER_TINY, "rounded")],
}
TARGETS = [t for group in GROUPS.values() for t in group]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=[p.name for p, _ in TARGETS], help="these targets only")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "compat" / "differential",
                    help="report folder (default: docs/compat/differential, where the matrix's numerics column reads)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    references: dict[Path, tuple[object, str]] = {}
    for folder, peer, tolerance in [(f, p, t) for f, group in GROUPS.items() for p, t in group]:
        if args.only and peer.name not in args.only:
            continue
        if folder == TINY_DIR:
            ensure_tiny_dir()
            if peer is LLAMA_SERVER_TINY:
                ensure_tiny_gguf()
        if folder not in references:
            references[folder] = _reference_target(f"inprocess:{folder}", {})
        reference, ref_model = references[folder]
        ensure_installed(peer)
        proc, base, _ = serving(peer)
        try:
            target = HttpTarget(base, {}, timeout=300)
            report = run(reference, ref_model, [(peer.name, target, peer.model)], tolerance)
            template_report = templates(reference, ref_model, [(peer.name, target, peer.model)])
        finally:
            stop(proc)
            say(f"{peer.name}: stopped")
        report["reference"] = f"colibri in-process on {folder.name} (float32)"
        (args.out / f"{peer.name}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        (args.out / f"{peer.name}.md").write_text(markdown(report) + "\n" + markdown(template_report))
        (args.out / f"{peer.name}.templates.json").write_text(json.dumps(template_report, indent=1,
                                                                          ensure_ascii=False) + "\n")
        t, tt = report["targets"][peer.name], template_report["targets"][peer.name]
        summary[peer.name] = {"tolerance": tolerance, "verdict": t["verdict"], "counts": t["counts"],
                              "logprobs": t["logprobs"], "logprob_counts": t["logprob_counts"],
                              "template": tt["verdict"], "template_counts": tt["counts"]}
        say(f"{peer.name} template: {tt['verdict']} {tt['counts']}")
        say(f"{peer.name} ({tolerance}): {t['verdict']} {t['counts']}")
        for r in t["prompts"]:
            if r["outcome"] != "PASS":
                say(f"  {r['outcome']} {r['prompt']}: {r['why']}")
    previous = json.loads((args.out / "summary.json").read_text()) if (args.out / "summary.json").is_file() else {}
    (args.out / "summary.json").write_text(json.dumps(previous | summary, indent=1) + "\n")  # --only keeps the rest
    return 0


if __name__ == "__main__":
    sys.exit(main())
