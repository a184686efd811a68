// A load report's figures (colibri-conform load): per endpoint and mode, requests/s, latency,
// time to first token and inter-token latency at p50/p90/p99 and output tokens/s; then two
// plots over the run, latency (p50, p90) and errors (429 refusals beside real errors), one
// point a second. Plain SVG drawn from the report's `load` block; every text is set as text.
import { el, svg } from "./dom.js";

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

export function loadSection(load) {
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
