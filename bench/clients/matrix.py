"""docs/clients/: the client x server matrix from the harness's results (one NAME.json per
server), one table per scenario group, and a page per server with every FAIL: the client's
detail, whose fault it is (docs/clients/faults.yaml, reviewed by hand) and the HTTP exchange
the recording proxy captured."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

GROUPS = {"text": ["text", "stream", "usage", "cap", "multi", "stop"], "tools": ["tools", "tools_stream"],
          "reasoning": ["reasoning"], "chaining": ["chain"]}
GROUP_TITLES = {"text": "Text: one-shot, streamed (= unary at temperature 0), usage, max-tokens cap honoured, multi-turn, stop sequence",
                "tools": "Tool loop: call, tool result, final answer (unary and streamed)",
                "reasoning": "Reasoning on and off", "chaining": "Responses chaining with parking"}
BEGIN, END = "<!-- clients:begin -->", "<!-- clients:end -->"


def load(*folders: Path) -> list[dict[str, Any]]:
    """One result per server, a later folder's replacing an earlier's: the committed results
    (docs/clients/results/) first, then the fresh runs, so a run against one server (what
    `tox -e clients` does on a clean clone) updates its column and keeps the others."""
    by_server: dict[str, dict[str, Any]] = {}
    for folder in folders:
        for f in sorted(folder.glob("*.json")):
            d = json.loads(f.read_text())
            by_server[d["server"]] = d
    order = ["colibri", "colibri-smollm2"]
    return sorted(by_server.values(), key=lambda d: (order.index(d["server"]) if d["server"] in order else 9, d["server"]))


def cell(doc: dict[str, Any], client: str, group: str) -> str:
    rows = doc["clients"].get(client, {}).get("scenarios", {})
    outs = [rows[s]["outcome"] for s in GROUPS[group] if s in rows]
    fails = [s for s in GROUPS[group] if rows.get(s, {}).get("outcome") == "FAIL"]
    ran = [o for o in outs if o != "UNSUPPORTED"]
    if not outs:
        return " "
    if fails:
        anchor = f"{client}-{fails[0]}".lower().replace(" ", "-").replace("(", "").replace(")", "").replace("+", "")
        return f"[FAIL {len(fails)}/{len(ran)}]({doc['server']}.md#{anchor})"
    if not ran:
        return "n/a"
    return "PASS" if len(ran) == len(outs) else f"PASS {len(ran)}/{len(outs)}"


def fault_of(faults: dict[str, Any], server: str, client: str, scenario: str) -> str:
    for key in (f"{server}/{client}/{scenario}", f"{server}/{client}/*", f"{server}/*/{scenario}", f"*/{client}/{scenario}",
                f"{server}/*/*"):
        if key in faults:
            return faults[key]
    return "not reviewed yet"


def shown(body: str, room: int = 3000) -> str:
    """A kept body on the page: its start and its end, where a stream's terminal event is."""
    return body if len(body) <= room else body[:room // 2] + "\n[...]\n" + body[-room // 2:]


def exchanges(r: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for e in r.get("exchanges", []):
        lines += [f"`{e['method']} {e['path']}` -> {e['status']}", "", "```", shown(e["request"]), "```",
                  "", "```", shown(e["response"]), "```", ""]
    return lines


def limits_met(doc: dict[str, Any], faults: dict[str, Any]) -> list[str]:
    """The UNSUPPORTED scenarios where a client met its declared limit on the wire (it made the
    requests, then could not read the answer): what it did, and why, as for a FAIL."""
    lines: list[str] = []
    for client, run in doc["clients"].items():
        for scenario, r in run["scenarios"].items():
            if r["outcome"] != "UNSUPPORTED" or not r.get("exchanges"):
                continue
            why = faults.get(f"{doc['server']}/{client}/{scenario}") or faults.get(f"*/{client}/{scenario}") or ""
            lines += [f"## {client} {scenario} (client limit)", "", *([f"**Why:** {why}", ""] if why else []),
                      f"Client: `{r['detail']}`", "", *exchanges(r)]
    return lines


def server_page(doc: dict[str, Any], faults: dict[str, Any]) -> str:
    s = doc["settings"]
    lines = [f"# Clients against {doc['server']} (model `{doc['model']}`)", "",
             f"Run {doc['date']}, {doc['wall_seconds']} s. Settings derived by colibri-conform's discovery "
             "(each client was configured from these and nothing else):", "", "```json",
             json.dumps({k: s[k] for k in ("pi_compat", "openai_sdk", "pi_responses", "served") if k in s}, indent=1), "```", ""]
    if s.get("why_not"):
        lines += ["Off in the settings, and why (what discovery's probes saw: not served, or taken and not "
                  "delivered, which no setting makes work; the scenarios that need it are UNSUPPORTED):", "",
                  *[f"- `{flag}`: {why}" for flag, why in s["why_not"].items()], ""]
    if doc.get("settings_changed"):
        lines += ["Changed since the run before (a new emission, which this run proves or disproves):", "",
                  *[f"- `{c}`" for c in doc["settings_changed"]], ""]
    for client, run in doc["clients"].items():
        for scenario, r in run["scenarios"].items():
            if r["outcome"] != "FAIL":
                continue
            lines += [f"## {client} {scenario}", "", f"**Fault:** {fault_of(faults, doc['server'], client, scenario)}",
                      "", f"Client: `{r['detail']}`", "", *exchanges(r)]
    if not any(r["outcome"] == "FAIL" for run in doc["clients"].values() for r in run["scenarios"].values()):
        lines += ["No FAIL: every client passed every scenario it ran.", ""]
    lines += limits_met(doc, faults)
    lines += ["## Every scenario", "", "| client | scenario | outcome | detail |", "|---|---|---|---|"]
    for client, run in doc["clients"].items():
        for scenario, r in run["scenarios"].items():
            lines.append(f"| {client} | {scenario} | {r['outcome']} | {r['detail'][:160].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def tables(docs: list[dict[str, Any]]) -> str:
    clients = list(dict.fromkeys(c for d in docs for c in d["clients"]))
    head = "| client | " + " | ".join(f"[{d['server']}]({d['server']}.md)" for d in docs) + " |"
    sep = "|---|" + "---|" * len(docs)
    out: list[str] = []
    for g, title in GROUP_TITLES.items():
        out += [f"### {title}", "", head, sep]
        out += [f"| {c} | " + " | ".join(cell(d, c, g) for d in docs) + " |" for c in clients]
        out.append("")
    return "\n".join(out)


def write(results: Path, folder: Path) -> None:
    docs = load(folder / "results", results)
    faults = yaml.safe_load((folder / "faults.yaml").read_text()) if (folder / "faults.yaml").exists() else {}
    folder.mkdir(parents=True, exist_ok=True)
    readme = folder / "README.md"
    text = readme.read_text() if readme.exists() else f"# Clients x servers\n\n{BEGIN}\n{END}\n"
    pre, rest = text.split(BEGIN, 1)
    versions = {k: v for d in docs for k, v in d.get("versions", {}).items()}
    body = (tables(docs) + "\nClient versions: " + ", ".join(f"`{k}` {v}" for k, v in sorted(versions.items()))
            + "\n\nModels: " + ", ".join(f"{d['server']} `{d['model']}`" for d in docs) + "\n")
    readme.write_text(pre + BEGIN + "\n" + body + END + rest.split(END, 1)[1])
    for d in docs:
        (folder / f"{d['server']}.md").write_text(server_page(d, faults))
        (folder / "results").mkdir(exist_ok=True)
        (folder / "results" / f"{d['server']}.json").write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
