// The Reports page: colibri-conform --json reports opened from files or an address (this
// server's, or a local one's: the CSP allows connections to 127.0.0.1 and localhost), drawn
// by the same renderer as the static HTML report. Several reports make the matrix.
import { $, el } from "./dom.js";
import { notAReport, renderReports } from "./report.js";

const docs = [];

function problem(text) {
  $("rep-error").hidden = false;
  $("rep-error").textContent = text;
}

function add(doc, from) {
  const why = notAReport(doc);
  if (why) { problem(`${from}: ${why}`); return; }
  docs.push(doc);
  $("rep-loaded").replaceChildren(...docs.map((d) => el("li", { textContent: `${d.target} (${d.model ?? "?"}, ${d.rules.length} rules)` })));
  renderReports($("rep-view"), docs);
}

$("rep-file").addEventListener("change", async (ev) => {
  $("rep-error").hidden = true;
  for (const file of ev.target.files) {
    try { add(JSON.parse(await file.text()), file.name); } catch (e) { problem(`${file.name}: not JSON (${e.message})`); }
  }
  ev.target.value = "";
});

$("rep-url-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("rep-error").hidden = true;
  const url = $("rep-url").value.trim();
  if (!url) return;
  try {
    const resp = await fetch(url);
    if (!resp.ok) { problem(`${url}: ${resp.status}`); return; }
    add(JSON.parse(await resp.text()), url);
  } catch (e) {
    problem(`${url}: ${e.message || e} (another origin must allow this page by CORS, and only 127.0.0.1 and localhost may be reached)`);
  }
});

$("rep-clear").addEventListener("click", () => {
  docs.length = 0;
  $("rep-loaded").replaceChildren();
  $("rep-view").replaceChildren(el("p", { className: "rep-muted", textContent: "No report open." }));
});
