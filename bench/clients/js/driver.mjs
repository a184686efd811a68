// The scripted scenarios (../scenarios.json) through one JS client library, headless.
//   node driver.mjs CLIENT BASE_URL MODEL SETTINGS_JSON_FILE SCENARIOS_JSON_FILE
// BASE_URL is the recording proxy's; before each scenario the driver names it to the proxy
// (POST /__scenario) so the captured exchanges are filed under it. Prints one JSON line per
// scenario: {client, scenario, outcome: PASS|FAIL|UNSUPPORTED, detail}. The same logic as
// bench/clients/scenarios.py: keep the two in step.
import { readFileSync } from "node:fs";
import { ADAPTERS } from "./adapters.mjs";

const [client, base, model, settingsFile, scenariosFile] = process.argv.slice(2);
const settings = JSON.parse(readFileSync(settingsFile, "utf8"));
const S = JSON.parse(readFileSync(scenariosFile, "utf8"));
const a = await ADAPTERS[client]({ base, model, settings, S });

class Unsupported extends Error {}
const need = (ok, why) => { if (!ok) throw new Unsupported(why); };
const check = (ok, why) => { if (!ok) throw new Error(why); };
const served = (name) => settings.served?.[name] !== false;
// What a scenario needs of the server: scenarios.json's `needs` name the served key (on this
// client's surface) and the reason, the same for both drivers.
const needs = (...names) => {
  for (const name of names) {
    const n = S.needs[name];
    need(served(typeof n.key === "string" ? n.key : n.key[a.surface]), n.why.replaceAll("{surface}", a.surface));
  }
};
// A client's declared limit (its adapter's `limits`, with the source that says so).
const limit = (name) => need(!a.limits?.[name], `client limit: ${a.limits?.[name]}`);
// A turn cut by the cap whose usage this client cannot read (its declared limit, a.limits).
const cutUnread = (r) => need(!(r.cut && a.limits?.cutUsage), `the turn was cut by the cap: ${a.limits?.cutUsage}`);

function toolLoop(stream) {
  return async () => {
    // A client that always streams makes even the unary tool turn a streamed one.
    needs("tools", ...(stream || a.alwaysStreams ? ["tools_stream", "stream"] : []));
    const t = S.tool;
    const h = [a.user(t.prompt)];
    const r = await a.turn(h, { tools: true, stream, maxTokens: t.max_tokens });
    check(r.calls.length > 0, `no tool call; text ${JSON.stringify(r.text)}`);
    const c = r.calls[0];
    check(c.name === t.name, `called ${c.name}`);
    const args = typeof c.args === "string" ? JSON.parse(c.args) : c.args;
    check(args && typeof args === "object", `arguments ${JSON.stringify(c.args)}`);
    h.push(...r.history, a.toolResult(c, t.result));
    const r2 = await a.turn(h, { tools: true, stream, maxTokens: t.max_tokens });
    check(r2.text.trim() || r2.calls.length, "empty final answer");
    return `call ${c.name}(${JSON.stringify(args)}) -> ${JSON.stringify(r2.text.slice(0, 60))}`;
  };
}

// The one-shot text turn, kept: stream and usage compare with it, whatever its text.
let unary = null;
const oneShot = async () => (unary ||= await a.turn([a.user(S.text.prompt)], { maxTokens: S.text.max_tokens }));
const SCENARIOS = {
  text: async () => {
    const r = await oneShot();
    check(r.text.toLowerCase().includes(S.text.expect), `text ${JSON.stringify(r.text)}`);
    return JSON.stringify(r.text);
  },
  stream: async () => {
    needs("stream");
    await oneShot();
    const s = await a.turn([a.user(S.text.prompt)], { maxTokens: S.text.max_tokens, stream: true });
    check(s.text === unary.text, `streamed ${JSON.stringify(s.text)} != unary ${JSON.stringify(unary.text)}`);
    return JSON.stringify(s.text);
  },
  usage: async () => {
    const u = (await oneShot()).usage;
    cutUnread(unary);
    check(u && u.input > 0 && u.output > 0, `usage ${JSON.stringify(u)}`);
    return `${u.input} in / ${u.output} out`;
  },
  cap: async () => {
    // The max-tokens field the settings chose is honoured (a server that ignores it runs on).
    const c = S.cap;
    const r = await a.turn([a.user(c.prompt)], { maxTokens: c.max_tokens });
    cutUnread(r);
    // A zero count is no count (what a client that cannot read the cut turn's usage reports).
    check(r.usage && r.usage.output > 0, `no usage to judge the cap by (${JSON.stringify(r.usage)}); text ${JSON.stringify(r.text.slice(0, 80))}`);
    check(r.usage.output <= c.max_tokens, `${r.usage.output} output tokens under a cap of ${c.max_tokens}`);
    return `${r.usage.output} output tokens (cap ${c.max_tokens})`;
  },
  multi: async () => {
    if (a.untypedHistory) needs("history");  // message items without `type` (the SDK's easy input)
    const m = S.multi;
    const h = m.history.flatMap(([q, ans]) => [a.user(q), a.assistant(ans)]).concat([a.user(m.prompt)]);
    const r = await a.turn(h, { maxTokens: m.max_tokens });
    check(r.text.toLowerCase().includes(m.expect), `text ${JSON.stringify(r.text)}`);
    return JSON.stringify(r.text);
  },
  stop: async () => {
    need(a.can.stop, "the client has no stop option");
    needs("stop");
    const r = await a.turn([a.user(S.stop.prompt)], { maxTokens: S.stop.max_tokens, stop: [S.stop.stop] });
    check(!r.text.includes(S.stop.stop) && r.text.trim(), `text ${JSON.stringify(r.text)}`);
    return JSON.stringify(r.text);
  },
  tools: toolLoop(false),
  tools_stream: toolLoop(true),
  reasoning: async () => {
    need(a.can.reasoning, "the client has no reasoning switch, or shows no reasoning text");
    needs("reasoning");
    const on = await a.turn([a.user(S.reasoning.prompt)], { maxTokens: S.reasoning.max_tokens, reasoning: true });
    const off = await a.turn([a.user(S.reasoning.prompt)], { maxTokens: S.reasoning.max_tokens, reasoning: false });
    check(on.reasoning.trim(), `on: no reasoning; text ${JSON.stringify(on.text)}`);
    check(!off.reasoning.trim(), `off: reasoning ${JSON.stringify(off.reasoning.slice(0, 60))}`);
    return `on: ${on.reasoning.length} chars of reasoning; off: none`;
  },
  chain: async () => {
    need(a.chain, "not a Responses client");
    needs("chaining");
    return await a.chain();
  },
};

for (const name of S.order) {
  let row;
  try {
    await fetch(`${base}/__scenario`, { method: "POST", body: JSON.stringify({ client, scenario: name }) });
    // What every scenario needs: the client's surface; the body fields the server needs to
    // answer plainly (openai_sdk.thinking_off, which every adapter sends on every turn that does
    // not turn reasoning on), for a client that cannot send them; for a client that always
    // streams (pi), well-formed streams, with usage to judge usage and the cap by.
    needs("endpoint");
    if (settings.openai_sdk?.thinking_off
        && (settings.openai_sdk.thinking_off_surfaces ?? [a.surface]).includes(a.surface)) limit("extra_body");
    if (a.sendsBlocks) needs("blocks");
    if (a.alwaysStreams) needs("stream");
    if (a.alwaysStreams && ["usage", "cap"].includes(name)) needs("stream_usage");
    row = { outcome: "PASS", detail: await SCENARIOS[name]() };
  } catch (e) {
    row = e instanceof Unsupported ? { outcome: "UNSUPPORTED", detail: e.message }
      : { outcome: "FAIL", detail: `${e?.constructor?.name}: ${String(e?.message ?? e).slice(0, 400)}` };
  }
  console.log(JSON.stringify({ client, scenario: name, ...row }));
}
