// The chat page: a plain OpenAI-API client. It streams /v1/chat/completions and keeps the
// conversation in memory (export and import as JSON); reasoning is shown apart and folds away,
// tool calls are shown as calls (each with a field for its result, sent with the next turn).
// Beside it: the server's /health snapshot (every 2 s while the tab is visible) and the last
// reply's numbers. Every text from the model or the server is set as text, never as HTML.
import { $, apiHeaders as headers, el } from "./dom.js";

const log = $("log");
const form = $("ask");
let messages = [];
let pending = [];  // the last reply's tool calls: [{call, input}] waiting for their results
let model = "";  // the served model's id, asked of /v1/models (init, or the first send)

// The theme: the system's unless chosen here (kept in this browser).
const THEMES = ["system", "light", "dark"];
function applyTheme(name) {
  if (name === "system") delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = name;
  $("theme").textContent = `◐ ${name}`;
}
applyTheme(localStorage.getItem("colibri-theme") || "system");
$("theme").addEventListener("click", () => {
  const now = localStorage.getItem("colibri-theme") || "system";
  const next = THEMES[(THEMES.indexOf(now) + 1) % THEMES.length];
  localStorage.setItem("colibri-theme", next);
  applyTheme(next);
});

function bubble(role, text = "") {
  const div = el("div", { className: `msg ${role}`, textContent: text });
  log.appendChild(div);
  div.scrollIntoView();
  return div;
}

function table(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map(([k, v]) => el("tr", {}, [el("td", { textContent: String(k) }),
    el("td", { textContent: String(v) })])));
}

async function refresh() {
  if (document.hidden) return;  // no polling while nobody looks
  try {
    const health = await (await fetch("/health", { headers: headers() })).json();
    $("status").textContent = `${model}${health.family ? ` · family ${health.family} · ${health.kv_slots} KV slots` : ""}`;
    const slot = $("slot");
    if (health.kv_slots && slot.options.length !== health.kv_slots + 1) {
      slot.replaceChildren(el("option", { value: "", textContent: "auto" }),
        ...Array.from({ length: health.kv_slots }, (_, i) => el("option", { value: String(i), textContent: String(i) })));
    }
    const s = health.scheduler;
    if (s) {
      table("scheduler", [["active / capacity", `${s.active} / ${s.capacity}`],
        ["queued / max", `${s.queued} / ${s.max_queue}`], ["admitted", s.admitted], ["completed", s.completed],
        ["failed", s.failed], ["rejected (queue full)", s.rejected], ["timed out", s.timed_out],
        ["cancelled", s.cancelled], ["abandoned in the queue", s.abandoned]]);
      $("capabilities").replaceChildren(...Object.entries(health.capabilities).map(([k, v]) =>
        el("li", { textContent: `${k}: ${v}` })));
    }
  } catch (e) {
    $("status").textContent = `unreachable: ${e}`;
  }
}

// ---- one turn -------------------------------------------------------------------------------
function requestBody() {
  const body = {
    model, messages, stream: true, stream_options: { include_usage: true },
    max_tokens: Number($("max_tokens").value), temperature: Number($("temperature").value),
    enable_thinking: $("thinking").checked,
  };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if ($("stop").value) body.stop = $("stop").value;
  if ($("slot").value !== "") body.cache_slot = Number($("slot").value);
  const tools = $("tools").value.trim();
  if (tools) body.tools = JSON.parse(tools);  // a syntax error is reported in place by send()
  return body;
}

function toolResults() {
  // the previous reply's calls get the results typed under them (empty if none was typed)
  const out = pending.map(({ call, input }) => ({ role: "tool", tool_call_id: call.id, content: input.value }));
  for (const { input } of pending) input.disabled = true;
  pending = [];
  return out;
}

async function send(text) {
  const before = messages.length;
  messages.push(...toolResults(), { role: "user", content: text });
  bubble("user", text);
  const reply = bubble("assistant");
  const think = el("details", { className: "reasoning", open: true }, [el("summary", { textContent: "reasoning" })]);
  const thought = el("div");
  think.append(thought);
  const out = el("div", { className: "content" });
  const calls = el("div", { className: "calls" });
  reply.append(think, out, calls);
  think.hidden = true;
  const failed = (message) => {  // the error in place of the answer; the turn is not kept
    reply.className = "msg error";
    reply.replaceChildren(message);
    messages.length = before;
  };
  if (!model) {  // init could not ask (an API key not typed yet, say): ask now
    try {
      const r = await fetch("/v1/models", { headers: headers() });
      if (r.ok) model = (await r.json()).data[0].id;
    } catch { /* the chat request below reports an unreachable server */ }
  }
  const started = performance.now();
  let resp;
  try {
    resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(requestBody()) });
  } catch (e) {
    failed(e instanceof SyntaxError ? `tools: not valid JSON (${e.message})` : `network error: ${e.message || e}`);
    return;
  }
  if (!resp.ok) {
    const raw = await resp.text();
    let message = `${resp.status}: ${raw.slice(0, 300) || resp.statusText}`;
    try {
      const err = JSON.parse(raw).error;
      message = `${resp.status} ${err.code ?? err.type}: ${err.message}`;
    } catch { /* not JSON: the raw text says what happened */ }
    failed(message);
    return;
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", content = "", reasoning = "", first = null, usage = null, finish = null;
  const toolCalls = [];
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
          if (chunk.error) throw new Error(`${chunk.error.code ?? chunk.error.type}: ${chunk.error.message}`);
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices) {
            const d = choice.delta;
            if (first === null && (d.content || d.reasoning_content || d.tool_calls)) first = performance.now();
            if (choice.finish_reason) finish = choice.finish_reason;
            if (d.reasoning_content) { reasoning += d.reasoning_content; thought.textContent = reasoning; think.hidden = false; }
            if (d.content) { content += d.content; out.textContent = content; }
            for (const t of d.tool_calls || []) {  // deltas of one call share its index
              const call = toolCalls[t.index] ??= { id: t.id, type: "function", function: { name: "", arguments: "" } };
              if (t.id) call.id = t.id;
              call.function.name += t.function?.name ?? "";
              call.function.arguments += t.function?.arguments ?? "";
            }
          }
        }
      }
    }
  } catch (e) {  // the connection broke or the server failed mid-answer: say so, keep nothing
    failed(`${content}\n[stream broken: ${e.message || e}]`);
    return;
  }
  if (reasoning) think.open = false; else think.remove();  // folded once the answer is there
  for (const call of toolCalls) {
    const input = el("input", { placeholder: "the tool's result, sent with your next message", size: 40 });
    calls.append(el("div", { className: "tool-call" }, [
      el("code", { textContent: `${call.function.name}(${call.function.arguments})` }), input]));
    pending.push({ call, input });
  }
  const turn = { role: "assistant", content: content || (toolCalls.length ? null : "") };
  if (toolCalls.length) turn.tool_calls = toolCalls;
  if (reasoning) turn.reasoning_content = reasoning;
  messages.push(turn);
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

// ---- the conversation as a file -------------------------------------------------------------
function redraw() {
  log.replaceChildren();
  pending = [];
  for (const m of messages) {
    if (m.role === "tool") continue;
    const b = bubble(m.role === "user" ? "user" : "assistant", m.content ?? "");
    for (const c of m.tool_calls || []) {
      b.append(el("div", { className: "tool-call" }, [el("code", { textContent: `${c.function.name}(${c.function.arguments})` })]));
    }
  }
}

$("export").addEventListener("click", () => {
  const doc = { model, messages, exported: new Date().toISOString() };
  const a = el("a", { href: URL.createObjectURL(new Blob([JSON.stringify(doc, null, 1)], { type: "application/json" })),
    download: "colibri-conversation.json" });
  a.click();
  URL.revokeObjectURL(a.href);
});

$("import").addEventListener("change", async (ev) => {
  const file = ev.target.files[0];
  if (!file) return;
  try {
    const doc = JSON.parse(await file.text());
    if (!Array.isArray(doc.messages)) throw new Error("no messages array");
    messages = doc.messages;
    redraw();
  } catch (e) {
    bubble("error", `import: ${file.name} is not a conversation (${e.message})`);
  }
  ev.target.value = "";
});

$("clear").addEventListener("click", () => { messages = []; redraw(); });

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const prompt = $("prompt");
  const button = form.querySelector("button[type=submit]");
  const text = prompt.value.trim();
  if (!text || button.disabled) return;  // one request at a time per conversation
  prompt.value = "";
  $("prompt-note").hidden = true;
  button.disabled = true;
  send(text).finally(() => { button.disabled = false; });
});

document.addEventListener("visibilitychange", refresh);

async function init() {
  try {
    const models = await fetch("/v1/models", { headers: headers() });
    if (models.ok) model = (await models.json()).data[0].id;
  } catch (e) { /* refresh() reports an unreachable server */ }
  await refresh();
  setInterval(refresh, 2000);
  // /?q=… fills the question in, and the user sends it: any page may link here, and a link
  // must not make this browser send a chat (with the API key it holds) on its own.
  const q = new URLSearchParams(location.search).get("q");
  if (q) {
    const prompt = $("prompt");
    prompt.value = q;
    prompt.focus();
    $("prompt-note").hidden = false;
  }
}
init();
