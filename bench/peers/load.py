"""colibri-conform load on the peers: each server started as the harness starts it (run.py), then
loaded at 16 and at 64 users; reports and a page per server into OUT (docs/compat/load/), and
OUT/summary.json, which `colibri-conform compat` reads for the matrix's "under load" column.

    nice -n 10 python bench/peers/load.py --only colibri mockllm litellm --duration 60 --out docs/compat/load
    nice -n 10 python bench/peers/load.py --only colibri --users 64 --duration 120   # the Done-when run
    python bench/peers/load.py --compat docs/compat --readme README.md               # only refresh the matrix
    python bench/peers/load.py --pages vllm      # rewrite a page from its stored reports (after editing OUT/repro/)

Every FAIL on a page comes with what reproduces it: the curl of the request that showed it,
where one request does, and the load command (users, duration, the rule) where only a load does;
OUT/repro/NAME.md, where it exists, holds the short scripts written from the evidence and run
against the server, and is appended to the page.
colibri's servers run with --batch-invariant (its engine promises bit-identical rows); the
others do not promise it, so their greedy divergence is a rate under a SHOULD rule.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cachedir import say
from run import ALL, conform_command, ensure_installed, serving
from server_process import stop

ROOT = Path(__file__).resolve().parents[2]
#: Servers whose engine promises greedy answers independent of the batch.
BATCH_INVARIANT = ("colibri", "colibri-smollm2")
#: The thread-count options of the engines' command lines (llama-server, llama-cpp-python, colibri).
THREAD_FLAGS = ("-t", "--n_threads", "--engine-threads")


def with_threads(peer: Any, n: int) -> Any:
    """PEER with its engine on N threads. On a machine shared with other CPU work an engine whose
    threads meet at a barrier each step runs only as fast as its least scheduled thread: at nice 10
    beside a 2-thread benchmark at nice 0, llama-server -t 2 took 3 s a token (2026-12-05 12:25),
    and every request of a load then "hangs". One thread on the free core measures the server,
    not the machine; the page says which count ran."""
    argv = peer.argv

    def threaded(port: int, **kw: Any) -> list[str]:
        a = list(argv(port, **kw))
        for flag in THREAD_FLAGS:
            if flag in a:
                a[a.index(flag) + 1] = str(n)
        if "llama_cpp.server" in a and "--n_threads" not in a:
            a += ["--n_threads", str(n)]
        return a
    # torch (transformers, vLLM) sizes its pool from OMP_NUM_THREADS; vLLM binds its own unless told not to
    env = peer.env | {"OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    return dataclasses.replace(peer, argv=threaded, env=env)


def load_command(base: str, model: str, users: int, duration: float, out: Path, name: str, peer: str,
                 profiles: list[str]) -> list[str]:
    cmd = [*conform_command(), "load", "--base-url", base + "/v1", "--model", model, "--users", str(users),
           "--duration", str(duration), "-q", "--json", str(out / f"{name}.json")]
    cmd += [x for p in profiles for x in ("--profile", p)]
    return cmd + (["--batch-invariant"] if peer in BATCH_INVARIANT else [])


def run_peer(name: str, users: list[int], duration: float, out: Path, profiles: list[str],
             threads: int | None = None) -> dict[str, Any]:
    peer = ALL[name]
    ensure_installed(peer)
    peer = with_threads(peer, threads) if threads else peer
    upstream = serving(ALL[peer.upstream]) if peer.upstream else None
    proc, base, _ = serving(peer, upstream[1] if upstream else "")
    result: dict[str, Any] = {"version": peer.version(), "model": peer.model, "runs": {}, "profiles": profiles,
                              "threads": threads}
    try:
        for n in users:
            run_name = f"{name}-{n}"
            cmd = load_command(base, peer.model, n, duration, out, run_name, name, profiles)
            before = round(os.getloadavg()[0], 1)
            say(f"{run_name}: {' '.join(cmd)}  (load average {before:.1f})")
            t0 = time.monotonic()
            code = subprocess.call(["nice", "-n", "10", *cmd], stdin=subprocess.DEVNULL)
            result["runs"][str(n)] = {"exit_code": code, "wall_seconds": round(time.monotonic() - t0, 1),
                                      "load_average_before": before, "load_average": round(os.getloadavg()[0], 1),
                                      **summarize(out / f"{run_name}.json")}
    finally:
        stop(proc)
        if upstream:
            stop(upstream[0])
    return result


def html_pages(out: Path) -> None:
    """OUT/NAME-html/index.html for every stored report, all drawn by one OUT/report.js (as
    docs/compat/html/ is) rather than each page carrying its own copy of the renderer."""
    from conformance.report import write_assets, write_html

    write_assets(out)
    for report in sorted(out.glob("*.json")):
        if report.name != "summary.json":
            write_html(json.loads(report.read_text()), out / f"{report.stem}-html", assets="../")


def summarize(report: Path) -> dict[str, Any]:
    if not report.is_file():
        return {"verdict": "ERROR", "failures": [], "why": "no report written"}
    doc = json.loads(report.read_text())
    rules = [r for r in doc["rules"] if r["outcome"] != "SKIPPED"]
    bad = {o: [r["id"] for r in rules if r["outcome"] == o] for o in ("FAIL", "ERROR", "NON-STRICT")}
    verdict = "FAIL" if bad["FAIL"] or bad["ERROR"] else "NON-STRICT" if bad["NON-STRICT"] else "PASS"
    load = doc["load"]
    ok = sum(f["ok"] for f in load["endpoints"].values())
    return {"verdict": verdict, "failures": bad["FAIL"] + bad["ERROR"], "non_strict": bad["NON-STRICT"],
            "requests": load["requests"], "ok": ok, "refused": sum(f["refused"] for f in load["endpoints"].values()),
            "requests_per_s": round(load["requests"] / load["ran_seconds"], 2) if load["ran_seconds"] else None,
            "greedy": load["greedy"], "started": doc["started"]}


def page(name: str, result: dict[str, Any], out: Path, duration: float) -> str:
    """NAME.md: the verdicts per user count, and each FAIL with what reproduces it."""
    from conformance.compat import curl_for

    profiles = "".join(f" --profile {p}" for p in result["profiles"])
    lines = [f"# {name} under load", "", f"{name} {result['version']}, model `{result['model']}`; generated by "
             "bench/peers/load.py (`colibri-conform load`, docs/load.md), profiles "
             f"{', '.join(result['profiles']) or 'the official contracts (default)'}. `$BASE` is the server's root "
             "URL." + (f" The engine ran on {result['threads']} thread(s) (`--threads {result['threads']}`: the "
                       "machine's other core was busy with another benchmark; see bench/peers/load.py with_threads)."
                       if result.get("threads") else ""), ""]
    for n, r in result["runs"].items():
        lines += [f"## {n} users, {duration:g} s", "",
                  f"{r['verdict']}: {r.get('requests', 0)} requests ({r.get('ok', 0)} answered 200, "
                  f"{r.get('refused', 0)} refused 429), {r.get('requests_per_s')} requests/s; greedy: "
                  f"{(r.get('greedy') or {}).get('diverged', 0)} of {(r.get('greedy') or {}).get('compared', 0)} "
                  f"differ from alone. Report: [{name}-{n}.json]({name}-{n}.json), "
                  f"[HTML]({name}-{n}-html/index.html)." + (f" Run {r.get('started', '(no report)')}, {r['wall_seconds']} s wall, load "
                  f"average {r.get('load_average_before')} before and {r['load_average']} after." if r.get("wall_seconds")
                  else ""), ""]
        report = out / f"{name}-{n}.json"
        doc = json.loads(report.read_text()) if report.is_file() else {"rules": []}
        for rule in doc["rules"]:
            if rule["outcome"] not in ("FAIL", "ERROR", "NON-STRICT"):
                continue
            v = next((x for x in rule["vectors"] if x["outcome"] == rule["outcome"]), {})
            lines += [f"### `{rule['id']}` {rule['outcome']}", "", f"{v.get('name', '')}: {v.get('check', '')} "
                      f"expected {v.get('expected', '')!s:.200} — actual {v.get('actual', v.get('reason', ''))!s:.300}", ""]
            ev = v.get("evidence") or {}
            if "request" in ev and isinstance(ev["request"], dict):
                lines += ["One request that showed it:", "", "```sh", curl_for(ev), "```", ""]
            lines += ["The load that showed it:", "", "```sh",
                      f"colibri-conform load --base-url $BASE --users {n} --duration {duration:g}{profiles}"
                      + (" --batch-invariant" if name in BATCH_INVARIANT else "") + f" --json out.json  # {rule['id']}",
                      "```", ""]
    repro = out / "repro" / f"{name}.md"  # hand-written reproductions, each run against the server
    if repro.is_file():
        lines += [repro.read_text().rstrip(), ""]
    return "\n".join(lines)


def stored_result(name: str, out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """What page() needs, rebuilt from the stored reports and summary.json (no run)."""
    s = summary[name]
    runs = {n: {**r, **summarize(out / f"{name}-{n}.json")} for n, r in s["runs"].items()}
    first = out / f"{name}-{next(iter(runs))}.json"
    model = json.loads(first.read_text())["model"] if first.is_file() else ""
    return {"version": s["version"], "model": model, "runs": runs, "profiles": s.get("profiles", []),
            "threads": s.get("threads")}


def refresh_matrix(compat: Path, readme: Path | None) -> None:
    """Rewrite the published matrix (and the README's table) from the runs it already holds, so
    its "under load" column shows OUT/summary.json; nothing is re-run."""
    from colibri.spec import load_spec
    from conformance import compat as c

    runs = sorted(c.carried_runs(compat, set()), key=lambda r: f"{r.name}.meta.json")
    c.write_compat(runs, compat, c.load_explanations(compat / "explanations"), load_spec())
    if readme:
        c.update_readme(readme, runs, c.load_numerics(compat / "differential"), c.load_tool_verdicts(compat / c.TOOLS_DIR),
                        c.load_verdicts(compat / "load"))
    say(f"refreshed {compat} ({len(runs)} servers)" + (f" and {readme}" if readme else ""))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", default=[], help="peer names (bench/peers/catalog.py)")
    p.add_argument("--users", nargs="+", type=int, default=[16, 64])
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "compat" / "load")
    p.add_argument("--profile", action="append", default=[], help="passed to colibri-conform load (default: its own)")
    p.add_argument("--threads", type=int, help="start each engine on this many threads (with_threads; default: "
                   "as run.py starts it)")
    p.add_argument("--pages", nargs="+", default=[], metavar="NAME",
                   help="only rewrite these servers' pages from their stored reports (after editing OUT/repro/NAME.md)")
    p.add_argument("--compat", type=Path, help="afterwards, refresh this published matrix (docs/compat) from its own runs")
    p.add_argument("--readme", type=Path, help="with --compat: also the headline table of this README")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    summary_file = a.out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    for name in a.pages:
        s = summary[name]
        (a.out / f"{name}.md").write_text(page(name, stored_result(name, a.out, summary), a.out, s["duration_seconds"]))
    for name in a.only:
        result = run_peer(name, a.users, a.duration, a.out, a.profile, a.threads)
        (a.out / f"{name}.md").write_text(page(name, result, a.out, a.duration))
        summary[name] = {"version": result["version"], "duration_seconds": a.duration, "profiles": a.profile,
                         **({"threads": a.threads} if a.threads else {}),
                         "runs": {n: {k: r.get(k) for k in ("verdict", "failures", "non_strict", "requests", "ok",
                                                           "refused", "requests_per_s", "load_average_before",
                                                           "load_average", "wall_seconds", "started")}
                                  for n, r in result["runs"].items()}}
        summary_file.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
        say(f"{name}: " + ", ".join(f"{n} users {r['verdict']}" for n, r in result["runs"].items()))
    if a.only or a.pages:
        html_pages(a.out)
    if a.compat:
        refresh_matrix(a.compat, a.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
