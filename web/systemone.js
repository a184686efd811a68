// The System One page: a document, typed questions and their allowed answers go to
// POST /v1/systemone; each answer comes back as a bar per allowed answer (its probability),
// the chosen one, the confidence and the entropy that says how unsure the model is. The dock
// switches between this page and the chat. Every text from the user or the server is set as
// text, never parsed as HTML.
import { $, apiHeaders, el } from "./dom.js";

const questions = $("s1-questions");
const answers = $("s1-answers");
const errorBox = $("s1-error");

// Errors the page met (uncaught exceptions, rejected promises): the browser tests read them.
window.colibriErrors = [];
window.addEventListener("error", (e) => window.colibriErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.colibriErrors.push(String(e.reason)));
document.addEventListener("securitypolicyviolation", (e) => window.colibriErrors.push(`CSP refused ${e.violatedDirective}: ${e.blockedURI}`));

// ---- the dock -------------------------------------------------------------------------------
function showPage() {
  const asked = location.hash.slice(1);
  const name = document.getElementById(`page-${asked}`) ? asked : "chat";
  for (const page of document.querySelectorAll(".page")) page.hidden = page.id !== `page-${name}`;
  for (const a of document.querySelectorAll("#dock a")) {
    if (a.dataset.page === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
}
window.addEventListener("hashchange", showPage);
showPage();

// ---- the questions --------------------------------------------------------------------------
const HINTS = {
  choice: "one option per line: key, or key: what it means",
  score: "one level per line, lowest first",
  noul: "optional: true: what yes means / false: what no means",
};

function addQuestion(q = { name: "", type: "choice", instructions: "", options: "" }) {
  const type = el("select", {}, ["choice", "score", "noul"].map((t) => el("option", { value: t, textContent: t })));
  type.value = q.type;
  const options = el("textarea", { rows: 3, value: q.options, placeholder: HINTS[q.type] });
  type.addEventListener("change", () => { options.placeholder = HINTS[type.value]; });
  const row = el("div", { className: "s1-question" }, [
    el("label", {}, ["name ", el("input", { className: "s1-name", value: q.name, size: 10, required: true })]),
    el("label", {}, ["type ", type]),
    el("label", { className: "wide" }, ["question", el("input", { className: "s1-instructions", value: q.instructions })]),
    options,
    el("button", { type: "button", textContent: "remove", onclick: () => row.remove() }),
  ]);
  row.type = type;
  row.options = options;
  questions.append(row);
}

function splitLine(line) {
  const at = line.indexOf(":");
  return at < 0 ? [line.trim(), null] : [line.slice(0, at).trim(), line.slice(at + 1).trim() || null];
}

function requestBody(model) {
  const qs = {};
  for (const row of questions.querySelectorAll(".s1-question")) {
    const name = row.querySelector(".s1-name").value.trim();
    const instructions = row.querySelector(".s1-instructions").value.trim();
    const lines = row.options.value.split("\n").map((l) => l.trim()).filter(Boolean);
    const q = { type: row.type.value };
    if (instructions) q.instructions = instructions;
    if (q.type === "choice") q.criteria = Object.fromEntries(lines.map(splitLine));
    else if (q.type === "score") q.criteria = lines;
    else if (lines.length) q.criteria = Object.fromEntries(lines.map(splitLine));
    qs[name] = q;
  }
  return { model, state: $("s1-state").value, questions: qs };
}

// ---- the answers ----------------------------------------------------------------------------
function bars(answer) {
  // [label, probability] in the order the question gave its answers
  if (answer.type === "noul") return [["true", answer.noul], ["false", 1 - answer.noul]];
  if (answer.type === "score") {
    return Object.entries(answer.probabilities).map(([level, p]) => [`${level} ${answer.legend[level] ?? ""}`.trim(), p]);
  }
  return Object.entries(answer.probabilities);
}

function chosenIndex(rows) {
  let best = 0;
  rows.forEach(([, p], i) => { if (p > rows[best][1]) best = i; });  // ties: the first
  return best;
}

function describe(answer) {
  const h = answer.entropy_normalized;
  const reading = h === undefined ? "" : h < 0.3 ? "sure" : h > 0.7 ? "unsure" : "leaning";
  const parts = [];
  if (answer.type === "choice") parts.push(`choice: ${answer.choice}`);
  if (answer.type === "score") parts.push(`score ${answer.score.toFixed(2)} (expected level)`);
  if (answer.type === "noul") parts.push(`P(true) ${answer.noul.toFixed(3)}`);
  if (answer.confidence !== undefined) parts.push(`confidence ${answer.confidence.toFixed(3)}`);
  if (answer.entropy !== undefined) parts.push(`entropy ${answer.entropy.toFixed(3)} nats, ${h.toFixed(3)} of the maximum (${reading})`);
  return parts.join(" · ");
}

function showAnswers(doc) {
  answers.replaceChildren(...Object.entries(doc.answers).map(([name, answer]) => {
    const rows = bars(answer);
    const best = chosenIndex(rows);
    return el("div", { className: "s1-answer" }, [
      el("h3", { textContent: name }),
      ...rows.map(([label, p], i) => {
        const bar = el("div", { className: `s1-bar${i === best ? " chosen" : ""}` }, [
          el("span", { textContent: label }),
          el("div", { className: "track" }, [el("div", { className: "fill" })]),
          el("span", { textContent: `${(100 * p).toFixed(1)}%` }),
        ]);
        bar.dataset.p = String(p);
        bar.querySelector(".fill").style.width = `${(100 * p).toFixed(2)}%`;
        return bar;
      }),
      el("div", { className: "s1-meta", textContent: describe(answer) }),
    ]);
  }));
  const u = doc.usage;
  answers.append(el("p", { className: "s1-meta",
    textContent: `${u.input_tokens} prompt tokens read, ${u.input_tokens_details?.cached_tokens ?? 0} of them from the KV cache; nothing generated` }));
}

async function errorText(resp) {
  const raw = await resp.text();
  try {
    const err = JSON.parse(raw).error;
    return `${resp.status} ${err.code ?? err.type}: ${err.message}${err.param ? ` (${err.param})` : ""}`;
  } catch {
    return `${resp.status}: ${raw.slice(0, 300) || resp.statusText}`;
  }
}

function curl(body, key) {
  const quote = (s) => `'${s.replaceAll("'", "'\\''")}'`;
  return [`curl ${location.origin}/v1/systemone`, "-H 'Content-Type: application/json'",
    // double quotes, so that the shell expands the variable (the key itself is never shown)
    ...(key ? ['-H "Authorization: Bearer $COLIBRI_API_KEY"'] : []), `-d ${quote(JSON.stringify(body))}`].join(" \\\n  ");
}

async function decide(ev) {
  ev.preventDefault();
  const button = ev.submitter || $("s1-form").querySelector("button[type=submit]");
  const key = $("key").value;
  const headers = apiHeaders();
  button.disabled = true;  // one request at a time
  errorBox.hidden = true;
  try {
    const models = await fetch("/v1/models", { headers });
    if (!models.ok) throw new Error(await errorText(models));
    const model = (await models.json()).data[0].id;
    const body = requestBody(model);
    $("s1-curl").textContent = curl(body, key);
    const resp = await fetch("/v1/systemone", { method: "POST", headers, body: JSON.stringify(body) });
    if (!resp.ok) throw new Error(await errorText(resp));
    showAnswers(await resp.json());
  } catch (e) {
    errorBox.textContent = e.message || String(e);
    errorBox.hidden = false;
  } finally {
    button.disabled = false;
  }
}

$("s1-add").addEventListener("click", () => addQuestion());
$("s1-form").addEventListener("submit", decide);
addQuestion({ name: "problem", type: "choice", instructions: "What is the main problem?",
  options: "late delivery\ndamage: the goods arrived broken\nbilling" });
addQuestion({ name: "mood", type: "score", instructions: "How upset is the customer?", options: "calm\nannoyed\nangry" });
addQuestion({ name: "refund", type: "noul", instructions: "Does the customer ask for money back?", options: "" });
