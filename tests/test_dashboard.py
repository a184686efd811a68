"""The dashboard in a real browser (headless Chromium over the DevTools protocol, when the
machine has Chromium): the page loads, asks the question of its ?q= link through the
streaming API, shows the answer, and fills the server panel from /health."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from live_server import free_port, live_server

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

STATE = """JSON.stringify({
  messages: [...document.querySelectorAll(".msg")].map(e => [e.className.slice(4), e.textContent]),
  cells: [...document.querySelectorAll("aside td")].map(e => e.textContent),
})"""


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

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.n:
                return reply.get("result")

    def state(self) -> dict:
        return json.loads(self.call("Runtime.evaluate", expression=STATE, returnByValue=True)["result"]["value"])

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_answers_its_question_and_shows_the_scheduler(tmp_path):
    with live_server() as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/?q={urllib.parse.quote('Repeat exactly: hello world')}")
            deadline = time.monotonic() + 60
            while True:  # until the reply is finished and a later /health refresh counted it
                state = page.state()
                panel = dict(zip(state["cells"][::2], state["cells"][1::2], strict=False))
                if panel.get("finish reason") and panel.get("completed") == "1" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            page.close()
    assert state["messages"] == [["user", "Repeat exactly: hello world"], ["assistant", "hello world"]]
    assert panel["active / capacity"] == "0 / 4"
    assert panel["completed"] == "1"
    assert panel["finish reason"] == "stop"
    assert panel["completion tokens"] == "2"
