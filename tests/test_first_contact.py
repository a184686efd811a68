"""A new user's first contact, from the README: the commands it shows, run in order on the
installed package, each answer checked against the output the README prints (issue 50).

`tox -e first-contact` runs this in a fresh venv holding the wheel *without* the test extra
(only pytest and the two SDKs beside it), so a dependency that only the test extra brings in
breaks it as it would break a user. The README is parsed, not copied: change an example or its
shown output there and this test checks the new one. Elsewhere (the ordinary test run, which
has the test extra) it is skipped; COLI_FIRST_CONTACT=dev runs it in any venv.

How the README's outputs are read: a `# -> ` line after a command is its answer, trimmed.
JSON shown is a subset of the real answer (keys left out are not checked; a list shows its
first items; a string ending in `...` gives the start of the real one; a number is the real one
to the digits shown, give or take one in the last); a leading three-digit number is the HTTP status (else 200). For a
stream, each shown line is found in order among the stream's lines, `...` marking a gap.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from live_server import stop_group

MODE = os.environ.get("COLI_FIRST_CONTACT", "")

README = Path(__file__).resolve().parent.parent / "README.md"
DOC_ADDRESS = "http://127.0.0.1:8000"
BIN = Path(sys.executable).parent  # the venv under test: its console scripts are the user's commands


# ---- reading the README ---------------------------------------------------------------------

@dataclass
class Example:
    command: str  # one command, continuation lines joined
    shown: list[str] = field(default_factory=list)  # its `# -> ` lines


def code_blocks(text: str) -> list[tuple[str, str, str]]:
    """(section heading, info string, body) of every fenced block."""
    out, heading = [], ""
    for m in re.finditer(r"^(#{1,3} [^\n]*)$|^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        if m.group(1):
            heading = m.group(1).lstrip("# ").strip()
        else:
            out.append((heading, m.group(2), m.group(3)))
    return out


def examples(body: str, program: str) -> list[Example]:
    """The commands of one block that start with `program`, each with its shown output."""
    out: list[Example] = []
    pending = ""
    for line in body.splitlines():
        if pending:
            pending += " " + line.strip()
        elif line.startswith(program + " ") or line == program:
            pending = line.strip()
        elif line.startswith("# -> ") and out:
            out[-1].shown.append(line[5:])
            continue
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
        else:
            out.append(Example(pending))
            pending = ""
    return out


def block_after(text: str, heading: str, lead: str) -> str:
    """The first block of a section whose body starts with `lead`."""
    for head, _, body in code_blocks(text):
        if head == heading and body.startswith(lead):
            return body
    raise AssertionError(f"README: no block starting {lead!r} under '{heading}'")


# ---- matching shown output -------------------------------------------------------------------

def matches(shown: Any, real: Any, where: str = "$") -> None:
    """Raise AssertionError naming the first place where `real` does not hold what `shown` says."""
    if isinstance(shown, dict):
        assert isinstance(real, dict), f"{where}: expected an object, got {real!r}"
        for key, value in shown.items():
            assert key in real, f"{where}: no key {key!r} in {sorted(real)}"
            matches(value, real[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(real, list) and len(real) >= len(shown), f"{where}: expected {len(shown)}+ items, got {real!r}"
        for i, value in enumerate(shown):
            matches(value, real[i], f"{where}[{i}]")
    elif isinstance(shown, str) and shown.endswith("..."):
        assert isinstance(real, str) and real.startswith(shown[:-3]), f"{where}: expected {shown!r}, got {real!r}"
    elif isinstance(shown, float):
        # to the digits shown, give or take one in the last (a value near a rounding boundary
        # must not flip the check across machines)
        digits = len(repr(shown).split(".")[1]) if "e" not in repr(shown) else 12
        assert isinstance(real, int | float) and abs(real - shown) <= 10 ** -digits * 1.0001, \
            f"{where}: expected {shown}, got {real}"
    else:
        assert shown == real and type(shown) is type(real), f"{where}: expected {shown!r}, got {real!r}"


def check_answer(shown: list[str], status: int, body: bytes, stream: bool) -> None:
    assert shown, "README: a command without its shown output"
    first = re.match(r"(\d{3}) (.*)", shown[0])
    want_status = int(first.group(1)) if first else 200
    assert status == want_status, f"status {status}, README shows {want_status}: {body[:500]!r}"
    if not stream:
        matches(json.loads(" ".join([first.group(2) if first else shown[0], *shown[1:]])), json.loads(body))
        return
    lines = [ln for ln in body.decode().splitlines() if ln.strip()]
    at = 0
    for want in (s for s in shown if s != "..."):
        while at < len(lines) and not _line_matches(want, lines[at]):
            at += 1
        assert at < len(lines), f"stream line {want!r} not found in order in:\n" + "\n".join(lines)
        at += 1


def _line_matches(want: str, real: str) -> bool:
    if want.startswith("data: {") and real.startswith("data: {"):
        try:
            matches(json.loads(want[6:]), json.loads(real[6:]))
        except AssertionError:
            return False
        return True
    return want == real


# ---- running the commands --------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(cwd: Path) -> Iterator[tuple[str, list[str]]]:
    """`colibri serve` as the README starts it (plus a free port); yields its address and the
    start-up lines it printed."""
    port = free_port()
    proc = subprocess.Popen([str(BIN / "colibri"), "serve", "--port", str(port)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    lines: list[str] = []
    # a thread reads everything the server prints: the start-up lines, and later whatever it
    # logs, so a full pipe never blocks it mid-run
    threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not any(ln.startswith("colibri: serving ") for ln in list(lines)):
            assert proc.poll() is None, "colibri serve exited:\n" + "".join(lines)
            assert time.monotonic() < deadline, "colibri serve did not start:\n" + "".join(lines)
            time.sleep(0.1)
        startup = [ln.rstrip("\n") for ln in list(lines)]
        yield base, startup
    finally:
        stop_group(proc, timeout=30)


def curl(command: str, base: str) -> tuple[int, bytes, bool]:
    """Do what the README's curl line does (the flags it uses: -N, -H, -d), without curl."""
    argv = shlex.split(command.replace(DOC_ADDRESS, base))
    assert argv[0] == "curl"
    url, data, headers, stream = None, None, {}, False
    args = iter(argv[1:])
    for a in args:
        if a == "-N":
            stream = True
        elif a == "-H":
            k, v = next(args).split(":", 1)
            headers[k.strip()] = v.strip()
        elif a == "-d":
            data = next(args).encode()
        elif a.startswith("http"):
            url = a
        else:
            raise AssertionError(f"README curl flag {a!r} not understood by this test")
    assert url is not None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read(), stream
    except urllib.error.HTTPError as e:
        return e.code, e.read(), stream


def run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def extra_packages_installed() -> list[str]:
    """The packages of colibri's test extra that the default install lacks, yet are here; pytest
    runs this, and the README's SDK snippets need the two SDKs, so those three don't count."""
    def name(req: str) -> str:
        return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower().replace("_", "-")

    reqs = importlib.metadata.requires("colibri") or []
    default = {name(r) for r in reqs if "extra ==" not in r}
    extra = {name(r) for r in reqs if re.search(r"extra == .test.", r)} - default - {"pytest", "openai", "anthropic"}
    assert extra, reqs
    out = []
    for pkg in sorted(extra):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            importlib.metadata.distribution(pkg)
            out.append(pkg)
    return out


# ---- the test ---------------------------------------------------------------------------------

def test_the_readme_examples_parse_and_the_matching_rules_hold():
    """Runs everywhere: every Try-it command has a shown answer, and the matching rules the
    module docstring states refuse what they should."""
    text = README.read_text()
    tries = examples(block_after(text, "Try it", "curl "), "curl")
    assert len(tries) >= 6 and all(ex.shown for ex in tries), tries
    assert any("previous_response_id" in ex.command for ex in tries)
    matches({"a": [{"b": "hel..."}], "n": 0.98}, {"a": [{"b": "hello", "c": 1}, {}], "n": 0.9823, "x": None})
    for shown, real in (({"a": 1}, {}), ({"a": "hel..."}, {"a": "he"}), ({"n": 0.98}, {"n": 0.96}),
                        ({"a": [1, 2]}, {"a": [1]}), ({"a": 1}, {"a": 1.0}), ({"a": "x"}, {"a": "x "})):
        with pytest.raises(AssertionError):
            matches(shown, real)
    stream = b'data: {"i": 1}\n\nevent: e\ndata: {"i": 2, "t": "x"}\n\ndata: [DONE]\n\n'
    check_answer(['data: {"i": 1}', "...", 'data: {"i": 2}', "data: [DONE]"], 200, stream, True)
    with pytest.raises(AssertionError):
        check_answer(['data: {"i": 2}', 'data: {"i": 1}'], 200, stream, True)  # out of order
    with pytest.raises(AssertionError):
        check_answer(['400 {"error": {}}'], 200, b'{"error": {}}', False)


@pytest.mark.skipif(not MODE, reason="runs under `tox -e first-contact` (a venv without the test extra); "
                                     "COLI_FIRST_CONTACT=dev runs it here")
def test_the_readme_first_contact(tmp_path):
    if MODE != "dev":  # the venv is what a user gets from `pip install .`, not the developer's
        extra_only = extra_packages_installed()
        assert not extra_only, f"this venv has the test extra ({extra_only}): run it with tox -e first-contact"
    text = README.read_text()

    install = block_after(text, "colibri", "python -m pip install .")
    assert install.strip() == "python -m pip install . && colibri serve", install

    with served(tmp_path) as (base, startup):
        assert any(ln.startswith("colibri: answers stop at 1024 tokens") for ln in startup), startup

        # 1. Try it: each curl, with the answer the README shows
        tries = examples(block_after(text, "Try it", "curl "), "curl")
        assert len(tries) >= 6
        last_response_id = None
        for ex in tries:
            command = ex.command
            if last_response_id:
                command = command.replace('"resp_..."', json.dumps(last_response_id))
            status, body, stream = curl(command, base)
            try:
                check_answer(ex.shown, status, body, stream)
            except AssertionError as e:
                raise AssertionError(f"README example:\n{ex.command}\n{e}") from None
            if "/v1/responses" in command and status == 200:
                last_response_id = json.loads(body)["id"]

        # 2. the SDK snippets, as a user pastes them
        sdk = [body for head, lang, body in code_blocks(text) if lang == "python" and "base_url=" in body]
        assert sdk, "README: no SDK snippet"
        for code in sdk:
            want = [m.group(1) for m in re.finditer(r"^print\(.*\)\s+# -> (.*)$", code, re.M)]
            res = run([sys.executable, "-c", code.replace(DOC_ADDRESS, base)], tmp_path, timeout=120)
            assert res.returncode == 0, res.stderr
            assert res.stdout.splitlines() == want, (code, res.stdout, res.stderr)

        # 3. colibri-conform: in-process, against the served URL, and --list
        conform = examples(block_after(text, "Try it", "colibri-conform"), "colibri-conform")
        assert [c.command.split("#")[0].split()[:2] for c in conform][:2] == [["colibri-conform"],
                                                                              ["colibri-conform", "--base-url"]]
        for ex in conform:
            argv = shlex.split(ex.command.replace(DOC_ADDRESS, base), comments=True)
            res = run([str(BIN / argv[0]), *argv[1:]], tmp_path)
            assert res.returncode == 0, f"{ex.command}\nexit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
            assert "Traceback" not in res.stderr, res.stderr
            if "--json" in argv:
                report = json.loads((tmp_path / argv[argv.index("--json") + 1]).read_text())
                assert report["summary"]["FAIL"] == 0, report["summary"]
            if "--html" in argv:
                assert any((tmp_path / argv[argv.index("--html") + 1]).glob("*.html"))

    # 4. the spec commands on the installed copy (diff needs a git checkout: CI runs it on main)
    spec = examples(block_after(text, "Reading `spec/`", "colibri spec"), "colibri")
    assert [ex.command.split()[:3] for ex in spec][:2] == [["colibri", "spec", "lint"], ["colibri", "spec", "docs"]]
    for ex in spec:
        argv = shlex.split(ex.command, comments=True)
        if argv[2] == "diff":
            continue
        res = run([str(BIN / argv[0]), *argv[1:]], tmp_path, timeout=120)
        assert res.returncode == 0, f"{ex.command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        assert "the installed package's" in res.stderr
