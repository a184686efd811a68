"""The scripted scenarios (../scenarios.json) through one Python client library, headless.

    python scenarios.py CLIENT BASE_URL MODEL SETTINGS_JSON_FILE SCENARIOS_JSON_FILE

Runs in the clients' own venv (~/.cache/colibri-clients/venv), not the project's: it needs only
the client libraries. BASE_URL is the recording proxy's; before each scenario the driver names
it to the proxy (POST /__scenario) so the captured exchanges are filed under it. Prints one JSON
line per scenario: {client, scenario, outcome: PASS|FAIL|UNSUPPORTED, detail}. The same logic
as js/driver.mjs: keep the two in step."""
from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

import adapters
import cli_adapters
from adapters import Unsupported

ADAPTERS = {**adapters.ADAPTERS, **cli_adapters.ADAPTERS}


def need(ok: Any, why: str) -> None:
    if not ok:
        raise Unsupported(why)


def check(ok: Any, why: str) -> None:
    if not ok:
        raise AssertionError(why)


class Scenarios:
    def __init__(self, a: Any, settings: dict[str, Any], s: dict[str, Any]):
        self.a, self.settings, self.S = a, settings, s
        self.surface = getattr(a, "surface", "chat")
        self.unary: dict[str, Any] | None = None

    def served(self, name: str) -> bool:
        return self.settings.get("served", {}).get(name) is not False

    def needs(self, *names: str) -> None:
        """What the scenario needs of the server: scenarios.json's `needs` name the served key
        (on this client's surface) and the reason, the same for both drivers."""
        for name in names:
            n = self.S["needs"][name]
            key = n["key"][self.surface] if isinstance(n["key"], dict) else n["key"]
            need(self.served(key), n["why"].format(surface=self.surface))

    def limit(self, name: str) -> None:
        """A client's declared limit (its adapter's `limits`, with the source that says so)."""
        why = getattr(self.a, "limits", {}).get(name)
        need(not why, f"client limit: {why}")

    def run(self, name: str) -> str:
        """One scenario, after what every scenario needs: the client's surface; the request
        fields a server needs to answer plainly (openai_sdk.thinking_off, which every adapter
        sends on every turn that does not turn reasoning on), for a client that cannot send
        them; and for a client that always streams, well-formed streams (with usage, to judge
        usage and the cap by)."""
        self.needs("endpoint")
        if adapters.thinking_off(self.settings, getattr(self.a, "surface", "chat")):
            self.limit("extra_body")
        if getattr(self.a, "sends_blocks", False):  # Anthropic content as a list of blocks, always
            self.needs("blocks")
        if getattr(self.a, "always_streams", False):
            self.needs("stream")
            if name in ("usage", "cap"):
                self.needs("stream_usage")
        return str(getattr(self, name)())

    def _unary(self) -> dict[str, Any]:
        """The one-shot text turn, kept: stream and usage compare with it, whatever its text."""
        if self.unary is None:
            t = self.S["text"]
            self.unary = self.a.turn([self.a.user(t["prompt"])], max_tokens=t["max_tokens"])
        return self.unary

    def text(self) -> str:
        r = self._unary()
        check(self.S["text"]["expect"] in r["text"].lower(), f"text {r['text']!r}")
        return repr(r["text"])

    def stream(self) -> str:
        self.needs("stream")
        unary = self._unary()
        t = self.S["text"]
        s = self.a.turn([self.a.user(t["prompt"])], max_tokens=t["max_tokens"], stream=True)
        check(s["text"] == unary["text"], f"streamed {s['text']!r} != unary {unary['text']!r}")
        return repr(s["text"])

    def usage(self) -> str:
        self.limit("usage")
        u = self._unary()["usage"]
        check(u and u["input"] > 0 and u["output"] > 0, f"usage {u}")
        return f"{u['input']} in / {u['output']} out"

    def cap(self) -> str:
        """The max-tokens field the settings chose is honoured (a server that ignores it runs on)."""
        self.limit("usage")  # the cap is judged by the usage reported
        c = self.S["cap"]
        r = self.a.turn([self.a.user(c["prompt"])], max_tokens=c["max_tokens"])
        u = r["usage"]
        check(u and u["output"] > 0, f"no usage to judge the cap by ({u}); text {r['text'][:80]!r}")  # 0 is no count
        check(u["output"] <= c["max_tokens"], f"{u['output']} output tokens under a cap of {c['max_tokens']}")
        return f"{u['output']} output tokens (cap {c['max_tokens']})"

    def multi(self) -> str:
        if getattr(self.a, "untyped_history", False):  # message items without `type` (the SDK's easy input)
            self.needs("history")
        m = self.S["multi"]
        h = [e for q, ans in m["history"] for e in (self.a.user(q), self.a.assistant(ans))] + [self.a.user(m["prompt"])]
        r = self.a.turn(h, max_tokens=m["max_tokens"])
        check(m["expect"] in r["text"].lower(), f"text {r['text']!r}")
        return repr(r["text"])

    def stop(self) -> str:
        need(self.a.can.get("stop"), "the client has no stop option")
        self.needs("stop")
        st = self.S["stop"]
        r = self.a.turn([self.a.user(st["prompt"])], max_tokens=st["max_tokens"], stop=[st["stop"]])
        check(st["stop"] not in r["text"] and r["text"].strip(), f"text {r['text']!r}")
        return repr(r["text"])

    def _tools(self, stream: bool) -> str:
        self.limit("tools")
        # A client that always streams makes even the unary tool turn a streamed one.
        streamed = stream or getattr(self.a, "always_streams", False)
        self.needs("tools", *(["tools_stream", "stream"] if streamed else []))
        if hasattr(self.a, "tool_loop"):  # agent frameworks run the loop themselves
            return self.a.tool_loop(stream)
        t = self.S["tool"]
        h = [self.a.user(t["prompt"])]
        r = self.a.turn(h, tools=True, stream=stream, max_tokens=t["max_tokens"])
        check(r["calls"], f"no tool call; text {r['text']!r}")
        c = r["calls"][0]
        check(c["name"] == t["name"], f"called {c['name']}")
        args = json.loads(c["args"]) if isinstance(c["args"], str) else c["args"]
        check(isinstance(args, dict), f"arguments {c['args']!r}")
        h += r["history"] + [self.a.tool_result(c, t["result"])]
        r2 = self.a.turn(h, tools=True, stream=stream, max_tokens=t["max_tokens"])
        check(r2["text"].strip() or r2["calls"], "empty final answer")
        return f"call {c['name']}({json.dumps(args)}) -> {r2['text'][:60]!r}"

    def tools(self) -> str:
        return self._tools(False)

    def tools_stream(self) -> str:
        return self._tools(True)

    def reasoning(self) -> str:
        need(self.a.can.get("reasoning"), "the client has no reasoning switch, or shows no reasoning text")
        self.needs("reasoning")
        rs = self.S["reasoning"]
        on = self.a.turn([self.a.user(rs["prompt"])], max_tokens=rs["max_tokens"], reasoning=True)
        off = self.a.turn([self.a.user(rs["prompt"])], max_tokens=rs["max_tokens"], reasoning=False)
        check(on["reasoning"].strip(), f"on: no reasoning; text {on['text']!r}")
        check(not off["reasoning"].strip(), f"off: reasoning {off['reasoning'][:60]!r}")
        return f"on: {len(on['reasoning'])} chars of reasoning; off: none"

    def chain(self) -> str:
        need(hasattr(self.a, "chain"), "not a Responses client")
        self.needs("chaining")
        return self.a.chain()


def main(argv: list[str]) -> int:
    client, base, model, settings_file, scenarios_file = argv
    settings = json.loads(open(settings_file).read())
    s = json.loads(open(scenarios_file).read())
    runner = Scenarios(ADAPTERS[client](base=base, model=model, settings=settings, S=s), settings, s)
    for name in s["order"]:
        urllib.request.urlopen(urllib.request.Request(
            f"{base}/__scenario", data=json.dumps({"client": client, "scenario": name}).encode(), method="POST"))
        try:
            row = {"outcome": "PASS", "detail": runner.run(name)}
        except Unsupported as e:
            row = {"outcome": "UNSUPPORTED", "detail": str(e)}
        except Exception as e:  # noqa: BLE001 - a client's exception is the FAIL's evidence
            row = {"outcome": "FAIL", "detail": f"{type(e).__name__}: {str(e)[:400]}"}
        print(json.dumps({"client": client, "scenario": name, **row}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
