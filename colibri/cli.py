"""The `colibri` command: `colibri spec lint|docs|diff|openapi`, `colibri serve` and `colibri export`."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from . import __version__
from .exit_codes import EXIT_FAIL, EXIT_OK, EXIT_USAGE
from .paths import EMBEDDED_MODEL_ID, checkout_root, data_dir


def _spec_root(args: argparse.Namespace) -> Path:
    """The spec folder a `colibri spec` command reads, said on stderr: --spec, else the checkout
    the command runs in (an edit there is what the user means to check, even when the installed
    package is a copy from before it), else the installed one."""
    if args.spec:
        root, why = Path(args.spec), "--spec"
    elif (checkout := checkout_root()) is not None:
        root, why = checkout / "spec", "this checkout's; --spec to read another"
    else:
        root = data_dir("spec")
        why = "the installed package's; run inside a checkout to read its spec/, or pass --spec"
    print(f"colibri spec: reading {root.resolve()} ({why})", file=sys.stderr)
    return root


def cmd_lint(args: argparse.Namespace) -> int:
    from .spec.lint import lint

    root = _spec_root(args)
    spec, problems = lint(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in {root}", file=sys.stderr)
        return EXIT_FAIL
    assert spec is not None
    n_gen = sum(v.generated for v in spec.vectors())
    print(f"ok: {len(spec.rules)} rules in {len(spec.topics)} topics, {len(spec.vectors())} vectors "
          f"({n_gen} generated), {len(spec.compiled)} checks, {len(spec.errors)} error codes, "
          f"{len(spec.families)} families")
    return EXIT_OK


def cmd_docs(args: argparse.Namespace) -> int:
    from .spec import load_spec
    from .spec.docs import render_docs

    out = Path(args.out)
    written = render_docs(load_spec(_spec_root(args)), out)
    print(f"wrote {len(written)} pages to {out}/ (start at {out / 'index.md'})")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from .spec import load_spec
    from .spec.diff import diff_against

    repo = Path(args.repo) if args.repo else None
    if repo is None:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        if top.returncode != 0:
            print("colibri spec diff: not inside a git checkout; pass --repo", file=sys.stderr)
            return EXIT_USAGE
        repo = Path(top.stdout.strip())
    new_root = Path(args.spec) if args.spec else repo / "spec"
    print(f"colibri spec: comparing {new_root.resolve()} with {args.rev} in the git checkout {repo.resolve()}",
          file=sys.stderr)
    try:
        changes = diff_against(args.rev, load_spec(new_root), repo, new_root.parent / "schemas")
    except RuntimeError as e:
        print(f"colibri spec diff: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps([c.__dict__ for c in changes], indent=2))
    else:
        for c in changes:
            print(c)
    breaking = [c for c in changes if c.kind == "BREAKING"]
    print(f"{len(changes)} change(s) since {args.rev}, {len(breaking)} breaking", file=sys.stderr)
    if breaking and not args.allow_breaking:
        print("breaking spec changes: pass --allow-breaking (CI: a 'Spec-Breaking: <why>' commit trailer)",
              file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def cmd_openapi(args: argparse.Namespace) -> int:
    from .schemas import openapi
    from .spec import load_spec

    doc = json.dumps(openapi(load_spec(_spec_root(args))), indent=2, ensure_ascii=False) + "\n"
    if args.out:
        Path(args.out).write_text(doc)
    else:
        sys.stdout.write(doc)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from .export import ExportError, export

    try:
        export(args.family, args.format, Path(args.out), gguf_type=args.type, say=print)
    except ExportError as e:
        print(f"colibri export: {e.code}: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


EXPORT_HELP = f"""Write the embedded model (colibri/models/tiny) as files another engine loads, in one
family's chat format. The weights are the same for every family; the family picks the chat
template and the end tokens (spec/families.yaml).

  hf    a transformers directory: config.json, model.safetensors, tokenizer.json,
        tokenizer_config.json (the family's chat template, eos/pad tokens), generation_config.json
        (the end tokens), README.md. Loads in transformers, vLLM and colibri serve --model OUT.
  gguf  OUT/{EMBEDDED_MODEL_ID}-FAMILY-TYPE.gguf (llama architecture; tokenizer, template and end tokens
        in the metadata) and README.md. Loads in llama.cpp (llama-server -m FILE --jinja),
        llama-cpp-python and colibri serve --model FILE.

Greedy answers are token for token those of the embedded model (with --type f32)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="colibri", description="Spec-driven conformance for OpenAI- and "
                                "Anthropic-compatible LLM APIs, and a reference server.")
    p.add_argument("--version", action="version", version=f"colibri {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    spec = sub.add_parser("spec", help="work with the rule tables in spec/")
    ssub = spec.add_subparsers(dest="spec_command", required=True)
    for name, fn, helptext in (("lint", cmd_lint, "validate spec/: meta-schema, ids, references, vectors"),
                               ("docs", cmd_docs, "render spec/ as Markdown pages"),
                               ("diff", cmd_diff, "compare spec/ with a git revision; exit 1 on breaking changes"),
                               ("openapi", cmd_openapi, "print the OpenAPI 3.1 document built from schemas/")):
        sp = ssub.add_parser(name, help=helptext, description=helptext)
        sp.add_argument("--spec", help="spec folder (default: the checkout's or the installed one)")
        sp.set_defaults(func=fn)
        if name == "docs":
            sp.add_argument("out", nargs="?", default="build/spec-docs", help="output folder (default build/spec-docs)")
        if name == "diff":
            sp.add_argument("rev", help="git revision to compare against, e.g. HEAD~1 or main")
            sp.add_argument("--repo", help="git checkout holding spec/ (default: the current one)")
            sp.add_argument("--allow-breaking", action="store_true", help="exit 0 even with breaking changes")
            sp.add_argument("--json", action="store_true", help="print the changes as JSON")
        if name == "openapi":
            sp.add_argument("--out", help="write to this file instead of stdout")
    from .export import GGUF_TYPES, exportable_families

    ex = sub.add_parser("export", help="write the embedded model as a transformers directory or a GGUF file",
                        description=EXPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("--family", required=True, metavar="{" + ",".join(exportable_families()) + "}",
                    help="which family's chat template and end tokens the files carry (a row of spec/families.yaml "
                         "whose template the embedded model ships)")
    ex.add_argument("--format", required=True, metavar="{hf,gguf}", help="hf: transformers directory; gguf: one GGUF file")
    ex.add_argument("--type", default="f32", metavar="{" + ",".join(GGUF_TYPES) + "}",
                    help="GGUF tensor type (default f32: exactly the embedded weights; norms stay f32 either way)")
    ex.add_argument("out", metavar="OUT", help="directory to write; created, and refused if it holds anything")
    ex.set_defaults(func=cmd_export)
    sub.add_parser("serve", help="run the reference server (embedded model by default); see colibri serve --help",
                   add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # its own parser: the flags are many and documented there
        from .serve import main as serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    checkout = checkout_root() if args.command == "spec" and not args.spec else None
    if checkout is None or os.environ.get("COLI_SCHEMAS_DIR"):
        return int(args.func(args))
    # The checkout's schemas go with its spec/, so the meta-schema and the $refs match the rules
    # read; only for this command (main is also called in-process, by tests).
    os.environ["COLI_SCHEMAS_DIR"] = str(checkout / "schemas")
    try:
        return int(args.func(args))
    finally:
        del os.environ["COLI_SCHEMAS_DIR"]


if __name__ == "__main__":
    sys.exit(main())
