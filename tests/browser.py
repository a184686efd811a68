"""A headless Chromium tab driven over the DevTools protocol (no extra driver): the dashboard
tests and bench/screenshots.py use it."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request

from live_server import free_port

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


class Page:
    """One tab of a headless Chromium, driven over its DevTools WebSocket."""

    def __init__(self, profile: str):
        import websocket

        port = free_port()
        self.proc = subprocess.Popen([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                                      f"--remote-debugging-port={port}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=1))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        page = next(t for t in tabs if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self.n = 0
        self.console: list[str] = []  # what the browser's console would show as errors
        self.call("Runtime.enable")
        self.call("Log.enable")

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.n:
                return reply.get("result")
            self._note(reply)

    def _note(self, event: dict) -> None:
        """Keep the console's errors: uncaught exceptions, console.error, and browser log
        errors (a CSP refusal, a failed script). HTTP error statuses the page asked for (the
        network's "Failed to load resource" lines) are the page's business, not errors."""
        method, p = event.get("method"), event.get("params") or {}
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            self.console.append("exception: " + str((d.get("exception") or {}).get("description") or d.get("text")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.console.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif method == "Log.entryAdded":
            e = p.get("entry") or {}
            if e.get("level") == "error" and e.get("source") != "network":
                self.console.append(f"{e.get('source')}: {e.get('text')}")

    def value(self, expression: str):
        """The JSON text an expression returns, decoded (None while the page cannot evaluate it yet)."""
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"]
        return json.loads(got["value"]) if "value" in got else None

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
