// The Spec page: the rules this server runs on (/spec.json), searchable by id, title and text,
// level, profile and topic; each rule with its body, checks and vectors, and a "try it" button
// that sends a vector's request to this server and judges the answer by what a browser can
// see: the status, the error's type, code and param, and the expected headers. Vectors that
// need server settings, a raw body or a named check say so and run in colibri-conform instead.
// "Try it" may go to another server on this machine instead (its base URL, model and key; it
// must allow this page by CORS): the same request, judged the same way.
import { $, apiHeaders, el } from "./dom.js";

const SHOWN = 60;  // rules drawn at once: refine the search to see others
let rules = null;
let served = null;  // the model the vectors were written for (this server's)

async function load() {
  if (rules) return;
  const resp = await fetch("/spec.json", { headers: apiHeaders({}) });
  if (!resp.ok) {
    $("spec-rules").replaceChildren(el("div", { className: "s1-error error", textContent: `${resp.status}: could not load /spec.json` }));
    return;
  }
  const doc = await resp.json();
  rules = doc.rules;
  served = doc.model;
  for (const [id, values] of [["spec-profile", rules.flatMap((r) => r.profiles)], ["spec-topic", rules.map((r) => r.topic)]]) {
    $(id).append(...[...new Set(values)].sort().map((v) => el("option", { value: v, textContent: v })));
  }
  draw();
}

function matches(rule, words, level, profile, topic) {
  if (level && rule.level !== level) return false;
  if (profile && !rule.profiles.includes(profile)) return false;
  if (topic && rule.topic !== topic) return false;
  const hay = `${rule.id} ${rule.title} ${rule.body}`.toLowerCase();
  return words.every((w) => hay.includes(w));
}

// The verdict on one exchange, by what the vector expects that a page can check.
// Another origin's headers are hidden from the page unless that server exposes them: a header
// the page cannot see is no verdict (INCONCLUSIVE), not a failure.
function judge(expect, status, text, got, crossOrigin = false) {
  const problems = [];
  const unseen = [];
  if (expect.status !== undefined && status !== expect.status) problems.push(`status ${status}, expected ${expect.status}`);
  let doc = null;
  try { doc = JSON.parse(text); } catch { /* not JSON */ }
  const err = doc && typeof doc.error === "object" ? doc.error : null;
  for (const key of ["type", "code", "param"]) {
    if (expect[key] === undefined || (key !== "type" && doc?.type === "error")) continue;  // Anthropic's has no code or param
    const value = err ? err[key] : undefined;
    if (value !== expect[key]) problems.push(`error ${key} ${JSON.stringify(value)}, expected ${JSON.stringify(expect[key])}`);
  }
  for (const [name, want] of Object.entries(expect.headers || {})) {
    const value = got.get(name);
    if (value === null && crossOrigin) { unseen.push(name); continue; }
    if (value === null || (want !== null && value !== want && !value.startsWith(`${want};`))) {
      problems.push(`header ${name} ${JSON.stringify(value)}, expected ${want === null ? "present" : JSON.stringify(want)}`);
    }
  }
  for (const name of expect.absent_headers || []) {
    if (crossOrigin) unseen.push(name);
    else if (got.get(name) !== null) problems.push(`header ${name} present, expected absent`);
  }
  if (problems.length) return `FAIL: ${problems.join("; ")}`;
  return unseen.length ? `INCONCLUSIVE: another origin's headers ${unseen.join(", ")} are hidden from this page` : "PASS";
}

// Where "try it" goes: this server, or the base URL, model and key typed for another.
function destination(v) {
  const base = $("spec-target").value.trim().replace(/\/+$/, "");
  if (!base) return { url: v.path, request: v.request, auth: apiHeaders({}) };
  const model = $("spec-model").value.trim();
  const key = $("spec-key").value;
  let request = v.request;
  if (model && request && typeof request === "object" && "model" in request) request = { ...request, model };
  const path = model && served ? v.path.split(served).join(model) : v.path;
  return { url: base + path, request, auth: key ? { Authorization: `Bearer ${key}` } : {} };
}

async function tryIt(v, out) {
  out.replaceChildren("sending…");
  const to = destination(v);
  const init = { method: v.method, headers: { ...v.headers, ...to.auth } };
  if (to.request !== null) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(to.request);
  }
  try {
    const resp = await fetch(to.url, init);
    const text = await resp.text();
    const verdict = judge(v.expect, resp.status, text, resp.headers, to.url !== v.path);
    out.replaceChildren(el("strong", { className: verdict === "PASS" ? "pass" : verdict.startsWith("FAIL") ? "fail" : "", textContent: verdict }),
      el("pre", { textContent: `${v.method} ${to.url}\n${init.body ?? ""}\n\n→ ${resp.status}\n${text.slice(0, 2000)}` }));
  } catch (e) {
    const hint = to.url === v.path ? "" : " (does that server allow this page's origin by CORS?)";
    out.replaceChildren(el("strong", { className: "fail", textContent: `ERROR: ${e.message || e}${hint}` }));
  }
}

function vectorRow(v) {
  const out = el("div", { className: "spec-out" });
  const button = el("button", { type: "button", textContent: "try it", disabled: Boolean(v.not_here),
    title: v.not_here ? `not from a page: ${v.not_here}` : "send this request to this server" });
  button.addEventListener("click", () => tryIt(v, out));
  const expect = Object.entries(v.expect).map(([k, x]) => `${k}=${JSON.stringify(x)}`).join(" ");
  return el("li", { className: "spec-vector" }, [
    el("code", { textContent: `${v.name}: ${v.method} ${v.path}` }), " ", button,
    el("div", { className: "s1-meta", textContent: `expects ${expect}${v.not_here ? ` (${v.not_here})` : ""}` }), out]);
}

function draw() {
  const words = $("spec-q").value.toLowerCase().split(/\s+/).filter(Boolean);
  const hits = rules.filter((r) => matches(r, words, $("spec-level").value, $("spec-profile").value, $("spec-topic").value));
  $("spec-count").textContent = `${hits.length} of ${rules.length} rules${hits.length > SHOWN ? ` (first ${SHOWN} shown)` : ""}`;
  $("spec-rules").replaceChildren(...hits.slice(0, SHOWN).map((r) => {
    const open = el("details", { className: "spec-rule" }, [
      el("summary", {}, [el("code", { textContent: r.id }), ` ${r.title} `,
        el("span", { className: "s1-meta", textContent: `${r.level} · ${r.profiles.join(", ")} · ${r.topic}` })])]);
    open.addEventListener("toggle", () => {  // filled when opened: 700 vectors are many nodes
      if (!open.open || open.dataset.filled) return;
      open.dataset.filled = "1";
      open.append(el("p", { className: "spec-body", textContent: r.body }),
        ...(r.checks.length ? [el("p", { className: "s1-meta", textContent: `checks: ${r.checks.map((c) => c.name ?? JSON.stringify(c)).join(", ")}` })] : []),
        el("ul", {}, r.vectors.map(vectorRow)));
    });
    return open;
  }));
}

for (const id of ["spec-q", "spec-level", "spec-profile", "spec-topic"]) $(id).addEventListener("input", () => rules && draw());
$("spec-filter").addEventListener("submit", (ev) => ev.preventDefault());
window.addEventListener("hashchange", () => { if (location.hash === "#spec") load(); });
if (location.hash === "#spec") load();
