(() => {
"use strict";
// What every page module needs: an element by id, a new element with its properties and
// children (text goes in as text, never as HTML), and the request headers with the API key the
// user typed in the chat form, if any.
const $ = (id) => document.getElementById(id);

function el(tag, props = {}, children = []) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

function apiHeaders(extra = { "Content-Type": "application/json" }) {
  const key = $("key").value;
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

// An SVG element with its attributes (presentation attributes, not inline style: the CSP
// refuses those) and children; text goes in as text.
function svg(tag, attrs = {}, children = []) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}
// A load report's figures (colibri-conform load): per endpoint and mode, requests/s, latency,
// time to first token and inter-token latency at p50/p90/p99 and output tokens/s; then two
// plots over the run, latency (p50, p90) and errors (429 refusals beside real errors), one
// point a second. Plain SVG drawn from the report's `load` block; every text is set as text.

const W = 640, H = 160, PAD = 36;
const pct = (p) => (p ? `${p.p50} / ${p.p90} / ${p.p99}` : "·");

function figures(load) {
  const head = ["endpoint", "requests", "200", "429", "errors", "req/s", "latency ms p50/p90/p99",
    "TTFT ms p50/p90/p99", "ITL ms p50/p90/p99", "output tok/s"];
  const rows = Object.entries(load.endpoints || {}).map(([name, f]) => el("tr", {}, [
    name, f.requests, f.ok, f.refused, f.errors, f.requests_per_s, pct(f.latency_ms), pct(f.ttft_ms), pct(f.itl_ms),
    f.output_tokens_per_s].map((x) => el("td", { textContent: String(x ?? "·") }))));
  return el("table", { className: "rep-table load-figures" }, [
    el("thead", {}, [el("tr", {}, head.map((h) => el("th", { textContent: h })))]), el("tbody", {}, rows)]);
}

// One plot: series of [t, value] drawn as polylines (or bars), with the axes' extremes as text.
function plot(title, series, timeline, bars = false) {
  const tmax = Math.max(1, ...timeline.map((r) => r.t));
  const vmax = Math.max(1, ...series.flatMap((s) => timeline.map((r) => r[s.key] ?? 0)));
  const x = (t) => PAD + (t / tmax) * (W - 2 * PAD);
  const y = (v) => H - PAD / 2 - (v / vmax) * (H - PAD);
  const parts = [
    svg("line", { x1: PAD, y1: y(0), x2: W - PAD, y2: y(0), stroke: "#999" }),
    svg("text", { x: 2, y: y(vmax) + 4, "font-size": 10 }, [String(Math.round(vmax))]),
    svg("text", { x: W - PAD, y: H - 2, "font-size": 10 }, [`${tmax} s`]),
  ];
  series.forEach((s, i) => {
    if (bars) {
      const bw = Math.max(1, (W - 2 * PAD) / (timeline.length * series.length) - 1);
      timeline.forEach((r) => parts.push(svg("rect", { x: x(r.t) + i * bw, y: y(r[s.key] ?? 0), width: bw,
        height: y(0) - y(r[s.key] ?? 0), fill: s.color })));
    } else {
      const pts = timeline.filter((r) => r[s.key] != null).map((r) => `${x(r.t)},${y(r[s.key])}`).join(" ");
      parts.push(svg("polyline", { points: pts, fill: "none", stroke: s.color, "stroke-width": 1.5 }));
    }
    parts.push(svg("text", { x: PAD + 8 + i * 110, y: 12, "font-size": 11, fill: s.color }, [s.name]));
  });
  return el("figure", { className: "load-plot" }, [
    el("figcaption", { textContent: title }), svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H }, parts)]);
}

function loadSection(load) {
  const tl = load.timeline || [];
  const g = load.greedy || {};
  const meta = [`${load.users} users`, `${load.ran_seconds} s`, `${load.requests} requests`,
    load.workers ? `${load.workers} workers` : "one process", `${load.disconnects} disconnecting clients`,
    `plan: ${load.plan?.sent} of ${load.plan?.requests} requests sent`,
    g.compared ? `greedy: ${g.diverged} of ${g.compared} differ from alone` : null].filter(Boolean).join(" · ");
  return el("section", { className: "load" }, [
    el("h3", { textContent: "under load" }), el("p", { className: "rep-muted", textContent: meta }),
    el("div", { className: "rep-scroll" }, [figures(load)]),
    plot("latency over time (ms, answers 200, by start second)", [
      { key: "latency_p50_ms", name: "p50", color: "#1565c0" }, { key: "latency_p90_ms", name: "p90", color: "#ef6c00" }], tl),
    plot("errors over time (requests a second)", [
      { key: "errors", name: "errors", color: "#c62828" }, { key: "refused", name: "429 refused", color: "#8e44ad" }], tl, true),
  ]);
}
// The report renderer: one or several colibri-conform --json reports as a browsable page. One
// report: its target, summary, what discovery found, and every rule with its outcome; several:
// the same rules side by side, a column per target (the matrix). A rule opens to its vectors,
// each with its outcome, the check that decided it, expected against actual, and the evidence
// (request and response as sent and received). The dashboard's Reports page and the static
// HTML report (colibri-conform --html, the compat pages) both draw with this module; the
// static one is this file inlined beside the report's JSON. Every text is set as text.

const OUTCOMES = ["PASS", "FAIL", "NON-STRICT", "UNSUPPORTED", "INCONCLUSIVE", "SKIPPED", "ERROR"];
const PROBLEMS = new Set(["FAIL", "ERROR", "NON-STRICT"]);

// Why a document is not a report this page can draw, or null.
function notAReport(doc) {
  if (!doc || typeof doc !== "object") return "not a JSON object";
  if (!Array.isArray(doc.rules)) return "no rules array (is this a colibri-conform --json report?)";
  if (!doc.summary || typeof doc.summary !== "object") return "no summary";
  return null;
}

const outcomeTag = (o) => el("span", { className: `outcome o-${o || "none"}`, textContent: o || "·" });

function pretty(body) {
  if (typeof body !== "string") return JSON.stringify(body, null, 2);
  try { return JSON.stringify(JSON.parse(body), null, 2); } catch { return body; }
}

function exchange(evidence) {
  const parts = [];
  const req = evidence.request;
  if (req) {
    const head = Object.entries(req.headers || {}).map(([k, v]) => `${k}: ${v}`).join("\n");
    parts.push(el("h5", { textContent: "request" }), el("pre", { textContent: `${req.method} ${req.path}\n${head}\n\n${pretty(req.body ?? "")}` }));
  }
  const resp = evidence.response;
  if (resp) {
    const head = Object.entries(resp.headers || {}).map(([k, v]) => `${k}: ${v}`).join("\n");
    const took = typeof resp.elapsed === "number" ? ` (${(resp.elapsed * 1000).toFixed(1)} ms)` : "";
    parts.push(el("h5", { textContent: `response${took}` }), el("pre", { textContent: `${resp.status}\n${head}\n\n${pretty(resp.body ?? "")}` }));
  }
  for (const [k, v] of Object.entries(evidence)) {
    if (k !== "request" && k !== "response") parts.push(el("h5", { textContent: k }), el("pre", { textContent: pretty(v) }));
  }
  return parts;
}

function vectorBlock(v) {
  const verdict = [outcomeTag(v.outcome), el("code", { textContent: ` ${v.name} [${v.mode}]` })];
  const lines = [];
  if (v.check) lines.push(`check: ${v.check}`);
  if (v.expected !== undefined) lines.push(`expected: ${v.expected}`);
  if (v.actual !== undefined) lines.push(`actual: ${v.actual}`);
  if (v.reason) lines.push(`reason: ${v.reason}`);
  const box = el("div", { className: "rep-vector" }, [el("div", {}, verdict)]);
  if (lines.length) box.append(el("pre", { className: "rep-verdict", textContent: lines.join("\n") }));
  if (v.evidence) box.append(el("details", {}, [el("summary", { textContent: "evidence" }), ...exchange(v.evidence)]));
  return box;
}

function ruleDetail(rule, docs) {
  const box = el("div", { className: "rep-detail" });
  docs.forEach((doc, i) => {
    const r = doc.rules.find((x) => x.id === rule.id);
    if (docs.length > 1) box.append(el("h4", {}, [`${doc.target} `, outcomeTag(r?.outcome)]));
    if (!r) { box.append(el("p", { className: "rep-muted", textContent: "not in this report" })); return; }
    if (r.reason) box.append(el("p", { className: "rep-muted", textContent: r.reason }));
    if (!r.vectors.length && !r.reason) box.append(el("p", { className: "rep-muted", textContent: "no vectors ran" }));
    box.append(...r.vectors.map(vectorBlock));
    box.dataset[`doc${i}`] = r.outcome;
  });
  return box;
}

function header(doc) {
  const meta = [`model ${doc.model ?? "?"}`, `${doc.contract ?? "strict"} contract`,
    doc.started ? `started ${doc.started}` : null,
    typeof doc.duration_seconds === "number" ? `${doc.duration_seconds.toFixed(1)} s` : null].filter(Boolean).join(" · ");
  const found = Object.entries(doc.discovery || {}).map(([name, f]) => el("li", {
    textContent: `${name}: ${f.state}${f.state === "served" ? "" : ` (${f.detail})`}` }));
  return el("section", { className: "rep-head" }, [
    el("h2", { textContent: `colibri-conform: ${doc.target}` }), el("p", { className: "rep-muted", textContent: meta }),
    el("p", { className: "rep-summary" }, OUTCOMES.filter((o) => doc.summary[o]).flatMap((o) => [outcomeTag(o), ` ${doc.summary[o]}  `])),
    ...(doc.harness_errors || []).map((e) => el("p", { className: "rep-error", textContent: `harness: ${e}` })),
    ...(found.length ? [el("details", {}, [el("summary", { textContent: "capabilities found before the run" }), el("ul", {}, found)])] : []),
    ...(doc.load ? [loadSection(doc.load)] : []),
  ]);
}

// Draw `docs` into `root`. opts.open: a rule id to open (and scroll to) at once.
function renderReports(root, docs, opts = {}) {
  const rules = new Map();
  for (const doc of docs) for (const r of doc.rules) if (!rules.has(r.id)) rules.set(r.id, r);
  const outcomes = docs.map((d) => new Map(d.rules.map((r) => [r.id, r.outcome])));
  // Rules a run selected: an outcome other than SKIPPED, or vectors skipped one by one. The
  // rest (other profiles, SHOULD rules without --include-should) are listed only on request.
  const selected = new Set(docs.flatMap((d) => d.rules.filter((r) => r.outcome !== "SKIPPED" || r.vectors?.length).map((r) => r.id)));
  const q = el("input", { type: "search", placeholder: "rule id or title", size: 30, className: "rep-q" });
  const which = el("select", { className: "rep-which" }, [
    el("option", { value: "problems", textContent: "FAIL, ERROR, NON-STRICT" }),
    el("option", { value: "selected", textContent: "rules that ran" }), el("option", { value: "", textContent: "every rule" }),
    ...OUTCOMES.map((o) => el("option", { value: o, textContent: o }))]);
  which.value = docs.some((d) => d.rules.some((r) => PROBLEMS.has(r.outcome))) ? "problems" : "selected";
  const count = el("span", { className: "rep-muted" });
  const body = el("tbody");
  const table = el("table", { className: "rep-table" }, [el("thead", {}, [el("tr", {}, [
    el("th", { textContent: "rule" }), el("th", { textContent: "level" }),
    ...docs.map((d) => el("th", { textContent: docs.length > 1 ? d.target : "outcome" })),
    el("th", { textContent: "title" })])]), body]);

  function row(rule) {
    const tr = el("tr", { className: "rep-rule" }, [
      el("td", {}, [el("a", { href: `#${rule.id}`, textContent: rule.id })]), el("td", { textContent: rule.level }),
      ...outcomes.map((m) => el("td", {}, [outcomeTag(m.get(rule.id))])), el("td", { textContent: rule.title })]);
    tr.dataset.rule = rule.id;
    tr.querySelector("a").addEventListener("click", (ev) => { ev.preventDefault(); toggle(tr, rule); });
    return tr;
  }
  function toggle(tr, rule, show) {
    const next = tr.nextElementSibling;
    const open = next && next.classList.contains("rep-open");
    if (open && show !== true) { next.remove(); return; }
    if (!open) tr.after(el("tr", { className: "rep-open" }, [el("td", { colSpan: docs.length + 3 }, [ruleDetail(rule, docs)])]));
  }
  function draw() {
    const words = q.value.toLowerCase().split(/\s+/).filter(Boolean);
    const want = which.value;
    const shown = [...rules.values()].filter((r) => {
      const os = outcomes.map((m) => m.get(r.id));
      if (want === "problems" && !os.some((o) => PROBLEMS.has(o))) return false;
      if (want === "selected" && !selected.has(r.id)) return false;
      if (want && want !== "problems" && want !== "selected" && !os.includes(want)) return false;
      const hay = `${r.id} ${r.title}`.toLowerCase();
      return words.every((w) => hay.includes(w));
    });
    count.textContent = `${shown.length} of ${rules.size} rules`;
    body.replaceChildren(...shown.map(row));
  }
  q.addEventListener("input", draw);
  which.addEventListener("change", draw);
  root.replaceChildren(...docs.map(header), el("p", { className: "rep-filter" }, [q, " ", which, " ", count]),
    el("div", { className: "rep-scroll" }, [table]));
  draw();
  if (opts.open && rules.has(opts.open)) {
    let tr = body.querySelector(`tr[data-rule="${CSS.escape(opts.open)}"]`);
    if (!tr) { which.value = ""; q.value = opts.open; draw(); tr = body.querySelector(`tr[data-rule="${CSS.escape(opts.open)}"]`); }
    toggle(tr, rules.get(opts.open), true);
    tr.scrollIntoView();
  }
}
// The static HTML report's start: the report JSON beside this script in the same file, drawn
// by the dashboard's renderer; the address's #rule-id opens that rule.

renderReports(document.getElementById("report"), JSON.parse(document.getElementById("report-data").textContent),
  { open: decodeURIComponent(location.hash.slice(1)) });
})();
