"""The published compatibility matrix (docs/compat/), built from the peers harness's reports.

    colibri-conform compat REPORTS_DIR --out docs/compat      # regenerate the pages
    colibri-conform compat REPORTS_DIR --check docs/compat    # verdicts differ from the committed ones?

REPORTS_DIR holds NAME.json (a colibri-conform report) and NAME.meta.json (the harness's notes:
version, model, wall time) per server. The pages: README.md (per-server headline and the rule ×
server matrix by topic), NAME.md (each non-PASS rule with the curl that reproduces it and a
reviewed explanation from explanations.yaml), html/ (the matrix, each cell linking to its
evidence) and verdicts/NAME.json (rule -> outcome: what CI compares a fresh run against). The
numerics column comes from differential/summary.json, which bench/peers/differential.py
writes there with a page per server; the "under load" column from load/summary.json
(bench/peers/load.py). A server published in OUT with no report in REPORTS_DIR
keeps its column: its last report is read back from the HTML page that embeds it.
"""
from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from colibri.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNTESTED

from .report import write_assets, write_html
from .suite import REMOTE_DEFAULT

#: Failures that hurt clients most, first: a 500 or a broken stream ends a conversation, a
#: wrong envelope or shape breaks typed SDKs, an ignored budget costs money; the rest follow in
#: spec order. Used to pick each server's three headline failures.
CONSEQUENCE = (
    "err.no-500-for-client-input", "body.json.invalid", "stream.sse.framing", "chat.stream.done_sentinel",
    "msgs.stream.event_order", "chat.response.shape", "msgs.response.shape", "gen.max_tokens.ceiling",
    "req.max_completion_tokens.accepted", "chat.stream.usage.final_chunk", "stream.chunk.same-id",
    "err.envelope.openai", "err.envelope.anthropic", "chat.tool_calls.shape", "chat.stream.tool_calls.index",
    "chat.stop.trimmed", "chat.stop.honored", "body.not-object", "req.model.served", "models.list",
)
SHOWN = ("PASS", "FAIL", "NON-STRICT", "UNSUPPORTED", "INCONCLUSIVE", "ERROR")


@dataclass
class Run:
    name: str
    doc: dict[str, Any]
    meta: dict[str, Any]

    @property
    def outcomes(self) -> dict[str, str]:
        return {r["id"]: r["outcome"] for r in self.doc["rules"]}


def load_explanations(folder: Path) -> dict[str, dict[str, str]]:
    """NAME.yaml per server: {rule id: what the server does and which clients it breaks}."""
    return {f.stem: yaml.safe_load(f.read_text()) or {} for f in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def load_runs(reports: Path) -> list[Run]:
    runs = []
    for meta_file in sorted(reports.glob("*.meta.json")):
        name = meta_file.name.removesuffix(".meta.json")
        report = reports / f"{name}.json"
        if report.exists():
            runs.append(Run(name, json.loads(report.read_text()), json.loads(meta_file.read_text())))
    return runs


def carried_runs(out: Path, fresh: set[str]) -> list[Run]:
    """The runs OUT publishes for servers that did not run this time, read back from the report
    each one's HTML page embeds: regenerating after a run of a few peers keeps the others'
    columns (as they were judged then) instead of dropping them."""
    from .report import embedded_reports

    runs = []
    for f in sorted((out / "verdicts").glob("*.json")) if (out / "verdicts").is_dir() else []:
        page = out / "html" / f.stem / "index.html"
        if f.stem in fresh or not page.is_file():
            continue
        docs = embedded_reports(page.read_text())
        if len(docs) != 1:
            continue
        published = json.loads(f.read_text())
        meta = {"name": f.stem, "version": published.get("version"), "model": published.get("model"), "carried": True}
        wall = published.get("wall_seconds")
        if wall is None and (out / f"{f.stem}.md").is_file():  # pages written before verdicts kept it
            m = re.search(r", run \S+ in (\d+) s\.", (out / f"{f.stem}.md").read_text())
            wall = int(m.group(1)) if m else None
        if wall is not None:
            meta["wall_seconds"] = wall
        runs.append(Run(f.stem, docs[0], meta))
    return runs


def curl_for(evidence: dict[str, Any], base: str = "$BASE") -> str:
    """The request of an exchange as a curl command line ($BASE: the server's root URL)."""
    req = evidence["request"]
    # A shell variable stays outside the single quotes, so that the pasted line expands it.
    url = f'"{base}"{shlex.quote(req["path"])}' if base.startswith("$") else shlex.quote(base + req["path"])
    parts = ["curl", "-sS", "-i", "-X", req["method"], url]
    for k, v in req["headers"].items():
        if k.lower() not in ("content-length", "host"):
            parts += ["-H", shlex.quote(f"{k}: {v}")]
    body = req.get("body") or ""
    if body:
        if len(body) > 2000:
            return " ".join(parts) + f" --data-binary @body.json   # the {len(body)}-byte body is in the evidence page"
        parts += ["--data-binary", shlex.quote(body)]
    return " ".join(parts)


def _first_bad(rule: dict[str, Any]) -> dict[str, Any] | None:
    bad = [v for v in rule["vectors"] if v["outcome"] == rule["outcome"]]
    with_evidence = [v for v in bad if "evidence" in v]
    return (with_evidence or bad or [None])[0]


def _must_counts(run: Run) -> dict[str, int]:
    counts = dict.fromkeys(("PASS", "FAIL", "UNSUPPORTED"), 0)
    for r in run.doc["rules"]:
        if r["level"] == "MUST" and r["outcome"] in counts:
            counts[r["outcome"]] += 1
    return counts


def _headline_failures(run: Run) -> list[str]:
    failed = [r["id"] for r in run.doc["rules"] if r["outcome"] == "FAIL"]
    order = {rid: i for i, rid in enumerate(CONSEQUENCE)}
    return sorted(failed, key=lambda rid: (order.get(rid, len(order)), failed.index(rid)))[:3]


def _cell(outcome: str | None) -> str:
    return {"PASS": "pass", "FAIL": "**FAIL**", "NON-STRICT": "non-strict", "UNSUPPORTED": "unsupported",
            "INCONCLUSIVE": "inconclusive", "ERROR": "ERROR"}.get(outcome or "", "·")


def _server_line(run: Run) -> str:
    m = run.meta
    return (f"`{run.name}` {m.get('version', '?')}, model `{run.doc.get('model', m.get('model', '?'))}`, "
            f"run {run.doc.get('started', '?')} in {m.get('wall_seconds', run.doc.get('duration_seconds', 0)):.0f} s")


def load_numerics(folder: Path) -> dict[str, dict[str, Any]]:
    """The differential run's summary (bench/peers/differential.py writes FOLDER/summary.json)."""
    f = folder / "summary.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _numerics_cell(name: str, numerics: dict[str, dict[str, Any]], link: str) -> str:
    n = numerics.get(name)
    if not n:
        return "— (no shared model)" if numerics else "—"
    return f"[{n['verdict']}]({link}differential/{name}.md) {_numerics_detail(n)}"


def _numerics_detail(n: dict[str, Any]) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in n["counts"].items())
    logprobs = f"; logprobs {n['logprobs']}" if n.get("logprobs") else ""
    template = f"; template {n['template']}" if n.get("template") else ""
    return f"({n['tolerance']}; {counts}{logprobs}{template})"


def load_verdicts(folder: Path) -> dict[str, dict[str, Any]]:
    """The load runs' summary (bench/peers/load.py writes FOLDER/summary.json): per server, the
    verdict of `colibri-conform load` at each user count."""
    f = folder / "summary.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _load_cell(name: str, load: dict[str, dict[str, Any]], link: str) -> str:
    s = load.get(name)
    if not s:
        return "—"
    runs = sorted(s["runs"].items(), key=lambda kv: int(kv[0]))
    text = "; ".join(f"{n} users: {r['verdict']}" + (f" ({', '.join(r['failures'][:2])})" if r.get("failures") else "")
                     for n, r in runs)
    return f"[{text}]({link}load/{name}.md)"


#: The embedded model's runs on each engine (bench/peers/tiny.py) are published in this
#: subfolder of the matrix; their verdicts give the tools and reasoning columns.
TOOLS_DIR = "tools"
TINY = "-tiny-"


def rule_area(rule_id: str) -> str | None:
    """Whether a rule is about tool calls or about reasoning (the two columns), else None."""
    if any(k in rule_id for k in ("reasoning", "thinking")):
        return "reasoning"
    if any(k in rule_id for k in ("tool", "function_call")):
        return "tools"
    return None


def load_tool_verdicts(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{engine: {family: {"tools": counts, "reasoning": counts, "page": run name}}} from the
    verdicts of the ENGINE-tiny-FAMILY runs in FOLDER/verdicts (the tools matrix)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for f in sorted((folder / "verdicts").glob(f"*{TINY}*.json")) if folder.is_dir() else []:
        engine, family = f.stem.split(TINY, 1)
        counts: dict[str, dict[str, int]] = {"tools": {}, "reasoning": {}}
        for rid, outcome in json.loads(f.read_text())["rules"].items():
            area = rule_area(rid)
            if area and outcome in SHOWN:
                counts[area][outcome] = counts[area].get(outcome, 0) + 1
        out.setdefault(engine, {})[family] = {**counts, "page": f.stem}
    return out


_SHORT = {"PASS": "pass", "FAIL": "FAIL", "NON-STRICT": "non-strict", "UNSUPPORTED": "unsupp.", "INCONCLUSIVE": "inconcl.",
          "ERROR": "ERROR"}


def _area_cell(name: str, area: str, tools: dict[str, dict[str, dict[str, Any]]], link: str) -> str:
    fams = tools.get(name)
    if not fams:
        return "—"
    parts = []
    for family, v in fams.items():
        c = v[area]
        text = " ".join(f"{c[o]} {_SHORT[o]}" for o in SHOWN if c.get(o)) or "none run"
        parts.append(f"{family}: [{text}]({link}{TOOLS_DIR}/{v['page']}.md)")
    return "<br>".join(parts)


def headline(runs: list[Run], link: str = "", numerics: dict[str, dict[str, Any]] | None = None,
             tools: dict[str, dict[str, dict[str, Any]]] | None = None,
             load: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Per server: MUST rules passed, failed, unsupported, its three most consequential failures,
    the tool and reasoning rules on the embedded model per family, and the differential verdict
    and `colibri-conform load`'s verdicts at each user count (`link` prefixes the page links:
    "docs/compat/" from the top of the repository)."""
    numerics, tools, load = numerics or {}, tools or {}, load or {}
    lines = ["| server | version | model | MUST pass | MUST fail | MUST unsupported | most consequential failures "
             "| tools (embedded model, per family) | reasoning (embedded model, per family) | numerics (differential) "
             "| under load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        c = _must_counts(run)
        worst = ", ".join(f"[`{rid}`]({link}{run.name}.md#{rid.replace('.', '')})"
                          for rid in _headline_failures(run)) or "—"
        lines.append(f"| [{run.name}]({link}{run.name}.md) | {run.meta.get('version', '?')} | "
                     f"`{run.doc.get('model', '')}` | {c['PASS']} | {c['FAIL']} | {c['UNSUPPORTED']} | {worst} "
                     f"| {_area_cell(run.name, 'tools', tools, link)} | {_area_cell(run.name, 'reasoning', tools, link)} "
                     f"| {_numerics_cell(run.name, numerics, link)} | {_load_cell(run.name, load, link)} |")
    return lines


README_START, README_END = "<!-- compat:start -->", "<!-- compat:end -->"


def update_readme(path: Path, runs: list[Run], numerics: dict[str, dict[str, Any]] | None = None,
                  tools: dict[str, dict[str, dict[str, Any]]] | None = None,
                  load: dict[str, dict[str, Any]] | None = None) -> bool:
    """Replace the headline table between the markers of the project README; False without them."""
    text = path.read_text()
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    table = "\n".join(headline(runs, "docs/compat/", numerics, tools, load))
    path.write_text(f"{head}{README_START}\n{table}\n{README_END}{tail}")
    return True


def readme(runs: list[Run], spec: Any, numerics: dict[str, dict[str, Any]] | None = None,
           tools: dict[str, dict[str, dict[str, Any]]] | None = None,
           load: dict[str, dict[str, Any]] | None = None) -> str:
    if runs and all(r.meta.get("family") for r in runs):
        return tools_readme(runs, spec)
    lines = ["# How servers compare", "",
             "Generated by `colibri-conform compat` from the peers harness (`tox -e peers`); do not edit by hand.",
             "Each server ran `colibri-conform --base-url … --model …` with the default profiles (the official",
             f"contracts: {', '.join(f'`{p}`' for p in REMOTE_DEFAULT)}), on 127.0.0.1 on the same machine.", "",
             *headline(runs, numerics=numerics, tools=tools, load=load)]
    extra = {k: v for k, v in (numerics or {}).items() if k not in {r.name for r in runs}}
    if numerics:
        lines += ["", "Numerics: `colibri-conform differential` against colibri on the float32 weights "
                  "(bench/peers/differential.py; rules `diff.greedy.exact` and `diff.greedy.rounded`): the same "
                  "greedy answers, or divergences only where the reference nearly tied; `diff.logprobs.close`: "
                  "the log probabilities along the shared tokens within the format's error; "
                  "`diff.template.agrees`: the same rendered prompt. Servers without the shared model (canned "
                  "answers, the embedded model) have no such column entry. SmolLM2's template has no tools, so "
                  "the tool prompts run on the embedded model with its ChatML template (`*-tiny-chatml`)."]
        lines += [f"Also compared: [{k}](differential/{k}.md): {v['verdict']} {_numerics_detail(v)}."
                  for k, v in extra.items()]
    if load:
        lines += ["", "Under load: `colibri-conform load` at each user count (bench/peers/load.py, docs/load.md): "
                  "the behaviour-neutral vectors sent by that many Locust users at once, every answer judged as "
                  "in a normal run, and the load rules (spec/92-load.yaml): none lost, no 5xx/reset/hang, 429 "
                  "with Retry-After in the envelope, disconnects free capacity, greedy answers as alone. Each "
                  "page gives every FAIL with the curl or load command that reproduces it."]
    if tools:
        lines += ["", f"Tools and reasoning: the embedded model (which calls tools and reasons in the glm, chatml and "
                  f"qwen-xml syntaxes) exported by `colibri export` and served by each engine with its own tool and "
                  f"reasoning parsers (bench/peers/tiny.py); counts of the tool and reasoning rules per outcome, "
                  f"each linked to its run. The matrix, the parsers and every FAIL with its curl: "
                  f"[{TOOLS_DIR}/README.md]({TOOLS_DIR}/README.md)."]
    lines += ["", "The HTML matrix with every cell linked to its evidence: [html/index.html](html/index.html).",
              "Cells: pass, **FAIL** (a MUST broken), non-strict (a SHOULD missed), unsupported (refused cleanly",
              "or not served), inconclusive (the model did not do what a behaviour rule needs), · (not run: a",
              "rule of this project's stricter contract, or one that needs the in-process server).", ""]
    by_topic: dict[str, list[str]] = {}
    for rule in spec.rules:
        if any(run.outcomes.get(rule.id) in SHOWN for run in runs):
            by_topic.setdefault(rule.topic, []).append(rule.id)
    for topic, ids in by_topic.items():
        lines += [f"## {topic}", "", "| rule | level | " + " | ".join(r.name for r in runs) + " |",
                  "|---|---|" + "---|" * len(runs)]
        for rid in ids:
            lines.append(f"| `{rid}` | {spec.by_id[rid].level} | "
                         + " | ".join(_cell(r.outcomes.get(rid)) for r in runs) + " |")
        lines.append("")
    return "\n".join(lines)


def tools_readme(runs: list[Run], spec: Any) -> str:
    """The matrix of the embedded model's runs (bench/peers/tiny.py): per engine and family the
    parsers it served with and its tool and reasoning verdicts, then rule by rule."""
    lines = ["# Tool calling and reasoning, on each engine's own parsers", "",
             "Generated by `colibri-conform compat` from the peers harness's embedded-model rows",
             "(`python bench/peers/run.py --only vllm-tiny-glm ... --out reports/peers-tools`, then",
             "`colibri-conform compat reports/peers-tools --out docs/compat/tools`); do not edit by hand.",
             "Each engine serves the files `colibri export --family F --format hf|gguf` writes, started with",
             "the flags below, and ran `colibri-conform` on the tool, tool_choice and reasoning rules",
             "(`--profile openai anthropic responses tools reasoning --include-should`): judged by the official contracts.",
             "Reviewed explanations of every FAIL, with a curl, are on each run's page.", "",
             "| run | engine version | family | parsers | server command | tools | reasoning |", "|---|---|---|---|---|---|---|"]
    tools = {}
    for run in runs:
        counts: dict[str, dict[str, int]] = {"tools": {}, "reasoning": {}}
        for r in run.doc["rules"]:
            area = rule_area(r["id"])
            if area and r["outcome"] in SHOWN:
                counts[area][r["outcome"]] = counts[area].get(r["outcome"], 0) + 1
        tools[run.name] = counts
        m = run.meta
        fmt = {a: " ".join(f"{c} {_SHORT[o]}" for o, c in sorted(counts[a].items(), key=lambda x: SHOWN.index(x[0])))
               for a in counts}
        detected = f"; chat format detected: {m['chat_format']}" if m.get("chat_format") else ""
        lines.append(f"| [{run.name}]({run.name}.md) | {m.get('version', '?')} | {m.get('family')} | "
                     f"{m.get('parsers', '')}{detected} | `{m.get('argv', '')}` | {fmt['tools'] or '—'} | "
                     f"{fmt['reasoning'] or '—'} |")
    lines += ["", "Cells: pass, **FAIL**, unsupported (refused cleanly, or an endpoint not served), inconclusive (the",
              "model did not call or reason where the rule needs it), · (not run).", ""]
    ids = [r.id for r in spec.rules if any(run.outcomes.get(r.id) in SHOWN for run in runs)]
    lines += ["| rule | level | " + " | ".join(r.name for r in runs) + " |", "|---|---|" + "---|" * len(runs)]
    for rid in ids:
        lines.append(f"| `{rid}` | {spec.by_id[rid].level} | " + " | ".join(_cell(r.outcomes.get(rid)) for r in runs) + " |")
    return "\n".join(lines) + "\n"


def server_page(run: Run, explanations: dict[str, str]) -> tuple[str, list[str]]:
    """The server's page, and the FAILs that have no reviewed explanation yet."""
    missing = []
    doc = run.doc
    lines = [f"# {run.name}", "", _server_line(run) + ".", "",
             "## What the probes found", "",
             *(f"- {name}: {f['state']}" + ("" if f["state"] == "served" else f" ({f['detail']})")
               for name, f in (doc.get("discovery") or {}).items()),
             "", "## Client settings", "",
             "Derived from what the probes found; a request built from them succeeds on this server. "
             "`delivers` (conformance/usability.py) names what a client can use beyond what is accepted: "
             "false is a feature taken but not delivered, which the settings leave out (null: not probed).", "",
             "```json", json.dumps({k: doc["compat"].get(k) for k in ("pi_compat", "openai_sdk", "delivers", "thinking_off")
                                    if k in doc["compat"]}, indent=2), "```",
             "", "## Rules not passed", "",
             f"`$BASE` is the server's root URL. Evidence pages: [html/{run.name}/](html/{run.name}/index.html).", ""]
    for r in doc["rules"]:
        if r["outcome"] in ("PASS", "SKIPPED"):
            continue
        v = _first_bad(r)
        note = explanations.get(r["id"])
        if r["outcome"] == "FAIL" and not note:
            missing.append(r["id"])
        lines += [f"### {r['id']}", "", f"**{r['outcome']}** ({r['level']}) — {r['title']}", ""]
        if note:
            lines += [note, ""]
        elif r["outcome"] == "FAIL":
            lines += ["*(not reviewed yet)*", ""]
        if v is not None:
            if v.get("check"):
                lines += [f"Vector `{v['name']}` [{v['mode']}]: `{v['check']}` expected {v.get('expected', '')[:300]}, "
                          f"got {v.get('actual', '')[:300]}".replace("\n", " "), ""]
            elif v.get("reason"):
                lines += [f"Vector `{v['name']}` [{v['mode']}]: {v['reason'][:300]}", ""]
            if "evidence" in v:
                lines += ["```sh", curl_for(v["evidence"]), "```", ""]
    return "\n".join(lines), missing


def matrix_html(runs: list[Run], spec: Any, numerics: dict[str, dict[str, Any]] | None = None) -> str:
    colors = {"PASS": "#2e7d32", "FAIL": "#c62828", "NON-STRICT": "#ef6c00", "UNSUPPORTED": "#6a1b9a",
              "INCONCLUSIVE": "#5d4037", "ERROR": "#000"}
    head = "".join(f"<th><a href='{html.escape(r.name)}/index.html'>{html.escape(r.name)}</a><br>"
                   f"<small>{html.escape(str(r.meta.get('version', '')))}</small></th>" for r in runs)
    rows = []
    if numerics:  # the differential run's verdict per server: the same column as README.md's
        numeric = "".join(
            f"<td><a href='../differential/{html.escape(r.name)}.md'>{html.escape(numerics[r.name]['verdict'])}</a> "
            f"<small>{html.escape(_numerics_detail(numerics[r.name]))}</small></td>" if r.name in numerics
            else "<td>— <small>(no shared model)</small></td>" for r in runs)
        rows.append(f"<tr><td>numerics (differential)</td><td></td>{numeric}</tr>")
    for rule in spec.rules:
        cells = []
        for run in runs:
            o = run.outcomes.get(rule.id)
            if o not in SHOWN:
                cells.append("<td>·</td>")
                continue
            text = f"<span style='color:{colors[o]}'>{o}</span>"
            page = f"{run.name}/index.html#{rule.id}"  # the run's page opens that rule
            cells.append(f"<td><a href='{html.escape(page)}'>{text}</a></td>" if o != "PASS" else f"<td>{text}</td>")
        if any(c != "<td>·</td>" for c in cells):
            rows.append(f"<tr><td><code>{html.escape(rule.id)}</code></td><td>{rule.level}</td>{''.join(cells)}</tr>")
    return ("<!doctype html><meta charset=utf-8><title>colibri compatibility matrix</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px}tr:nth-child(even){background:#f4f4f4}"
            "</style><h1>colibri compatibility matrix</h1><p>Generated by <code>colibri-conform compat</code>; "
            "each non-pass cell links to its evidence (request, response, expected vs actual).</p>"
            f"<table><tr><th>rule</th><th>level</th>{head}</tr>{''.join(rows)}</table>")


def write_compat(runs: list[Run], out: Path, explanations: dict[str, dict[str, str]], spec: Any) -> list[str]:
    """Write every page; return 'server rule' for each FAIL without a reviewed explanation."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdicts").mkdir(exist_ok=True)
    missing: list[str] = []
    (out / "html").mkdir(exist_ok=True)
    write_assets(out / "html")  # one renderer for every run's page
    for run in runs:
        page, unexplained = server_page(run, explanations.get(run.name) or {})
        (out / f"{run.name}.md").write_text(page)
        missing += [f"{run.name} {rid}" for rid in unexplained]
        shutil.rmtree(out / "html" / run.name / "evidence", ignore_errors=True)  # pages before the renderer drew them
        write_html(run.doc, out / "html" / run.name, assets="../")
        verdicts = {"server": run.name, "version": run.meta.get("version"), "model": run.doc.get("model"),
                    "wall_seconds": run.meta.get("wall_seconds"),
                    "rules": {r["id"]: r["outcome"] for r in run.doc["rules"]}}
        (out / "verdicts" / f"{run.name}.json").write_text(json.dumps(verdicts, indent=1, sort_keys=True) + "\n")
    # a hand-written notes.md beside the generated pages (what the matrix cannot say: which
    # families an engine cannot parse, and why) is appended to the generated README
    notes = (out / "notes.md").read_text() if (out / "notes.md").is_file() else ""
    (out / "README.md").write_text(readme(runs, spec, load_numerics(out / "differential"),
                                          load_tool_verdicts(out / TOOLS_DIR), load_verdicts(out / "load"))
                                   + ("\n" + notes if notes else ""))
    (out / "html" / "index.html").write_text(matrix_html(runs, spec, load_numerics(out / "differential")))
    return missing


def check(runs: list[Run], committed: Path) -> list[str]:
    """Differences between fresh verdicts and the committed ones, one line each."""
    diffs = []
    for run in runs:
        f = committed / "verdicts" / f"{run.name}.json"
        if not f.exists():
            diffs.append(f"{run.name}: no committed verdicts in {f}")
            continue
        old = json.loads(f.read_text())["rules"]
        for rid in sorted(set(old) | set(run.outcomes)):
            if old.get(rid) != run.outcomes.get(rid):
                diffs.append(f"{run.name} {rid}: committed {old.get(rid)}, now {run.outcomes.get(rid)}")
    return diffs


def main(argv: list[str]) -> int:
    import argparse

    from colibri.spec import load_spec

    p = argparse.ArgumentParser(prog="colibri-conform compat", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("reports", type=Path, help="folder with NAME.json and NAME.meta.json per server")
    p.add_argument("--out", type=Path, help="write the pages here (e.g. docs/compat)")
    p.add_argument("--explanations", type=Path,
                   help="folder of reviewed explanations, NAME.yaml {rule id: one line} (default: OUT/explanations)")
    p.add_argument("--readme", type=Path, help="also refresh the headline table between the compat markers of this file")
    p.add_argument("--check", type=Path, metavar="COMPAT_DIR",
                   help="compare the reports' verdicts with COMPAT_DIR/verdicts/ and exit 1 on any difference")
    a = p.parse_args(argv)
    runs = load_runs(a.reports)
    if not runs:
        print(f"colibri-conform compat: no NAME.json + NAME.meta.json pairs in {a.reports}", file=sys.stderr)
        return EXIT_UNTESTED
    if a.check:
        diffs = check(runs, a.check)
        for d in diffs:
            print(d)
        print(f"{len(diffs)} verdict(s) differ from {a.check}" if diffs else
              f"verdicts of {', '.join(r.name for r in runs)} match {a.check}")
        return EXIT_FAIL if diffs else EXIT_OK
    if not a.out:
        p.error("give --out or --check")
    carried = carried_runs(a.out, {r.name for r in runs})
    for r in carried:
        print(f"kept from {a.out} (not in {a.reports}): {r.name}, run {r.doc.get('started', '?')}", file=sys.stderr)
    runs = sorted(runs + carried, key=lambda r: f"{r.name}.meta.json")  # the order load_runs gives
    missing = write_compat(runs, a.out, load_explanations(a.explanations or a.out / "explanations"), load_spec())
    if a.readme and not update_readme(a.readme, runs, load_numerics(a.out / "differential"),
                                      load_tool_verdicts(a.out / TOOLS_DIR), load_verdicts(a.out / "load")):
        print(f"colibri-conform compat: {a.readme} has no {README_START} ... {README_END} markers", file=sys.stderr)
    for m in missing:
        print(f"not reviewed: {m}", file=sys.stderr)
    print(f"wrote {a.out}: {len(runs)} servers, {len(missing)} FAIL(s) without a reviewed explanation")
    return EXIT_OK
