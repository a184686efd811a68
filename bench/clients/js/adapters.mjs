// One adapter per JS client: user/assistant/toolResult build that client's own history
// entries, turn(history, opts) makes one request the client's way and returns
// {text, reasoning, calls: [{id, name, args}], usage: {input, output} | null, history}
// (history: the entries the answer adds), chain() (Responses clients) runs the chained
// conversation. Settings come from colibri-conform's compat profile (see bench/clients/settings.py).
import { complete, stream as piStream, Type } from "@mariozechner/pi-ai";
import OpenAI from "openai";
import { generateText, streamText, jsonSchema, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createAnthropic } from "@ai-sdk/anthropic";
import Anthropic from "@anthropic-ai/sdk";

const KEY = "local";
// The body fields a server needs to answer plainly (openai_sdk.thinking_off, e.g. vLLM's
// chat_template_kwargs.enable_thinking false): every adapter sends them, the client's own way,
// on every turn that does not turn reasoning on. pi-ai's completions provider sends them itself
// when the derived compat says so (thinkingFormat "qwen-chat-template").
// thinking_off_surfaces says on which surfaces the plain answer needs them.
const thinkingOff = (settings, surface = "chat") =>
  ((settings.openai_sdk?.thinking_off_surfaces ?? ["chat", "messages", "responses"]).includes(surface)
    && settings.openai_sdk?.thinking_off) || null;

function piModel(api, { base, model, settings }) {
  const compat = Object.fromEntries(Object.entries(settings.pi_compat).filter(([, v]) => v !== null));
  return {
    id: model, name: model, api, provider: "colibri-bench", baseUrl: `${base}/v1`,
    reasoning: settings.served.reasoning !== false, input: ["text"],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 2048, maxTokens: 256,
    ...(api === "openai-completions" ? { compat } : {}),
  };
}

// What a client cannot do, with the source that says so: the scenario that needs it is
// UNSUPPORTED for that client, with this reason, instead of a FAIL the server cannot fix.
const PI_RESPONSES_LIMITS = {
  cutUsage: "pi-ai 0.73.1's openai-responses provider reads usage and stop reason only from "
    + "response.completed (dist/providers/openai-responses-shared.js, processResponsesStream); a turn "
    + "cut by max_output_tokens ends with response.incomplete (the official contract), so the client "
    + "reports 0 tokens for it",
};

// The terminal event of each Responses stream the client read, seen on a copy of the wire (the
// client's own parsing is untouched): it tells a turn cut by the cap (response.incomplete) from
// a finished one when the client cannot.
const terminals = [];
function watchResponsesStreams() {
  const fetch0 = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const r = await fetch0(input, init);
    if (/\/responses$/.test(String(input?.url ?? input))) {
      terminals.push(r.clone().text().then((t) => (t.match(/"type"\s*:\s*"response\.(completed|incomplete|failed)"/g) || [""])
        .pop().replace(/.*"response\./, "response.").replace(/"$/, "")).catch(() => ""));
    }
    return r;
  };
}

function piAdapter(api) {
  return async (env) => {
    const model = piModel(api, env);
    if (api === "openai-responses") watchResponsesStreams();
    const t = env.S.tool;
    const tools = [{ name: t.name, description: t.description, parameters: Type.Unsafe(t.parameters) }];
    const parking = { parked: null, chained: 0, resent: 0, off: false };
    // Parking needs a server that chains (settings.pi_responses.parking, from the chaining probe):
    // one that refuses previous_response_id (llama-server) is sent full transcripts.
    const parks = api === "openai-responses"
      && (env.settings.pi_responses?.parking ?? env.settings.served.responses_chaining === true);
    // pi's own hook on the request body (onPayload): parking, and the thinking_off fields: its
    // Responses provider has no compat to say them, and its completions provider sends a
    // thinkingFormat's switch only on a model marked as reasoning and reasoning_effort "none"
    // only with a thinkingLevelMap (openai-completions.js), so the hook sends them as derived.
    const off = thinkingOff(env.settings, api === "openai-responses" ? "responses" : "chat");
    const payload = (o) => (params) => {
      const body = off && !o.reasoning ? { ...params, ...off } : params;
      return parks ? park(parking, body) : body;
    };
    async function once(h, o) {
      const opts = { apiKey: KEY, temperature: 0, maxTokens: o.maxTokens, onPayload: payload(o),
                     ...(o.reasoning ? { reasoningEffort: "high" } : {}) };
      const ctx = { messages: h, ...(o.tools ? { tools } : {}) };
      let msg, streamed = "";
      if (o.stream) {
        const s = piStream(model, ctx, opts);
        for await (const ev of s) if (ev.type === "text_delta") streamed += ev.delta;
        msg = await s.result();
      } else msg = await complete(model, ctx, opts);
      if (msg.stopReason === "error") throw new Error(msg.errorMessage);
      const text = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
      if (o.stream && streamed !== text) throw new Error(`text deltas ${JSON.stringify(streamed)} != message ${JSON.stringify(text)}`);
      return {
        text, reasoning: msg.content.filter((b) => b.type === "thinking").map((b) => b.thinking).join(""),
        calls: msg.content.filter((b) => b.type === "toolCall").map((b) => ({ id: b.id, name: b.name, args: b.arguments })),
        usage: { input: msg.usage.input + (msg.usage.cacheRead || 0), output: msg.usage.output }, history: [msg],
        responseId: msg.responseId,
        cut: api === "openai-responses" && (await terminals.at(-1)) === "response.incomplete",
      };
    }
    async function turn(h, o) {
      const full = parking.parked && !parking.off;
      try {
        return await afterTurn(await once(h, o));
      } catch (e) {
        // The parking contract: a parent the server no longer has is resent in full, once.
        if (!full || !/previous_response_not_found|not found/i.test(String(e.message))) throw e;
        parking.resent += 1;
        parking.off = true;
        try { return await afterTurn(await once(h, o)); } finally { parking.off = false; }
      }
    }
    function afterTurn(r) {
      if (parking.pending) parking.parked = { input: parking.pending, id: r.responseId };
      return r;
    }
    const user = (text) => ({ role: "user", content: text, timestamp: Date.now() });
    const assistant = (text) => ({ role: "assistant", content: [{ type: "text", text }], api, provider: "colibri-bench",
      model: model.id, usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0,
      cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }, stopReason: "stop", timestamp: Date.now() });
    const toolResult = (c, text) => ({ role: "toolResult", toolCallId: c.id, toolName: c.name,
      content: [{ type: "text", text }], isError: false, timestamp: Date.now() });
    const a = { can: { stop: false, reasoning: true }, limits: api === "openai-responses" ? PI_RESPONSES_LIMITS : {}, user, assistant, toolResult, turn, alwaysStreams: true,
      surface: api === "openai-responses" ? "responses" : "chat" };
    if (api === "openai-responses") a.chain = () => piChain(a, parking, env.S.chain);
    return a;
  };
}

const OUTPUT_KINDS = (it) => it.type === "reasoning" || it.type === "function_call" || it.role === "assistant";

function park(p, params) {
  // The second seed's parking: every request is stored; a turn whose full input starts with
  // what was sent for the parked response, followed by that response's output, sends only the
  // new items with previous_response_id.
  const full = params.input;
  p.pending = full;
  const out = { ...params, store: true };
  const prev = p.parked;
  if (p.off || !prev || !prev.id || full.length <= prev.input.length) return out;
  if (JSON.stringify(full.slice(0, prev.input.length)) !== JSON.stringify(prev.input)) return out;
  let k = prev.input.length;
  while (k < full.length && OUTPUT_KINDS(full[k])) k += 1;
  if (k === prev.input.length) return out;
  p.chained += 1;
  return { ...out, previous_response_id: prev.id, input: full.slice(k) };
}

async function piChain(a, p, c) {
  p.parked = null; p.chained = 0; p.resent = 0;
  const h = [a.user(c.first)];
  const r1 = await a.turn(h, { maxTokens: c.max_tokens });
  h.push(...r1.history, a.user(c.second));
  const r2 = await a.turn(h, { maxTokens: c.max_tokens });
  if (p.chained !== 1) throw new Error(`turn 2 was not chained (chained ${p.chained})`);
  if (!r2.text.toLowerCase().includes(c.expect)) throw new Error(`chained text ${JSON.stringify(r2.text)}`);
  // A parent the server does not know: the turn is resent in full once.
  p.parked = { ...p.parked, id: "resp_colibri_bench_unknown" };
  h.push(...r2.history, a.user(c.second));
  const r3 = await a.turn(h, { maxTokens: c.max_tokens });
  if (p.resent !== 1) throw new Error(`unknown parent: resent ${p.resent} times`);
  return `chained turn sent only the new items; unknown parent resent in full: ${JSON.stringify(r3.text)}`;
}

function openaiJs({ base, model, settings, S }) {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0 });
  const t = S.tool;
  const tools = [{ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } }];
  const sdk = settings.openai_sdk;
  async function turn(h, o) {
    // The SDK sends a body field it has no parameter for as it is given (its extra body params).
    const body = { model, messages: h, temperature: 0, [sdk.max_tokens_parameter]: o.maxTokens,
      ...(o.tools ? { tools } : {}), ...(o.stop ? { stop: o.stop } : {}),
      ...(o.reasoning ? { reasoning_effort: "high" } : thinkingOff(settings)) };
    if (!o.stream) {
      const r = await client.chat.completions.create(body);
      const m = r.choices[0].message;
      return { text: m.content || "", reasoning: m.reasoning_content || m.reasoning || "",
        calls: (m.tool_calls || []).map((c) => ({ id: c.id, name: c.function.name, args: c.function.arguments })),
        usage: r.usage && { input: r.usage.prompt_tokens, output: r.usage.completion_tokens },
        history: [{ role: "assistant", content: m.content, ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}) }] };
    }
    const s = await client.chat.completions.create({ ...body, stream: true,
      ...(sdk.stream_options ? { stream_options: sdk.stream_options } : {}) });
    let text = "", reasoning = "", usage = null;
    const calls = [];
    for await (const ch of s) {
      if (ch.usage) usage = { input: ch.usage.prompt_tokens, output: ch.usage.completion_tokens };
      const d = ch.choices?.[0]?.delta;
      if (!d) continue;
      text += d.content || "";
      reasoning += d.reasoning_content || d.reasoning || "";
      for (const tc of d.tool_calls || []) {
        const c = (calls[tc.index] ||= { id: "", name: "", args: "" });
        c.id ||= tc.id || ""; c.name += tc.function?.name || ""; c.args += tc.function?.arguments || "";
      }
    }
    const tool_calls = calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args } }));
    return { text, reasoning, calls: calls.filter(Boolean), usage,
      history: [{ role: "assistant", content: text, ...(calls.length ? { tool_calls } : {}) }] };
  }
  return { can: { stop: true, reasoning: settings.pi_compat.supportsReasoningEffort }, turn, surface: "chat",
    user: (text) => ({ role: "user", content: text }), assistant: (text) => ({ role: "assistant", content: text }),
    toolResult: (c, text) => ({ role: "tool", tool_call_id: c.id, content: text }) };
}

function anthropicJs({ base, model, settings, S }) {
  const client = new Anthropic({ baseURL: base, apiKey: KEY, maxRetries: 0 });
  const t = S.tool;
  const tools = [{ name: t.name, description: t.description, input_schema: t.parameters }];
  async function turn(h, o) {
    const body = { model, messages: h, max_tokens: o.maxTokens, temperature: 0,
      ...(o.tools ? { tools } : {}), ...(o.stop ? { stop_sequences: o.stop } : {}),
      ...(o.reasoning ? {} : thinkingOff(settings, "messages")) };  // extra body params, sent as given
    if (o.reasoning) {  // the official minimum budget; no temperature with thinking
      delete body.temperature;
      Object.assign(body, { thinking: { type: "enabled", budget_tokens: 1024 }, max_tokens: 1024 + o.maxTokens });
    }
    const m = o.stream ? await client.messages.stream(body).finalMessage() : await client.messages.create(body);
    const of = (type) => m.content.filter((b) => b.type === type);
    return { text: of("text").map((b) => b.text).join(""), reasoning: of("thinking").map((b) => b.thinking).join(""),
      calls: of("tool_use").map((b) => ({ id: b.id, name: b.name, args: b.input })),
      usage: { input: m.usage.input_tokens, output: m.usage.output_tokens },
      history: [{ role: "assistant", content: m.content }] };
  }
  return { can: { stop: true, reasoning: true }, turn, surface: "messages",
    user: (text) => ({ role: "user", content: text }), assistant: (text) => ({ role: "assistant", content: text }),
    toolResult: (c, text) => ({ role: "user", content: [{ type: "tool_result", tool_use_id: c.id, content: text }] }) };
}

// The Vercel AI SDK over one of its providers: @ai-sdk/openai-compatible (Chat Completions, with
// the derived reasoning switch) or @ai-sdk/anthropic (Messages, with extended thinking).
function vercelAi({ base, model, settings, S }) {
  const provider = createOpenAICompatible({ name: "bench", baseURL: `${base}/v1`, apiKey: KEY,
    includeUsage: settings.pi_compat.supportsUsageInStreaming });
  // The provider sends the fields of its providerOptions it has no option for as body fields.
  const off = thinkingOff(settings);
  const options = (reasoning) => (reasoning ? { bench: { reasoningEffort: "high" } } : off ? { bench: off } : undefined);
  return vercel(provider(model), options, settings.pi_compat.supportsReasoningEffort, "chat", S);
}

function vercelAnthropic({ base, model, settings, S }) {
  // @ai-sdk/anthropic has no extra-body option; its `fetch` setting is "a middleware to intercept
  // requests" (dist/index.d.ts): it adds the thinking_off fields to each request that does not
  // turn thinking on.
  const off = thinkingOff(settings, "messages");
  const fetch = off ? (url, init) => {
    const body = JSON.parse(init.body);
    return globalThis.fetch(url, body.thinking?.type === "enabled" ? init : { ...init, body: JSON.stringify({ ...body, ...off }) });
  } : undefined;
  const provider = createAnthropic({ baseURL: `${base}/v1`, apiKey: KEY, fetch });
  const options = (reasoning) => (reasoning ? { anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } } } : undefined);
  // It sends every message's content as a list of blocks (the official shape), never a string.
  return { ...vercel(provider(model), options, true, "messages", S), sendsBlocks: true };
}

function vercel(languageModel, providerOptions, canReason, surface, S) {
  const t = S.tool;
  const tools = { [t.name]: tool({ description: t.description, inputSchema: jsonSchema(t.parameters) }) };
  async function turn(h, o) {
    const args = { model: languageModel, messages: h, maxOutputTokens: o.maxTokens, maxRetries: 0,
      providerOptions: providerOptions(o.reasoning),
      ...(o.reasoning && surface === "messages" ? {} : { temperature: 0 }),  // Anthropic: none with thinking
      ...(o.tools ? { tools } : {}), ...(o.stop ? { stopSequences: o.stop } : {}) };
    let r;
    if (o.stream) {
      let err = null;
      const s = streamText({ ...args, onError: ({ error }) => { err = error; } });
      r = { text: await s.text, reasoningText: await s.reasoningText, toolCalls: await s.toolCalls,
        usage: await s.usage, response: await s.response };
      if (err) throw err;
    } else r = await generateText(args);
    return { text: r.text, reasoning: r.reasoningText || "",
      calls: r.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, args: c.input })),
      usage: r.usage && r.usage.inputTokens !== undefined ? { input: r.usage.inputTokens, output: r.usage.outputTokens } : null,
      history: r.response.messages };
  }
  return { can: { stop: true, reasoning: canReason }, turn, surface,
    user: (text) => ({ role: "user", content: text }), assistant: (text) => ({ role: "assistant", content: text }),
    toolResult: (c, text) => ({ role: "tool", content: [{ type: "tool-result", toolCallId: c.id, toolName: c.name,
      output: { type: "text", value: text } }] }) };
}

export const ADAPTERS = {
  "pi-ai completions": piAdapter("openai-completions"),
  "pi-ai responses": piAdapter("openai-responses"),
  "openai (JS)": async (env) => openaiJs(env),
  "ai + openai-compatible": async (env) => vercelAi(env),
  "anthropic (JS)": async (env) => anthropicJs(env),
  "ai + anthropic": async (env) => vercelAnthropic(env),
};
