"""The differential run over the peers that load SmolLM2-135M-Instruct (issue 18).

    PYTHONPATH=. python bench/peers/differential.py [--only NAME ...] [--out reports/differential]

Reference: colibri in-process on the float32 folder (`inprocess:`, weights as stored, F32
arithmetic; its logits are checked against a float64 NumPy model in tests/). Each target is
started in turn on a free port, compared with `colibri-conform differential` logic, and
stopped by its own process group. The tolerance follows what the target computes with:
`exact` for float32 weights and arithmetic, `rounded` for quantized GGUF files and bfloat16.
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
from catalog import ALIAS, COLIBRI_SMOLLM2, LLAMA_CPP_PYTHON, LLAMA_SERVER_PEER, TRANSFORMERS, VLLM, Peer  # noqa: E402
from run import ensure_installed, serving  # noqa: E402
from server_process import stop  # noqa: E402
from smollm2 import HF_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from conformance.differential import _reference_target, markdown, run, templates  # noqa: E402
from conformance.exchange import HttpTarget  # noqa: E402

COLIBRI_DIR = dataclasses.replace(
    COLIBRI_SMOLLM2, name="colibri-f32-dir",
    argv=lambda port: [sys.executable, "-m", "colibri.cli", "serve", "--port", str(port), "--model", str(HF_DIR),
                       "--model-id", ALIAS, "--engine-threads", "2"],
    installed=lambda: (HF_DIR / "model.safetensors").exists())


def _vllm_bf16_argv(port: int) -> list[str]:
    argv = VLLM.argv(port)
    return argv[:argv.index("--dtype")] + ["--dtype", "bfloat16"]


VLLM_BF16 = dataclasses.replace(VLLM, name="vllm-bf16", argv=_vllm_bf16_argv)

#: target -> tolerance (what it computes with)
TARGETS: list[tuple[Peer, str]] = [(COLIBRI_DIR, "exact"), (TRANSFORMERS, "exact"), (VLLM, "exact"),
                                   (COLIBRI_SMOLLM2, "rounded"), (LLAMA_SERVER_PEER, "rounded"),
                                   (LLAMA_CPP_PYTHON, "rounded"), (VLLM_BF16, "rounded")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=[p.name for p, _ in TARGETS], help="these targets only")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "compat" / "differential",
                    help="report folder (default: docs/compat/differential, where the matrix's numerics column reads)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    reference, ref_model = _reference_target(f"inprocess:{HF_DIR}", {})
    summary = {}
    for peer, tolerance in TARGETS:
        if args.only and peer.name not in args.only:
            continue
        ensure_installed(peer)
        proc, base, _ = serving(peer)
        try:
            target = HttpTarget(base, {}, timeout=300)
            report = run(reference, ref_model, [(peer.name, target, peer.model)], tolerance)
            template_report = templates(reference, ref_model, [(peer.name, target, peer.model)])
        finally:
            stop(proc)
            say(f"{peer.name}: stopped")
        report["reference"] = f"colibri in-process on {HF_DIR.name} (float32)"
        (args.out / f"{peer.name}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        (args.out / f"{peer.name}.md").write_text(markdown(report) + "\n" + markdown(template_report))
        (args.out / f"{peer.name}.templates.json").write_text(json.dumps(template_report, indent=1,
                                                                          ensure_ascii=False) + "\n")
        t, tt = report["targets"][peer.name], template_report["targets"][peer.name]
        summary[peer.name] = {"tolerance": tolerance, "verdict": t["verdict"], "counts": t["counts"],
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
