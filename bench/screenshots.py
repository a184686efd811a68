"""Screenshots of the dashboard for a reviewer: each page at 1400 and 375 px wide, light and dark.

    python bench/screenshots.py [--out build/screenshots]

Starts `colibri serve` (the embedded model) on a free port and a headless Chromium (Debian:
`apt-get install chromium`), fills each page the way a user would (the chat asks one question;
System One decides its example; Profiling draws the turns those made; Spec searches and tries
a vector; Reports opens a report colibri-conform just wrote against the same server), and
writes PAGE-WIDTH-THEME.png. The theme comes from the emulated system setting, which the pages
follow unless their theme button chose one.
"""
from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser import BROWSER, Page  # noqa: E402
from live_server import live_server  # noqa: E402

#: page -> (address under the server, what says it can be filled, the script that fills it,
#: what says it is filled)
PAGES = {
    "chat": ("/?q=Repeat%20exactly%3A%20hello%20world", "document.getElementById('prompt').value !== ''",
             "document.querySelector('#ask button[type=submit]').click()",
             "document.querySelectorAll('.msg.assistant').length > 0"),
    "systemone": ("/ui/#systemone", "true", "document.querySelector('#s1-form button[type=submit]').click()",
                  "document.querySelectorAll('.s1-answer').length > 0"),
    "profile": ("/ui/#profile", "true", "", "document.querySelectorAll('#prof-phases rect').length > 0"),
    "spec": ("/ui/#spec", "document.getElementById('spec-count').textContent.includes('rules')",
             "const q = document.getElementById('spec-q'); q.value = 'req.temperature';"
             "q.dispatchEvent(new Event('input')); document.querySelector('.spec-rule').open = true;"
             "setTimeout(() => [...document.querySelectorAll('.spec-vector button')].find(b => !b.disabled).click(), 200)",
             "[...document.querySelectorAll('.spec-out strong')].some(s => s.textContent !== 'sending…')"),
    "reports": ("/ui/#reports", "true", "", "document.querySelectorAll('.rep-rule').length > 0"),
}
WIDTHS = {1400: 900, 375: 812}  # width -> height (a laptop, a phone)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "screenshots")
    args = ap.parse_args()
    if BROWSER is None:
        print("no Chromium on this machine: apt-get install chromium", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with live_server() as base:
        report = args.out / "report.json"  # a short real run for the Reports page
        subprocess.run([sys.executable, "-m", "conformance.cli", "--base-url", base, "--rule", "req.", "--rule", "ops.", "--profile", "strict", "--profile", "operations",
                        "--include-should", "--json", str(report), "-q"], check=False, cwd=ROOT)
        for theme in ("light", "dark"):
            for width, height in WIDTHS.items():
                for name, (path, ready, fill, filled) in PAGES.items():
                    page = Page(str(args.out / ".profile"))
                    try:
                        page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                  deviceScaleFactor=1, mobile=width < 700)
                        page.call("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme",
                                                                           "value": theme}])
                        page.call("Page.navigate", url=base + path)
                        deadline = time.monotonic() + 30
                        while page.value(f"JSON.stringify(document.readyState === 'complete' && {ready})") is not True:
                            if time.monotonic() > deadline:
                                raise TimeoutError(f"{name} never loaded")
                            time.sleep(0.1)
                        if fill:
                            page.call("Runtime.evaluate", expression=fill)
                        if name == "reports":
                            node = page.call("Runtime.evaluate", expression="document.getElementById('rep-file')")
                            page.call("DOM.enable")
                            page.call("DOM.setFileInputFiles", files=[str(report)], objectId=node["result"]["objectId"])
                        while page.value(f"JSON.stringify({filled})") is not True:
                            if time.monotonic() > deadline:
                                raise TimeoutError(f"{name} never filled")
                            time.sleep(0.2)
                        time.sleep(0.3)  # the last layout
                        shot = args.out / f"{name}-{width}-{theme}.png"
                        shot.write_bytes(base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"]))
                        print(shot, file=sys.stderr)
                    finally:
                        page.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
