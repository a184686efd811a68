// A plain OpenAI-API client: streams /v1/chat/completions and keeps the conversation in memory.
const log = document.getElementById("log");
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

async function init() {
  try {
    const health = await (await fetch("/health")).json();
    const models = await fetch("/v1/models", { headers: headers() });
    if (models.ok) model = (await models.json()).data[0].id;
    document.getElementById("status").textContent =
      `${model}${health.family ? ` · family ${health.family} · ${health.kv_slots} KV slots` : ""}`;
  } catch (e) {
    document.getElementById("status").textContent = `unreachable: ${e}`;
  }
}

async function send(text) {
  messages.push({ role: "user", content: text });
  bubble("user", text);
  const think = bubble("reasoning");
  const out = bubble("assistant");
  const body = {
    model, messages, stream: true, max_tokens: 256,
    temperature: Number(document.getElementById("temperature").value),
    enable_thinking: document.getElementById("thinking").checked,
  };
  const resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (!resp.ok) {
    const err = await resp.json();
    out.className = "msg error";
    out.textContent = `${resp.status} ${err.error.code}: ${err.error.message}`;
    messages.pop();
    return;
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", content = "";
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
        for (const choice of chunk.choices) {
          const d = choice.delta;
          if (d.reasoning_content) think.textContent += d.reasoning_content;
          if (d.content) { content += d.content; out.textContent = content; }
          for (const call of d.tool_calls || []) out.textContent += `\n[tool call ${call.function.name} ${call.function.arguments}]`;
        }
      }
    }
  }
  if (!think.textContent) think.remove();
  messages.push({ role: "assistant", content });
}

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const prompt = document.getElementById("prompt");
  const text = prompt.value.trim();
  if (text) { prompt.value = ""; send(text); }
});
init();
