"""colibri-conform: run the rules of spec/ against a server and report per rule.

    colibri-conform                                   # the in-process reference server
    colibri-conform --base-url http://host:8000/v1 --model M
    colibri-conform --profile strict --include-should  # this project's stricter contract, SHOULD rules too
    colibri-conform matrix a.json b.json --html out/  # several servers side by side
    colibri-conform diff old.json new.json            # regressions and fixes by rule id
    colibri-conform replay RULE[VECTOR] --base-url U  # re-run one case
    colibri-conform compat REPORTS --out docs/compat  # the published matrix from the peers harness
    colibri-conform differential --reference R --base-url U  # same model, same greedy answers?
    colibri-conform load --base-url U --users 64 --duration 120  # the same verdicts under load (Locust)

Two different things are called strict: the `strict` profile is this project's stricter
contract (refuse explicitly, with exact error codes and params), chosen with --profile strict;
--include-should (formerly --strict) also runs the SHOULD rules of whatever profiles are chosen.

Exit codes: 0 every selected MUST rule passed; 1 failures; 2 usage or configuration error (a
target that wants an API key not given, say); 3 nothing selected, or the target is unreachable
or is no LLM API.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from colibri.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNTESTED, EXIT_USAGE
from colibri.paths import EMBEDDED_FAMILY

from .suite import PROFILES_ALL as PROFILES
from .suite import REMOTE_DEFAULT
from .targets import RunTargets, remote_run_targets, remote_target, request_headers

SUBCOMMANDS = ("matrix", "diff", "replay", "compat", "differential", "load")
USAGE = ("%(prog)s [--base-url URL] [--api-key KEY] [--model M] [--profile P ...] [--include-should] [--rule PREFIX]\n"
         "                       [--list] [--json F] [--markdown F] [--html DIR] [--fuzz N] [other options below]\n"
         f"       %(prog)s {{{','.join(SUBCOMMANDS)}}} ...   (see %(prog)s COMMAND --help)")


class DeprecatedFlag(argparse.Action):
    """An old spelling that still works, says so on stderr, and sets what its new name sets."""

    def __init__(self, option_strings: list[str], dest: str, new: str, const: Any = True, **kw: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, nargs=0, const=const, help=f"deprecated spelling of {new}", **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        if isinstance(self.const, str):  # a profile to add
            setattr(namespace, self.dest, (getattr(namespace, self.dest) or []) + [self.const])
        else:
            setattr(namespace, self.dest, self.const)


def _version() -> str:
    from colibri import __version__

    return f"colibri-conform (colibri {__version__})"


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="colibri-conform", description=__doc__.split("\n\n")[0], usage=USAGE,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--version", action="version", version=_version())
    p.add_argument("--base-url", help="target server (…/v1 or the root); default: the in-process reference server")
    p.add_argument("--api-key", help="key sent as Bearer and x-api-key (default: $COLI_CONFORM_API_KEY); redacted in reports")
    p.add_argument("--model", help="model id to put in requests (default: the target's first listed model)")
    p.add_argument("--header", action="append", default=[], metavar="'K: V'", help="extra request header (repeatable)")
    p.add_argument("--profile", action="append", choices=PROFILES,
                   help="rule profile to run (repeatable; default for a URL: the official contracts, "
                        f"{', '.join(REMOTE_DEFAULT)}; in-process: every profile). With 'strict' selected, vectors are judged "
                        "by this project's stricter contract (error codes and params too); without it, by the official "
                        "APIs' contracts. The differential rules run by `colibri-conform differential`, not here")
    p.add_argument("--include-should", dest="should", action="store_true",
                   help="also run SHOULD rules (a miss is NON-STRICT); independent of --profile strict")
    p.add_argument("--strict", dest="should", action=DeprecatedFlag, new="--include-should")
    p.add_argument("--rule", action="append", default=[], metavar="PREFIX", help="only rules whose id starts with PREFIX")
    p.add_argument("--list", action="store_true", help="dry run: list what would run, and why each other rule is skipped")
    p.add_argument("--concurrency", type=int, default=1, help="rules run at once (default 1)")
    p.add_argument("--budget", type=int, default=5000, help="at most this many requests (default 5000)")
    p.add_argument("--expectations", help="YAML {rule id: reason} of known deviations: reported as SKIPPED")
    p.add_argument("--json", dest="json_out", help="write the JSON report here")
    p.add_argument("--junit", help="write JUnit XML here")
    p.add_argument("--markdown", help="write a Markdown summary here")
    p.add_argument("--html", help="write a static HTML report into this folder")
    p.add_argument("--fuzz", type=int, default=None, metavar="N",
                   help="generated requests per operation for the schemathesis and property phases "
                        "(default 20 in-process, 0 against a URL; 0 turns them off)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take (default 120)")
    p.add_argument("--family", default=EMBEDDED_FAMILY, help="in-process only: the reference server's family row")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


@dataclass
class RuleRun:
    """What one rule run found and how long its parts took."""
    results: list[Any]
    caps: Any  # discovery.Capabilities
    started: str
    seconds: dict[str, float]  # discovery, rules
    phases: list[Any] = field(default_factory=list)
    #: lines of the generated-request phases that broke off: part of the run went untested
    harness_errors: list[str] = field(default_factory=list)


def cmd_run(argv: list[str]) -> int:
    from colibri.spec import load_spec

    from .suite import Selection, skip_reason

    clock = time.monotonic()  # the printed and reported duration is the whole run's wall time
    args = _run_parser().parse_args(argv)
    spec = load_spec()
    remote = bool(args.base_url)
    key = args.api_key or os.environ.get("COLI_CONFORM_API_KEY")
    sel = Selection(profiles=args.profile or (list(REMOTE_DEFAULT) if remote else list(PROFILES)), strict=args.should,
                    prefixes=args.rule, remote=remote, api_key=bool(key))
    chosen = [r for r in spec.rules if skip_reason(r, sel) is None]
    if args.list:
        return _list(spec, sel, chosen)
    if not chosen:
        print("colibri-conform: no rule selected (check --profile/--rule); nothing was tested", file=sys.stderr)
        return EXIT_UNTESTED
    expectations = _expectations(args.expectations, spec)
    if expectations is None:
        return EXIT_USAGE
    headers = request_headers(args)  # a malformed --header: SystemExit with its message, as main() prints
    try:
        targets = _targets(args, spec, headers)
    except SystemExit as e:
        return int(e.code or EXIT_USAGE)
    run = _run_rules(args, spec, sel, targets)
    duration = time.monotonic() - clock
    fixed = _known_deviations(run.results, expectations)
    doc = _report(run, sel, targets, key, duration, fixed)
    if not _write_reports(args, doc, run.results):
        return EXIT_USAGE
    _print_summary(doc, run, duration, fixed)
    s = doc["summary"]
    if s["ERROR"] and not s["PASS"] and not s["FAIL"]:
        return EXIT_UNTESTED
    # A phase that broke off left part of the run untested: not a green run.
    return EXIT_FAIL if s["FAIL"] or s["ERROR"] or run.harness_errors else EXIT_OK


def _list(spec: Any, sel: Any, chosen: list[Any]) -> int:
    """--list: each rule, run or skipped and why; exit 3 when nothing would run."""
    from .suite import in_process_only, skip_reason

    for r in spec.rules:
        why = skip_reason(r, sel) or in_process_only(r, sel)
        print(f"{'run ' if why is None else 'skip'} {r.id:45} {r.level:6} "
              + (f"{len(r.vectors)} vectors" if why is None else why))
    print(f"{len(chosen)} of {len(spec.rules)} rules selected", file=sys.stderr)
    return EXIT_OK if chosen else EXIT_UNTESTED


def _expectations(path: str | None, spec: Any) -> dict[str, str] | None:
    """The --expectations file's {rule id: reason}; None, after one line, when it cannot be read
    or names a rule that does not exist."""
    if not path:
        return {}
    try:
        expectations: dict[str, str] = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        print(f"colibri-conform: cannot read --expectations: {e}", file=sys.stderr)
        return None
    unknown = [k for k in expectations if k not in spec.by_id]
    if unknown:
        print(f"colibri-conform: --expectations names unknown rule ids: {', '.join(unknown)}", file=sys.stderr)
        return None
    return expectations


def _targets(args: argparse.Namespace, spec: Any, headers: dict[str, str]) -> RunTargets:
    """The run's targets: the URL given (SystemExit after one line when it cannot be tested),
    else the in-process reference servers."""
    if args.base_url:
        return remote_run_targets(args.base_url, headers, args.model, args.timeout)
    from .inprocess import pool_run_targets

    return pool_run_targets(spec, args.family)


def _run_rules(args: argparse.Namespace, spec: Any, sel: Any, targets: RunTargets) -> RuleRun:
    """Discovery, the selected rules' vectors, then the generated-request phases."""
    from .discovery import Capabilities
    from .report import now_iso
    from .suite import run_suite

    def progress(rr: Any, done: int, total: int) -> None:
        if not args.quiet:
            print(f"[{done:3}/{total}] {rr.outcome:12} {rr.rule.id}", file=sys.stderr, flush=True)

    started = now_iso()
    t0 = time.monotonic()
    caps = Capabilities.discover(spec, targets.probe)
    discovery_seconds = time.monotonic() - t0
    if not args.quiet:
        print(f"target {targets.label}, model {targets.probe.model}: {caps.summary()}", file=sys.stderr)
    results, rules_seconds = run_suite(spec, sel, targets.target_for, concurrency=args.concurrency,
                                       budget=args.budget, release=targets.release, progress=progress, gate=caps.gate)
    run = RuleRun(results, caps, started, {"discovery": discovery_seconds, "rules": rules_seconds})
    fuzz = args.fuzz if args.fuzz is not None else (0 if args.base_url else 20)
    if fuzz > 0:
        _generated_phases(args, spec, sel, targets, fuzz, run)
    return run


def _generated_phases(args: argparse.Namespace, spec: Any, sel: Any, targets: RunTargets, fuzz: int,
                      run: RuleRun) -> None:
    """The schemathesis and property phases, their findings folded into the rules' verdicts."""
    from .phases import generated_phases
    from .suite import fold_findings

    if not args.quiet:
        print(f"generated requests: schemathesis and property phases, {fuzz} examples per operation",
              file=sys.stderr)
    run.phases = generated_phases(spec, sel, fuzz, **targets.phase_target())
    for ph in run.phases:
        fold_findings(run.results, ph.findings)
        if ph.outcome == "ERROR":
            run.harness_errors.append(ph.line())


def _known_deviations(results: list[Any], expectations: dict[str, str]) -> list[str]:
    """Rules listed in --expectations become SKIPPED with the reason given; those that pass
    anyway are returned, so the run can say the entry is stale."""
    fixed = []
    for rr in results:
        if rr.rule.id in expectations:
            if rr.outcome == "PASS":
                fixed.append(rr.rule.id)
            else:
                rr.outcome, rr.reason = "SKIPPED", f"known deviation: {expectations[rr.rule.id]}"
    return fixed


def _report(run: RuleRun, sel: Any, targets: RunTargets, key: str | None, duration: float,
            fixed: list[str]) -> dict[str, Any]:
    from .report import to_json

    doc = to_json(run.results, {"target": targets.label, "model": targets.probe.model, "started": run.started,
                                "duration_seconds": duration,
                                "contract": "strict" if sel.strict_contract else "official",
                                "selection": {"profiles": sel.profiles, "strict": sel.strict,
                                              "include_should": sel.strict, "rules": sel.prefixes},
                                "discovery": run.caps.to_dict(key)},
                  redact=key)
    doc["expectations_now_passing"] = fixed
    if run.harness_errors:
        doc["harness_errors"] = run.harness_errors
    if run.phases:
        doc["phases"] = {ph.name: ph.to_dict() for ph in run.phases}
    return doc


def _write_reports(args: argparse.Namespace, doc: dict[str, Any], results: list[Any]) -> bool:
    """Write each report asked for; False, after one line, when one cannot be written."""
    from .report import markdown, write_html, write_junit

    writers = [(args.json_out, lambda p: Path(p).write_text(json.dumps(doc, indent=2, ensure_ascii=False))),
               (args.junit, lambda p: write_junit(results, Path(p))),
               (args.markdown, lambda p: Path(p).write_text(markdown(doc))),
               (args.html, lambda p: write_html(doc, Path(p)))]
    for dest, write in writers:
        if dest:
            try:
                write(dest)
            except OSError as e:
                print(f"colibri-conform: cannot write {dest}: {e}", file=sys.stderr)
                return False
    return True


def _print_summary(doc: dict[str, Any], run: RuleRun, duration: float, fixed: list[str]) -> None:
    for ph in run.phases:
        print(ph.line())
    print(" ".join(f"{k}={v}" for k, v in doc["summary"].items())
          + f"  ({duration:.1f} s: discovery {run.seconds['discovery']:.1f}, rules {run.seconds['rules']:.1f}"
          + "".join(f", {ph.name} {ph.seconds:.1f}" for ph in run.phases) + ")")
    for rid in fixed:
        print(f"note: {rid} is listed in --expectations but now passes; remove it from the file")
    for r in doc["rules"]:
        if r["outcome"] in ("FAIL", "ERROR"):
            bad: dict[str, Any] = next((v for v in r["vectors"] if v["outcome"] == r["outcome"]), {})
            print(f"{r['outcome']} {r['id']} [{bad.get('name', '')}] {bad.get('check', '')}: expected "
                  f"{bad.get('expected', '')} actual {bad.get('actual', bad.get('reason', ''))}"[:400])


def cmd_matrix(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="colibri-conform matrix", description="several JSON reports side by side")
    p.add_argument("reports", nargs="+")
    p.add_argument("--markdown", help="write the table here (default: stdout)")
    p.add_argument("--html", help="write the matrix as a page into this folder (the dashboard's report renderer)")
    a = p.parse_args(argv)
    docs = [json.loads(Path(r).read_text()) for r in a.reports]
    if a.html:
        from .report import write_html

        write_html(docs, Path(a.html))
    ids = list(dict.fromkeys(r["id"] for d in docs for r in d["rules"]))
    table = ["| rule | " + " | ".join(d["target"] for d in docs) + " |", "|---|" + "---|" * len(docs)]
    for rid in ids:
        cells = [next((r["outcome"] for r in d["rules"] if r["id"] == rid), "—") for d in docs]
        table.append(f"| `{rid}` | " + " | ".join(cells) + " |")
    text = "\n".join(table) + "\n"
    if a.markdown:
        Path(a.markdown).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_diff(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="colibri-conform diff", description="regressions and fixes between two reports")
    p.add_argument("old")
    p.add_argument("new")
    a = p.parse_args(argv)
    old = {r["id"]: r["outcome"] for r in json.loads(Path(a.old).read_text())["rules"]}
    new = {r["id"]: r["outcome"] for r in json.loads(Path(a.new).read_text())["rules"]}
    regressions = [k for k in new if old.get(k) == "PASS" and new[k] in ("FAIL", "ERROR", "NON-STRICT")]
    fixes = [k for k in new if new[k] == "PASS" and old.get(k) in ("FAIL", "ERROR", "NON-STRICT")]
    for k in regressions:
        print(f"regression {k}: {old[k]} -> {new[k]}")
    for k in fixes:
        print(f"fixed      {k}: {old[k]} -> {new[k]}")
    print(f"{len(regressions)} regression(s), {len(fixes)} fix(es)")
    return EXIT_FAIL if regressions else EXIT_OK


def cmd_replay(argv: list[str]) -> int:
    from colibri.spec import load_spec

    from .runner import run_vector

    p = argparse.ArgumentParser(prog="colibri-conform replay", description="re-run one case: RULE_ID[VECTOR]")
    p.add_argument("case")
    p.add_argument("--base-url", required=True)
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--api-key")
    p.add_argument("--model")
    p.add_argument("--profile", action="append", choices=PROFILES,
                   help="as for a run: with 'strict', judge by this project's stricter contract; without it (the "
                        "default), by the official APIs' contracts")
    p.add_argument("--strict-contract", dest="profile", action=DeprecatedFlag, new="--profile strict", const="strict")
    a = p.parse_args(argv)
    spec = load_spec()
    rid, _, rest = a.case.partition("[")
    vname = rest.rstrip("]")
    rule = spec.by_id.get(rid)
    vector = next((v for v in rule.vectors if v.name == vname), None) if rule else None
    if vector is None:
        print(f"colibri-conform replay: no case {a.case!r}", file=sys.stderr)
        return EXIT_USAGE
    target = remote_target(a.base_url, request_headers(a), a.model)
    res = run_vector(spec, rule, vector, target, "strict" in (a.profile or []), a.profile)
    print(json.dumps({"outcome": res.outcome, "failure": str(res.failure) if res.failure else None,
                      "evidence": res.exchange.to_dict(a.api_key) if res.exchange else None}, indent=2,
                     ensure_ascii=False))
    return EXIT_OK if res.outcome == "PASS" else EXIT_FAIL


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from .compat import main as cmd_compat
    from .differential import main as cmd_differential

    sub = {"matrix": cmd_matrix, "diff": cmd_diff, "replay": cmd_replay, "compat": cmd_compat,
           "differential": cmd_differential}
    if argv and argv[0] == "load":  # imported only here: Locust monkey-patches the process with gevent
        try:
            from .load.cli import main as cmd_load
        except ImportError as e:
            print(f"colibri-conform load needs Locust ({e}): pip install 'colibri[load]'", file=sys.stderr)
            return EXIT_USAGE
        sub["load"] = cmd_load
    command = sub.get(argv[0]) if argv else None
    try:
        return command(argv[1:]) if command else cmd_run(argv)
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return EXIT_USAGE
        return int(e.code or 0)


if __name__ == "__main__":
    sys.exit(main())
