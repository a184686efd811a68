"""Report writers: JSON (schemas/conform-report.json), JUnit XML (one testcase per rule ×
vector × mode), Markdown (CI step summaries), static HTML (rules × outcome, each linking to
its evidence); and the compat profile a client author reads."""
from __future__ import annotations

import html
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from colibri.paths import data_dir

from .suite import OUTCOMES, RuleResult
from .usability import SURFACES, THINKING_OFF
from .usability import WHAT as USABILITY

SCHEMA_VERSION = 1


def as_text(value: Any, limit: int = 2000) -> str:
    """A check's expected or actual value as a reader wants it: text as text, bytes decoded
    (a server's body is UTF-8 text nearly always), anything else as its Python form."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _vector_doc(vr: Any, redact: str | None) -> dict[str, Any]:
    r = vr.result
    doc: dict[str, Any] = {"name": vr.vector.name, "mode": vr.mode, "outcome": r.outcome}
    if r.reason:
        doc["reason"] = r.reason
    if r.failure is not None:
        doc["check"] = r.failure.check
        doc["expected"] = as_text(r.failure.expected)
        doc["actual"] = as_text(r.failure.actual)
    if r.exchange is not None and r.outcome != "PASS":
        doc["evidence"] = r.exchange.to_dict(redact)
    return doc


def thinking_format(effort: bool, enable_thinking: bool, thinking_type: bool, off: dict[str, Any] | None = None) -> str | None:
    """pi's `thinkingFormat` (pi-ai 0.73.1, providers/openai-completions.js buildParams) for the
    switches the server accepted. What each value sends: "openai" reasoning_effort (on turns
    only); "qwen" and "zai" both top-level enable_thinking: bool; "qwen-chat-template"
    chat_template_kwargs.enable_thinking; "deepseek" thinking: {type: enabled|disabled}, plus
    reasoning_effort on turns. When the plain answer needs a switch to come back as content
    (`thinking_off`, conformance/usability.py), the format is the one that sends that switch on
    every turn. Otherwise reasoning_effort is the portable knob; enable_thinking comes before
    thinking: {type} because "deepseek" also sends reasoning_effort, which a server without it
    may refuse."""
    if off:
        return next(fmt for fields, fmt in THINKING_OFF if fields == off)
    if effort:
        return "openai"
    if enable_thinking:
        return "qwen"
    return "deepseek" if thinking_type else None


def client_settings(discovery: dict[str, Any]) -> dict[str, Any]:
    """The settings a client needs for the target, from what its probes accepted: pi's `compat`
    flags and the OpenAI SDK's choices. A request built from them (`request_from_settings`)
    must succeed on the target, which is how they are tested."""
    def accepted(name: str) -> bool:
        return (discovery.get(name) or {}).get("state") == "served"

    effort, thinking_type = accepted("reasoning_effort"), accepted("zai_thinking")
    enable_thinking = accepted("reasoning")  # top-level enable_thinking: True brought reasoning back
    off = (discovery.get("thinking_off") or {}).get("value")
    max_field = "max_completion_tokens" if accepted("max_completion_tokens") else "max_tokens"
    return {
        "pi_compat": {
            "supportsDeveloperRole": accepted("developer_role"),
            "supportsStore": accepted("store"),
            "maxTokensField": max_field,
            "supportsUsageInStreaming": accepted("stream_usage"),
            "supportsReasoningEffort": effort,
            "thinkingFormat": thinking_format(effort, enable_thinking, thinking_type, off),
        },
        "openai_sdk": {
            "max_tokens_parameter": max_field,
            "stream_options": {"include_usage": True} if accepted("stream_usage") else None,
            "streaming": accepted("streaming"),
            "logprobs": accepted("logprobs"),
            # tools taken is not enough: a call must come back, and its result be answered
            # (unknown, as in a report from before those probes, is not disproved)
            "tools": tools_usable(discovery) is not False and accepted("tools"),
            "anthropic_messages": accepted("messages"),
            # fields for every request that does not ask for reasoning (vLLM's qwen3 parser),
            # on the surfaces whose plain answer needs them
            "thinking_off": off,
            "thinking_off_surfaces": [surface for surface, probe in SURFACES.items()
                                      if (discovery.get(probe) or {}).get("value") == "thinking_off"
                                      or (surface == "chat" and off)],
        },
    }


def request_from_settings(settings: dict[str, Any], model: str) -> dict[str, Any]:
    """A chat request that uses every setting the block allows, as a client configured by it
    would send."""
    pi = settings["pi_compat"]
    first = {"role": "developer" if pi["supportsDeveloperRole"] else "system", "content": "Answer briefly."}
    body: dict[str, Any] = {"model": model, "messages": [first, {"role": "user", "content": "Repeat exactly: hello"}],
                            pi["maxTokensField"]: 16, "temperature": 0}
    if pi["supportsStore"]:
        body["store"] = False
    if pi["thinkingFormat"] == "openai":
        body["reasoning_effort"] = "low"
    elif pi["thinkingFormat"] == "qwen":
        body["enable_thinking"] = False
    elif pi["thinkingFormat"] == "deepseek":
        body["thinking"] = {"type": "disabled"}
    elif pi["thinkingFormat"] == "qwen-chat-template":
        body["chat_template_kwargs"] = {"enable_thinking": False}
    if pi["supportsUsageInStreaming"]:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def probed(discovery: dict[str, Any], name: str) -> bool | None:
    """A capability as its probe found it: served, not (absent, refused, ignored, or an error
    status), or unknown (no probe, or no answer at all)."""
    f = discovery.get(name)
    if not f or (f["state"] == "error" and not f.get("status")):
        return None
    return f["state"] == "served"


def all_of(*probes: bool | None) -> bool | None:
    """A feature that needs several probes: false when one failed, unknown when one is."""
    return False if False in probes else None if None in probes else True


def tools_usable(discovery: dict[str, Any]) -> bool | None:
    """Tools a client can use: taken, a call comes back, and its result is answered."""
    return all_of(*(probed(discovery, name) for name in ("tools", "tool_call", "tool_result")))


def compat_profile(discovery: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a client author needs to know about the target. Every fact comes from a discovery
    probe, made the same way whatever the selection, so one server gets one profile whichever
    profiles or contract a run chose (the rule verdicts are in the report's rules, not here)."""
    found = discovery or {}
    streaming = found.get("streaming") or {}
    profile = {
        "developer_role": probed(found, "developer_role"),
        "max_completion_tokens": probed(found, "max_completion_tokens"),
        "usage_in_streams": probed(found, "stream_usage"),
        "reasoning_field": (found.get("reasoning") or {}).get("value"),
        "tool_choice": {"none": probed(found, "tool_choice_none"), "required": probed(found, "tool_choice_required"),
                        "forced": probed(found, "tool_choice_forced")},
        "logprobs": probed(found, "logprobs"), "top_logprobs_20": probed(found, "top_logprobs_20"),
        "stop_up_to_4": probed(found, "stop_list"), "anthropic_messages": probed(found, "messages"),
        "error_envelope_openai": probed(found, "error_envelope"),
        "stream_done_sentinel": streaming.get("value") if streaming.get("state") == "served" else probed(found, "streaming"),
    }
    # What a client can use, beyond what is accepted (conformance/usability.py); false names a
    # feature the server takes and does not deliver, which the settings leave out.
    profile["delivers"] = {name: probed(found, name) for name in USABILITY if name != "thinking_off"}
    profile["thinking_off"] = (found.get("thinking_off") or {}).get("value")
    settings = client_settings(found)
    profile["pi_compat"] = settings["pi_compat"]
    profile["openai_sdk"] = settings["openai_sdk"]
    return profile


def to_json(results: list[RuleResult], meta: dict[str, Any], redact: str | None = None) -> dict[str, Any]:
    counts = Counter(rr.outcome for rr in results)
    return {
        "schema_version": SCHEMA_VERSION, "tool": "colibri-conform", **meta,
        "summary": {o: counts.get(o, 0) for o in OUTCOMES},
        "rules": [{"id": rr.rule.id, "title": rr.rule.title, "level": rr.rule.level, "kind": rr.rule.kind,
                   "outcome": rr.outcome, **({"reason": rr.reason} if rr.reason else {}),
                   "vectors": [_vector_doc(v, redact) for v in rr.vectors]} for rr in results],
        "compat": compat_profile(meta.get("discovery")),
    }


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(s: str) -> str:
    """A server's bytes may hold characters XML 1.0 cannot carry at all (NUL, say)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def write_junit(results: list[RuleResult], path: Path) -> None:
    cases = []
    counts: Counter[str] = Counter()
    for rr in results:
        vectors = rr.vectors or []
        if not vectors:
            cases.append(f'<testcase classname={quoteattr(rr.rule.id)} name="rule"><skipped message={quoteattr(rr.reason)}/></testcase>')
            counts["skipped"] += 1
            continue
        for vr in vectors:
            r = vr.result
            name = quoteattr(f"{vr.vector.name} [{vr.mode}]")
            body = ""
            if r.outcome in ("FAIL", "ERROR"):
                tag = "failure" if r.outcome == "FAIL" else "error"
                msg = _xml_text(str(r.failure) if r.failure else r.reason)
                body = f"<{tag} message={quoteattr(msg[:500])}>{escape(msg)}</{tag}>"
                counts["failures" if tag == "failure" else "errors"] += 1
            elif r.outcome != "PASS":
                body = f"<skipped message={quoteattr(_xml_text(r.outcome + ': ' + (r.reason or str(r.failure or ''))))}/>"
                counts["skipped"] += 1
            cases.append(f"<testcase classname={quoteattr(rr.rule.id)} name={name}>{body}</testcase>")
    xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="colibri-conform" tests="{len(cases)}" '
           f'failures="{counts["failures"]}" errors="{counts["errors"]}" skipped="{counts["skipped"]}">\n'
           + "\n".join(cases) + "\n</testsuite>\n")
    path.write_text(xml)


def discovery_lines(doc: dict[str, Any]) -> list[str]:
    """One line per capability probe: what the target serves, as found before the run."""
    return [f"{name}: {f['state']}" + ("" if f["state"] == "served" else f" ({f['detail']})")
            for name, f in (doc.get("discovery") or {}).items()]


def _cell(text: str, limit: int = 300) -> str:
    """Text for one Markdown table cell: one line, pipes escaped, cut at `limit` with an ellipsis."""
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.replace("|", "\\|")


def vector_detail(v: dict[str, Any]) -> str:
    """What decided a vector, in words: the check with expected against actual, else its reason."""
    head = f"{v['name']} [{v['mode']}]: "
    if v.get("check"):
        return head + f"{v['check']}: expected {v.get('expected', '')}, got {v.get('actual', '')}"
    return head + v.get("reason", "")


def markdown(doc: dict[str, Any]) -> str:
    from .phases import phase_line

    s = doc["summary"]
    lines = [f"# colibri-conform: {doc['target']}", "",
             f"Model `{doc.get('model', '')}`, judged by the {doc.get('contract', 'strict')} contract, "
             f"{doc.get('duration_seconds', 0):.1f} s. "
             "Capabilities found before the run: " + "; ".join(discovery_lines(doc)) + ".", "",
             " · ".join(f"**{k}** {v}" for k, v in s.items() if v), "",
             *(f"Harness: {e}" for e in doc.get("harness_errors", [])),
             *(f"- {phase_line(name, d)}" for name, d in (doc.get("phases") or {}).items()), ""]
    rows = []
    for r in doc["rules"]:
        if r["outcome"] in ("PASS", "SKIPPED"):
            continue
        bad = next((v for v in r["vectors"] if v["outcome"] == r["outcome"]), None)
        detail = vector_detail(bad) if bad else r.get("reason", "")
        rows.append(f"| `{r['id']}` | {r['level']} | {r['outcome']} | {_cell(detail)} |")
    ran = sum(v for k, v in s.items() if k != "SKIPPED")
    if rows:
        lines += ["| rule | level | outcome | detail |", "|---|---|---|---|", *rows]
    elif ran:
        lines.append(f"All {ran} rule(s) that ran passed; {s.get('SKIPPED', 0)} skipped (not selected, or not runnable "
                     "here).")
    else:
        lines.append("No rule ran.")
    lines += ["", "## Compat profile", "", "```json", json.dumps(doc["compat"], indent=2), "```", ""]
    return "\n".join(lines)


_IMPORT = re.compile(r'^import \{[^}]*\} from "\./[\w-]+\.js";$')


def _bundle(names: list[str]) -> str:
    """The dashboard's ES modules as one classic script (a page opened from disk may not load
    modules): each file's import lines dropped and its `export` keywords removed, in the order
    given, inside one function scope."""
    web = data_dir("web")
    parts = []
    for name in names:
        for line in (web / name).read_text().splitlines():
            if line.startswith("import "):
                if not _IMPORT.match(line):
                    raise ValueError(f"web/{name}: an import the report bundle cannot inline: {line}")
                continue
            parts.append(line[len("export "):] if line.startswith("export ") else line)
    code = "\n".join(parts)
    if "</script" in code.lower():
        raise ValueError("the report script would close its own <script> element")
    return '(() => {\n"use strict";\n' + code + "\n})();"


PAGE_CSS = "body{font-family:system-ui,sans-serif;margin:1em 2em}\n"


def _assets() -> tuple[str, str]:
    """The renderer as one classic script, and its stylesheet."""
    return _bundle(["dom.js", "load.js", "report.js", "report-static.js"]), PAGE_CSS + (data_dir("web") / "report.css").read_text()


def write_assets(folder: Path) -> None:
    """report.js and report.css in `folder`, for pages written with `assets` pointing there
    (the compat pages share them instead of each carrying a copy)."""
    script, css = _assets()
    (folder / "report.js").write_text(script + "\n")
    (folder / "report.css").write_text(css)


def ran(rule: dict[str, Any]) -> bool:
    """The rule was selected: it has an outcome other than SKIPPED, or vectors (skipped one by one)."""
    return rule["outcome"] != "SKIPPED" or bool(rule.get("vectors"))


def load_line(load: dict[str, Any]) -> str:
    """A load report's figures in one line (the page without JavaScript; the script draws the
    table and the plots)."""
    eps = "; ".join(f"{name}: {f['requests_per_s']} req/s, latency p50/p90/p99 "
                    + "/".join(str((f.get("latency_ms") or {}).get(k, "·")) for k in ("p50", "p90", "p99")) + " ms"
                    for name, f in (load.get("endpoints") or {}).items())
    return (f"under load: {load['users']} users, {load['ran_seconds']} s, {load['requests']} requests"
            + (f", {load['workers']} workers" if load.get("workers") else "") + (f" — {eps}" if eps else ""))


def static_report(docs: list[dict[str, Any]]) -> str:
    """The report as plain HTML, for a reader without JavaScript (the script replaces it with
    the interactive view): each report's head, then a table of the rules that ran, with the
    reason for each one that did not pass. Rules not selected are counted, not listed."""
    from .phases import phase_line

    e = html.escape
    parts = []
    for doc in docs:
        meta = " · ".join(x for x in (f"model {doc.get('model', '?')}", f"{doc.get('contract', 'strict')} contract",
                                      f"started {doc['started']}" if doc.get("started") else "",
                                      f"{doc['duration_seconds']:.1f} s" if isinstance(doc.get("duration_seconds"),
                                                                                       int | float) else "") if x)
        summary = " ".join(f'<span class="outcome o-{e(k)}">{e(k)}</span> {v}' for k, v in doc["summary"].items() if v)
        parts += [f'<section class="rep-head"><h2>colibri-conform: {e(str(doc.get("target", "?")))}</h2>',
                  f'<p class="rep-muted">{e(meta)}</p><p class="rep-summary">{summary}</p>',
                  *(f'<p class="rep-error">harness: {e(x)}</p>' for x in doc.get("harness_errors", [])),
                  *(f'<p class="rep-muted">{e(phase_line(n, d))}</p>' for n, d in (doc.get("phases") or {}).items()),
                  *([f'<p class="rep-muted">{e(load_line(doc["load"]))}</p>'] if doc.get("load") else []),
                  "</section>"]
    by_doc = [{r["id"]: r for r in doc["rules"]} for doc in docs]
    ids = list(dict.fromkeys(r["id"] for doc in docs for r in doc["rules"] if ran(r)))
    hidden = len({r["id"] for doc in docs for r in doc["rules"]} - set(ids))
    heads = "".join(f"<th>{e(str(d.get('target', '?'))) if len(docs) > 1 else 'outcome'}</th>" for d in docs)
    rows = []
    for rid in ids:
        first = next(m[rid] for m in by_doc if rid in m)
        cells, why = [], []
        for doc, m in zip(docs, by_doc, strict=True):
            r = m.get(rid)
            o = r["outcome"] if r else None
            cells.append(f'<td><span class="outcome o-{e(o or "none")}">{e(o or "·")}</span></td>')
            if r and o != "PASS":
                bad = next((v for v in r["vectors"] if v["outcome"] == o), None)
                text = vector_detail(bad) if bad else r.get("reason", "")
                why.append((f"{doc.get('target', '?')}: " if len(docs) > 1 else "") + text)
        detail = "<br>".join(e(w if len(w) <= 600 else w[:599] + "…") for w in why if w)
        rows.append(f'<tr class="rep-rule" id="{e(rid)}"><td>{e(rid)}</td><td>{e(first["level"])}</td>{"".join(cells)}'
                    f"<td>{e(first['title'])}</td><td>{detail}</td></tr>")
    note = (f'<p class="rep-muted">{len(ids)} rules ran; the {hidden} not selected are not listed. With JavaScript '
            "on, this page filters the rules and opens each one's evidence.</p>")
    table = ('<div class="rep-scroll"><table class="rep-table"><thead><tr><th>rule</th><th>level</th>'
             f"{heads}<th>title</th><th>why not PASS</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")
    return "".join(parts) + note + table


def report_page(docs: list[dict[str, Any]], title: str, assets: str | None = None) -> str:
    """An HTML page drawing `docs` with web/report.js, the renderer of the dashboard's Reports
    page: the reports' JSON inline, and the script and its styles inline too (a page that
    stands alone), or from `assets` + report.js/report.css (see write_assets)."""
    data = json.dumps(docs, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\u0021--")
    if assets is None:
        script, css = _assets()
        style, code = f"<style>{css}</style>", f"<script>{script}</script>"
    else:
        href = html.escape(assets, quote=True)
        style, code = f"<link rel=\"stylesheet\" href=\"{href}report.css\">", f"<script src=\"{href}report.js\"></script>"
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title>{style}"
            f"</head><body><div id=\"report\">{static_report(docs)}</div>\n"
            f"<script type=\"application/json\" id=\"report-data\">{data}</script>\n"
            f"{code}</body></html>\n")


_DATA = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>', re.S)


def embedded_reports(page: str) -> list[dict[str, Any]]:
    """The reports a page of `report_page` carries (what its script draws)."""
    m = _DATA.search(page)
    if m is None:
        raise ValueError("no report data in this page")
    docs: list[dict[str, Any]] = json.loads(m.group(1))
    return docs


def write_html(docs: dict[str, Any] | list[dict[str, Any]], out: Path, assets: str | None = None) -> None:
    """out/index.html: the report (or several side by side), #rule-id opening that rule."""
    docs = docs if isinstance(docs, list) else [docs]
    out.mkdir(parents=True, exist_ok=True)
    title = "colibri-conform: " + ", ".join(str(d.get("target", "?")) for d in docs)
    (out / "index.html").write_text(report_page(docs, title, assets))


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
