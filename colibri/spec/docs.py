"""`colibri spec docs`: spec/ rendered as Markdown a person can read — an index, a page per
topic with a section per rule (level, body, checks, source, vectors as examples), and the
error and family tables."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from .loader import Spec
from .model import Rule, Vector
from .vectors import request_for


def _code(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _expect(v: Vector) -> str:
    e = v.expect
    parts = [str(e["status"])]
    for k in ("type", "code", "param"):
        if k in e:
            parts.append(f"{k} `{e[k]}`")
    for path, val in (e.get("json") or {}).items():
        parts.append(f"`{path}` = `{_code(val)}`")
    for path in e.get("absent", []):
        parts.append(f"no `{path}`")
    for name, val in (e.get("headers") or {}).items():
        parts.append(f"header `{name}`" + ("" if val is None else f": `{val}`"))
    if e.get("checks"):
        parts.append("checks: " + ", ".join(f"`{c}`" for c in e["checks"]))
    return " · ".join(parts)


def _check_row(c: dict[str, Any]) -> str:
    kind = next(k for k in c if k not in ("field", "endpoints", "error", "param", "null", "when", "message"))
    arg = c[kind]
    arg_s = "" if arg is True else _code(arg)
    when = f" when `{_code(c['when'])}`" if c.get("when") else ""
    eps = f" ({', '.join(c['endpoints'])})" if c.get("endpoints") else ""
    return f"| `{c['field']}`{eps} | {kind} {arg_s}{when} | `{c['error']}` |"


def rule_section(spec: Spec, r: Rule) -> str:
    lines = [f"### `{r.id}` — {r.title}", ""]
    meta = [f"**{r.level}**", f"kind: {r.kind}", "modes: " + ", ".join(r.modes),
            "endpoints: " + ", ".join(r.endpoints), "profiles: " + ", ".join(r.profiles)]
    if r.families:
        meta.append("families: " + ", ".join(r.families))
    lines += [" · ".join(meta), "", r.body.strip(), ""]
    if r.checks:
        lines += ["| field | check | error |", "|---|---|---|"] + [_check_row(c) for c in r.checks] + [""]
    lines += ["Source: " + "; ".join(r.source), ""]
    explicit = [v for v in r.vectors if not v.generated]
    generated = [v for v in r.vectors if v.generated]
    if explicit:
        lines.append("Examples:")
        lines.append("")
        for v in explicit:
            lines.append(f"- **{v.name}** — {_vector_request(spec, v)} → {_expect(v)}")
        lines.append("")
    if generated:
        lines.append(f"Plus {len(generated)} boundary vectors generated from the checks.")
        lines.append("")
    return "\n".join(lines)


def _vector_request(spec: Spec, v: Vector) -> str:
    if v.raw_body is not None:
        return f"body bytes `{v.raw_body[:60]!r}`"
    target = f"`{v.method} {v.path}`" if v.path else f"`{v.endpoint}`"
    extra = []
    if v.server:
        extra.append(f"server `{_code(v.server)}`")
    if v.headers:
        extra.append(f"headers `{_code(v.headers)}`")
    body = v.request if v.request is not None else None
    if body is not None and v.method == "POST" and request_for(spec, v) is not None:
        extra.append(f"request `{_code(body)}`")
    return target + (" with " + ", ".join(extra) if extra else "")


def render_docs(spec: Spec, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    levels = Counter(r.level for r in spec.rules)
    index = ["# colibri spec", "",
             f"{len(spec.rules)} rules ({', '.join(f'{n} {lvl}' for lvl, n in sorted(levels.items()))}), "
             f"{len(spec.vectors())} vectors, {len(spec.errors)} error codes, {len(spec.families)} families.", "",
             "Read a rule as: its id (stable, never reused), its level (MUST fails, SHOULD is NON-STRICT, "
             "INFO only reports), the profiles that include it, its reason, and examples that are also "
             "the tests.", "", "## Topics", ""]
    for t in spec.topics:
        index.append(f"- [{t.title}]({t.name}.md) — {len(t.rules)} rules")
        page = [f"# {t.title}", "", t.description.strip(), ""]
        page += ["| id | level | title |", "|---|---|---|"]
        page += [f"| [`{r.id}`](#{r.id.replace('.', '').lower()}) | {r.level} | {r.title} |" for r in t.rules]
        page.append("")
        page += [rule_section(spec, r) for r in t.rules]
        p = out / f"{t.name}.md"
        p.write_text("\n".join(page))
        written.append(p)
    index += ["", "## Tables", "", "- [Error codes](errors.md)", "- [Families](families.md)", ""]
    errs = ["# Error codes", "", "| code | status | OpenAI type | Anthropic type | when |", "|---|---|---|---|---|"]
    errs += [f"| `{e.code}` | {e.status} | {e.type} | {e.anthropic_type} | {e.description} |"
             for e in spec.errors.values()]
    fams = ["# Families", "", "The server's `--family` picks one row.", "",
            "| family | tools | format | forced choice | implicit stops | reasoning | continuation | logprobs |",
            "|---|---|---|---|---|---|---|---|"]
    for f in spec.families.values():
        r = f.row
        fams.append(f"| `{f.id}` | {r['tools']} | {r['tool_format']} | {r['forced_tool_choice']} | "
                    f"{', '.join(f'`{s}`' for s in r['implicit_stops']) or '—'} | {r['reasoning']} | "
                    f"{r['continuation']} | {r['logprobs']} |")
    fams += [""] + [f"## {f.id}: {f.title}\n\n{f.row['description'].strip()}\n" for f in spec.families.values()]
    for name, text in (("index.md", index), ("errors.md", errs), ("families.md", fams)):
        p = out / name
        p.write_text("\n".join(text) + "\n")
        written.append(p)
    return written


def render_html(spec: Spec) -> str:
    """The whole spec as one self-contained HTML page (served at /spec): a table of contents,
    then every rule with its level, reason, checks and examples. Rule bodies are Markdown and
    shown as written."""
    import html

    def esc(s: str) -> str:
        return html.escape(s, quote=False)

    toc, sections = [], []
    for t in spec.topics:
        toc.append(f'<li><a href="#{t.name}">{esc(t.title)}</a> ({len(t.rules)})</li>')
        rules = []
        for r in t.rules:
            checks = "".join(f"<li><code>{esc(_check_row(c))}</code></li>" for c in r.checks)
            examples = "".join(f"<li><b>{esc(v.name)}</b>: {esc(_vector_request(spec, v))} → {esc(_expect(v))}</li>"
                               for v in r.vectors if not v.generated)
            rules.append(
                f'<section id="{esc(r.id)}"><h3><code>{esc(r.id)}</code> {esc(r.title)}</h3>'
                f'<p class="meta"><b>{r.level}</b> · {r.kind} · {", ".join(r.modes)} · {", ".join(r.endpoints)} · '
                f'{", ".join(r.profiles)}</p><div class="body">{esc(r.body.strip())}</div>'
                + (f"<ul class=checks>{checks}</ul>" if checks else "")
                + (f"<p>Examples:</p><ul>{examples}</ul>" if examples else "")
                + f'<p class="src">Source: {esc("; ".join(r.source))}</p></section>')
        sections.append(f'<h2 id="{t.name}">{esc(t.title)}</h2><div class="body">{esc(t.description.strip())}</div>'
                        + "".join(rules))
    errors = "".join(f"<tr><td><code>{e.code}</code></td><td>{e.status}</td><td>{e.type}</td><td>{e.anthropic_type}</td>"
                     f"<td>{esc(e.description)}</td></tr>" for e in spec.errors.values())
    return ("<!doctype html><html><head><meta charset=utf-8><title>colibri spec</title><style>"
            "body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.45}"
            ".body{white-space:pre-wrap}.meta,.src{color:#555;font-size:.9em}section{border-top:1px solid #ddd;"
            "margin-top:1em}td{padding:2px 6px;vertical-align:top}</style></head><body>"
            f"<h1>colibri spec</h1><p>{len(spec.rules)} rules, {len(spec.vectors())} vectors.</p>"
            f"<ul>{''.join(toc)}<li><a href=#errors>Error codes</a></li></ul>" + "".join(sections)
            + f"<h2 id=errors>Error codes</h2><table>{errors}</table></body></html>")
