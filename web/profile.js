// The Profiling page: where the engine's time went, from GET /profile (same key as /metrics).
// The last turn's phases as one stacked bar with their milliseconds, and the last 30 turns as
// two trends: tokens per second and time to first token. Polled every 2 s while this page is
// shown and the tab visible. Every text from the server is set as text.
import { $, apiHeaders, el, svg } from "./dom.js";

const TREND = 30;
const W = 640;  // the charts' drawing width; they scale to the page
let timer = null;

const ms = (s) => (s === null || s === undefined ? "—" : `${(s * 1000).toFixed(s < 0.01 ? 2 : 1)} ms`);

// The phases, then "other": the rest of the turn's total (hand-offs between the threads, and
// waiting while the engine serves another request), so the bar is the whole turn.
function phaseBar(turn, phases) {
  const spent = phases.reduce((a, p) => a + turn.seconds[p], 0);
  const seconds = { ...turn.seconds, other: Math.max(0, (turn.seconds.total ?? spent) - spent) };
  phases = [...phases, "other"];
  turn = { ...turn, seconds };
  const total = phases.reduce((a, p) => a + seconds[p], 0) || 1;
  let x = 0;
  const rects = phases.map((p) => {
    const w = (turn.seconds[p] / total) * W;
    const r = svg("rect", { x, y: 0, width: Math.max(w, 0), height: 28, class: `ph ph-${p}`, "data-phase": p },
      [svg("title", {}, [`${p}: ${ms(turn.seconds[p])}`])]);
    x += w;
    return r;
  });
  const legend = el("ul", { className: "ph-legend" }, phases.map((p) => el("li", {}, [
    svg("svg", { width: 12, height: 12, "aria-hidden": "true" }, [svg("rect", { width: 12, height: 12, class: `ph ph-${p}` })]),
    ` ${p} ${ms(turn.seconds[p])}`])));
  return [svg("svg", { id: "prof-phases", viewBox: `0 0 ${W} 28`, preserveAspectRatio: "none", role: "img",
    "aria-label": "time by phase of the last turn" }, rects), legend];
}

// A line over the last turns; points without a value (a turn with no token) are skipped.
function trend(id, title, turns, value, unit) {
  const H = 120, pad = 4;
  const ys = turns.map(value);
  const known = ys.filter((y) => y !== null && y !== undefined);
  const top = Math.max(...known, 0) || 1;
  const step = turns.length > 1 ? (W - 2 * pad) / (turns.length - 1) : 0;
  const pts = ys.map((y, i) => (y === null || y === undefined ? null : [pad + i * step, H - pad - (y / top) * (H - 2 * pad)]));
  const line = pts.filter(Boolean).map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const dots = pts.map((p, i) => (p ? svg("circle", { cx: p[0].toFixed(1), cy: p[1].toFixed(1), r: 3, class: "pt" },
    [svg("title", {}, [`${turns[i].request_id}: ${unit(ys[i])}`])]) : null)).filter(Boolean);
  const last = known.length ? unit(known[known.length - 1]) : "—";
  return el("figure", { className: "prof-trend" }, [
    el("figcaption", { textContent: `${title}: last ${last}, highest ${known.length ? unit(top) : "—"} (${known.length} turns)` }),
    svg("svg", { id, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title }, [
      svg("line", { x1: 0, y1: H - pad, x2: W, y2: H - pad, class: "axis" }),
      svg("polyline", { points: line, class: "trend" }), ...dots])]);
}

function draw(doc) {
  const box = $("prof-body");
  const turns = doc.turns;
  $("prof-count").textContent = `${doc.recorded} turns recorded, the last ${turns.length} kept (ring of ${doc.capacity})`;
  if (!turns.length) {
    box.replaceChildren(el("p", { className: "s1-meta", textContent: doc.capacity ? "No turn yet: send a chat message." : "Recording is off (serve --profile-turns 0)." }));
    return;
  }
  const last = turns[turns.length - 1];
  const facts = [["request", last.request_id], ["endpoint", `${last.endpoint}${last.stream ? " (stream)" : ""}`],
    ["outcome", last.outcome], ["total", ms(last.seconds.total)], ["time to first token", ms(last.ttft_seconds)],
    ["decode rate", last.tokens_per_second === null ? "—" : `${last.tokens_per_second} tokens/s`],
    ["tokens: prompt / cached / generated", `${last.tokens.prompt} / ${last.tokens.cached} / ${last.tokens.completion}`],
    ["decode steps (mean batch)", `${last.decode_steps}${last.mean_batch ? ` (${last.mean_batch})` : ""}`]];
  const recent = turns.slice(-TREND);
  box.replaceChildren(
    el("h2", { textContent: "The last turn, by phase" }), ...phaseBar(last, doc.phases),
    el("table", { id: "prof-last" }, [el("tbody", {}, facts.map(([k, v]) => el("tr", {}, [
      el("td", { textContent: k }), el("td", { textContent: String(v) })])))]),
    el("h2", { textContent: `The last ${recent.length} turns` }),
    el("div", { className: "prof-trends" }, [
      trend("prof-rate", "tokens per second", recent, (t) => t.tokens_per_second, (v) => `${Number(v).toFixed(0)} tok/s`),
      trend("prof-ttft", "time to first token", recent, (t) => t.ttft_seconds, ms)]));
}

async function poll() {
  if (document.hidden || location.hash !== "#profile") return;
  try {
    const resp = await fetch("/profile", { headers: apiHeaders({}) });
    if (!resp.ok) {
      const hint = resp.status === 401 ? " (type the API key on the Chat page)" : "";
      $("prof-body").replaceChildren(el("div", { className: "s1-error error", textContent: `${resp.status}: could not read /profile${hint}` }));
      return;
    }
    draw(await resp.json());
  } catch (e) {
    $("prof-body").replaceChildren(el("div", { className: "s1-error error", textContent: `the server did not answer: ${e.message || e}` }));
  }
}

function follow() {
  clearInterval(timer);
  timer = null;
  if (location.hash === "#profile") {
    poll();
    timer = setInterval(poll, 2000);
  }
}
$("prof-refresh").addEventListener("click", poll);
window.addEventListener("hashchange", follow);
document.addEventListener("visibilitychange", poll);
follow();
