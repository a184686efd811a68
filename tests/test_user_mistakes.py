"""The mistakes a new user makes, as a table: each one gets one line on stderr that says what is
wrong and what to do, exit 2, and no traceback (issue 50 item 8). Each row runs the real
command in a child process, as the user would."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from live_server import free_port

from colibri.paths import EMBEDDED_MODEL


def _text_file(tmp: Path) -> str:
    (tmp / "notes.txt").write_text("hello\n")
    return str(tmp / "notes.txt")


def _empty_dir(tmp: Path) -> str:
    (tmp / "empty").mkdir()
    return str(tmp / "empty")


def _config_only(tmp: Path) -> str:
    d = tmp / "half"
    d.mkdir()
    shutil.copy(EMBEDDED_MODEL / "config.json", d)
    return str(d)


def _gguf_folder(tmp: Path) -> str:
    d = tmp / "downloads"
    d.mkdir()
    (d / "tiny.Q4_1.gguf").write_bytes(b"GGUF")
    return str(d)


def _truncated_weights(tmp: Path) -> str:
    d = tmp / "cut"
    d.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(EMBEDDED_MODEL / name, d)
    (d / "model.safetensors").write_bytes((EMBEDDED_MODEL / "model.safetensors").read_bytes()[:100_000])
    return str(d)


def _not_llama(tmp: Path) -> str:
    d = tmp / "gpt2"
    shutil.copytree(EMBEDDED_MODEL, d)
    (d / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    return str(d)


def _no_template(tmp: Path) -> str:
    d = tmp / "bare"
    d.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        os.symlink(EMBEDDED_MODEL / name, d / name)
    return str(d)


#: name, argv after `colibri serve` (a callable makes the --model value in a scratch folder),
#: and what the one line must contain.
MISTAKES: list[tuple[str, list[str | Callable[[Path], str]], list[str]]] = [
    ("missing-file", ["--model", "no/such/model.gguf"],
     ["--model no/such/model.gguf: no such file or folder", "--model takes a Llama-family model folder"]),
    ("typo-of-a-name", ["--model", "smollm"], ["no such file or folder; did you mean --model smollm2?"]),
    ("text-file", ["--model", _text_file], ["not a GGUF file", "--model takes"]),
    ("empty-folder", ["--model", _empty_dir], ["the folder is empty", "--model takes"]),
    ("partial-folder", ["--model", _config_only],
     ["the folder lacks model.safetensors, tokenizer.json (a partial download? fetch the missing files)"]),
    ("folder-of-gguf-files", ["--model", _gguf_folder], ["a folder of GGUF files; name the file: --model ",
                                                          "downloads/tiny.Q4_1.gguf"]),
    ("truncated-weights", ["--model", _truncated_weights],
     ["model.safetensors: truncated (100000 bytes of the 7882960 its header describes)", "fetch it again"]),
    ("not-llama", ["--model", _not_llama], ["cannot be served: not a Llama-family config (model_type='gpt2')"]),
    ("no-chat-template", ["--model", _no_template], ["carries no chat template", "add the one the model was trained with"]),
    ("port-out-of-range", ["--port", "80000"], ["--port must be 1..65535, not 80000"]),
    ("unknown-family", ["--family", "llama3"], ["unknown --family 'llama3'; known: glm, chatml"]),
]


@pytest.fixture
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


def _serve(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    import colibri

    where = os.path.dirname(os.path.dirname(os.path.abspath(colibri.__file__)))
    # A port nothing listens on, so a row that slipped through would start a server and time out.
    args = ["--port", str(free_port()), *argv] if "--port" not in argv else argv
    return subprocess.run([sys.executable, "-m", "colibri.cli", "serve", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60, env={**os.environ, "PYTHONPATH": where})


def _one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert res.stdout == ""
    assert lines[0].startswith("colibri serve: ")
    return lines[0]


@pytest.mark.parametrize("name, argv, says", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_serve_mistake_is_one_line_and_exit_2(scratch, name, argv, says):
    res = _serve([a(scratch) if callable(a) else a for a in argv], scratch)
    line = _one_line(res)
    for part in says:
        assert part in line
    assert res.returncode == 2


def test_a_busy_port_is_named_at_once_with_what_to_do(scratch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = _serve(["--port", str(port)], scratch)
    line = _one_line(res)
    assert line == (f"colibri serve: port {port} on 127.0.0.1 is already in use (another server, perhaps another "
                    "colibri serve); stop it, or choose a free port with --port")
    assert res.returncode == 2


def test_serve_help_shows_every_default_and_both_commands_have_a_version(capsys):
    from colibri import __version__
    from colibri.cli import main
    from colibri.serve import build_parser

    parser = build_parser()
    text = " ".join(parser.format_help().split())  # argparse wraps lines
    for action in parser._actions:
        if action.option_strings and action.dest not in ("help", "version"):
            help_text = " ".join((action.help or "").split())
            assert "(default" in parser.formatter_class("x")._get_help_string(action), action.option_strings
            assert help_text[:40] in text
    assert "--port PORT port to bind [COLI_PORT] (default: 8000)" in text
    assert "(default: off)" in text  # an on/off flag
    for argv in (["--version"], ["serve", "--version"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 0
        assert capsys.readouterr().out == f"colibri {__version__}\n"


def test_running_a_test_file_from_a_clone_without_the_engine_says_how(scratch):
    """Issue 50 item 14: after `pip install .`, `python -m pytest tests/x.py` in the clone
    imported the source tree's colibri and died on "cannot import name '_engine'"."""
    (scratch / "colibri").mkdir()
    (scratch / "colibri" / "__init__.py").write_text("")
    (scratch / "colibri" / "_engine.pyi").write_text("")  # the stub is in the source tree; the build is not
    (scratch / "tests").mkdir()
    shutil.copy(Path(__file__).with_name("conftest.py"), scratch / "tests")
    (scratch / "tests" / "test_x.py").write_text("from colibri import _engine\n\ndef test_x():\n    pass\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_x.py"],
                         capture_output=True, text=True, cwd=scratch, timeout=60)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "python -m pip install -e '.[test]'" in res.stdout + res.stderr
    assert "cannot import name" not in res.stdout + res.stderr and "Traceback" not in res.stdout + res.stderr
