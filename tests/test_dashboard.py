"""The dashboard in a real browser (headless Chromium, when the machine has one): the page
loads, asks the question of its ?q= link through the streaming API, shows the answer, and
fills the server panel from /health."""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import urllib.parse

import pytest
from live_server import live_server

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_answers_its_question_and_shows_the_scheduler(tmp_path):
    with live_server() as base:
        url = f"{base}/?q={urllib.parse.quote('Repeat exactly: hello world')}"
        dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
                              "--virtual-time-budget=8000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
    messages = [(kind, html.unescape(text)) for kind, text in
                re.findall(r'<div class="msg (\w+)">([^<]*)</div>', dom)]
    assert messages == [("user", "Repeat exactly: hello world"), ("assistant", "hello world")]
    cells = [html.unescape(c) for c in re.findall(r"<td>([^<]*)</td>", dom)]
    panel = dict(zip(cells[::2], cells[1::2], strict=False))
    assert panel["active / capacity"] == "0 / 4"
    assert panel["completed"] == "1"
    assert panel["finish reason"] == "stop"
    assert panel["completion tokens"] == "2"
