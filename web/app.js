// A plain OpenAI-API client: streams /v1/chat/completions and keeps the conversation in memory;
// beside it, the server's /health snapshot (refreshed every 2 s) and the last reply's numbers.
const log = document.getElementById("log");

// The theme: the system's unless chosen here (kept in this browser).
const THEMES = ["system", "light", "dark"];
function applyTheme(name) {
  if (name === "system") delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = name;
  document.getElementById("theme").textContent = `◐ ${name}`;
}
applyTheme(localStorage.getItem("colibri-theme") || "system");
document.getElementById("theme").addEventListener("click", () => {
  const now = localStorage.getItem("colibri-theme") || "system";
  const next = THEMES[(THEMES.indexOf(now) + 1) % THEMES.length];
  localStorage.setItem("colibri-theme", next);
  applyTheme(next);
});
const form = document.getElementById("ask");
const messages = [];
let model = "colibri-tiny";

function headers() {
  const key = document.getElementById("key").value;
  return key ? { "Content-Type": "application/json", Authorization: `Bearer ${key}` } : { "Content-Type": "application/json" };
}

function bubble(role, text = "") {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.textContent = text;
  log.appendChild(div);
  div.scrollIntoView();
  return div;
}

function table(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map(([k, v]) => {
    const tr = document.createElement("tr");
    for (const text of [k, v]) {
      const td = document.createElement("td");
      td.textContent = String(text);
      tr.appendChild(td);
    }
    return tr;
  }));
}

async function refresh() {
  try {
    const health = await (await fetch("/health", { headers: headers() })).json();
    document.getElementById("status").textContent =
      `${model}${health.family ? ` · family ${health.family} · ${health.kv_slots} KV slots` : ""}`;
    const s = health.scheduler;
    if (s) {
      table("scheduler", [["active / capacity", `${s.active} / ${s.capacity}`],
        ["queued / max", `${s.queued} / ${s.max_queue}`], ["admitted", s.admitted], ["completed", s.completed],
        ["failed", s.failed], ["rejected (queue full)", s.rejected], ["timed out", s.timed_out],
        ["cancelled", s.cancelled]]);
      const caps = document.getElementById("capabilities");
      caps.replaceChildren(...Object.entries(health.capabilities).map(([k, v]) => {
        const li = document.createElement("li");
        li.textContent = `${k}: ${v}`;
        return li;
      }));
    }
  } catch (e) {
    document.getElementById("status").textContent = `unreachable: ${e}`;
  }
}

async function init() {
  try {
    const models = await fetch("/v1/models", { headers: headers() });
    if (models.ok) model = (await models.json()).data[0].id;
  } catch (e) { /* refresh() reports an unreachable server */ }
  await refresh();
  setInterval(refresh, 2000);
  const q = new URLSearchParams(location.search).get("q");  // /?q=… asks at once: a shareable question
  if (q) await send(q);
}

async function send(text) {
  messages.push({ role: "user", content: text });
  bubble("user", text);
  const think = bubble("reasoning");
  const out = bubble("assistant");
  const body = {
    model, messages, stream: true, stream_options: { include_usage: true },
    max_tokens: Number(document.getElementById("max_tokens").value),
    temperature: Number(document.getElementById("temperature").value),
    enable_thinking: document.getElementById("thinking").checked,
  };
  const started = performance.now();
  const failed = (text) => {  // the error in place of the answer; the turn is not kept
    think.remove();
    out.className = "msg error";
    out.textContent = text;
    messages.pop();
  };
  let resp;
  try {
    resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
  } catch (e) {
    failed(`network error: ${e.message || e}`);
    return;
  }
  if (!resp.ok) {
    const raw = await resp.text();
    let text = `${resp.status}: ${raw.slice(0, 300) || resp.statusText}`;
    try {
      const err = JSON.parse(raw).error;
      text = `${resp.status} ${err.code ?? err.type}: ${err.message}`;
    } catch { /* not JSON: the raw text says what happened */ }
    failed(text);
    return;
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", content = "", first = null, usage = null, finish = null;
  try {
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.usage) usage = chunk.usage;
        for (const choice of chunk.choices) {
          const d = choice.delta;
          if (first === null && (d.content || d.reasoning_content)) first = performance.now();
          if (choice.finish_reason) finish = choice.finish_reason;
          if (d.reasoning_content) think.textContent += d.reasoning_content;
          if (d.content) { content += d.content; out.textContent = content; }
          for (const call of d.tool_calls || []) out.textContent += `\n[tool call ${call.function.name} ${call.function.arguments}]`;
        }
      }
    }
  }
  } catch (e) {  // the connection broke mid-answer: keep what came, say what happened
    failed(`${out.textContent}\n[stream broken: ${e.message || e}]`);
    return;
  }
  if (!think.textContent) think.remove();
  messages.push({ role: "assistant", content });
  const total = (performance.now() - started) / 1000;
  const rows = [["finish reason", finish], ["queue wait", `${resp.headers.get("x-colibri-queue-wait-ms")} ms`],
    ["time to first token", first === null ? "—" : `${Math.round(first - started)} ms`], ["total", `${total.toFixed(3)} s`]];
  if (usage) {
    rows.push(["prompt tokens (cached)", `${usage.prompt_tokens} (${usage.prompt_tokens_details?.cached_tokens ?? 0})`],
      ["completion tokens", usage.completion_tokens],
      ["tokens/s after the first", first === null ? "—" : (usage.completion_tokens / Math.max(1e-3, (performance.now() - first) / 1000)).toFixed(0)]);
  }
  table("reply", rows);
  refresh();
}

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const prompt = document.getElementById("prompt");
  const button = form.querySelector("button[type=submit]");
  const text = prompt.value.trim();
  if (!text || button.disabled) return;  // one request at a time per conversation
  prompt.value = "";
  button.disabled = true;
  send(text).finally(() => { button.disabled = false; });
});
init();
