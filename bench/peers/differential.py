"""The differential run over the peers that load the same model (issue 18).

    PYTHONPATH=. python bench/peers/differential.py [--only NAME ...] [--out reports/differential]

Two groups, each with its reference: colibri in-process (`inprocess:`, weights as stored, F32
arithmetic; its logits are checked against a float64 NumPy model in tests/)
- on SmolLM2-135M-Instruct's float32 folder, for every peer that loads SmolLM2;
- on the embedded model, per family (glm, chatml), as `colibri export --format hf` writes it,
  because SmolLM2's template has no tools: the tool and reasoning prompts need a template that
  renders them. Each engine serves that family's export with its own tool and reasoning parsers
  (the *-tiny-* rows of catalog.py): where a parser reads the same text otherwise than colibri's,
  the report shows both parses and the raw text.
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
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachedir import say  # noqa: E402
from catalog import (  # noqa: E402
    ALIAS,
    COLIBRI_SMOLLM2,
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER_PEER,
    TINY_PEERS,
    TRANSFORMERS,
    VLLM,
    Peer,
    colibri_argv,
)
from run import ensure_installed, serving  # noqa: E402
from server_process import stop  # noqa: E402
from smollm2 import HF_DIR  # noqa: E402
from tiny import ensure_export, export_path, exported, model_id  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from conformance.differential import _reference_target, markdown, run, templates  # noqa: E402
from conformance.targets import HttpTarget  # noqa: E402

COLIBRI_DIR = dataclasses.replace(
    COLIBRI_SMOLLM2, name="colibri-f32-dir",
    argv=colibri_argv(HF_DIR, ALIAS),
    installed=lambda: (HF_DIR / "model.safetensors").exists())


def _vllm_bf16_argv(port: int) -> list[str]:
    argv = VLLM.argv(port)
    return argv[:argv.index("--dtype")] + ["--dtype", "bfloat16"]


VLLM_BF16 = dataclasses.replace(VLLM, name="vllm-bf16", argv=_vllm_bf16_argv)

# The embedded model: per family, the `colibri export` folder is the reference's model (colibri
# in-process detects the family from the folder's template) and each engine serves that family's
# export with its own tool and reasoning parsers (catalog.TINY_PEERS, tiny.py).
TINY_FAMILIES = ("glm", "chatml")  # qwen-xml: the model writes no qwen-xml calls (docs/compat/tools)


def _tiny(name: str) -> Peer:
    return TINY_PEERS[name]


def _colibri_tiny(family: str) -> Peer:
    """colibri serve on the family's export: the HTTP server against its in-process self."""
    return dataclasses.replace(COLIBRI_DIR, name=model_id(family), model=model_id(family), family=family,
                               installed=lambda: exported(family, "hf"),
                               argv=colibri_argv(export_path(family, "hf"), model_id(family)))


#: reference model folder -> [(target, tolerance: what it computes with)]
GROUPS: dict[Path, list[tuple[Peer, str]]] = {
    HF_DIR: [(COLIBRI_DIR, "exact"), (TRANSFORMERS, "exact"), (VLLM, "exact"), (COLIBRI_SMOLLM2, "rounded"),
             (LLAMA_SERVER_PEER, "rounded"), (LLAMA_CPP_PYTHON, "rounded"), (VLLM_BF16, "rounded")],
    **{export_path(f, "hf"): [(_colibri_tiny(f), "exact"), (_tiny(f"vllm-tiny-{f}"), "exact"),
                              # llama.cpp keeps its KV cache in F16 whatever the weights: rounded arithmetic
                              (_tiny(f"llama-server-tiny-{f}"), "rounded"),
                              *([(_tiny("transformers-tiny-chatml"), "exact")] if f == "chatml" else [])]
       for f in TINY_FAMILIES},
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
        if peer.family:
            ensure_export(peer.family, "hf")  # the reference's model
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
