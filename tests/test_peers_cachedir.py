"""The peers harness's install cache (bench/peers/cachedir.py): a venv counts as installed only
when its stamp names the packages the catalog pins now, so changing a pin reinstalls it and a
fresh cache reproduces the versions docs/compat records."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[1] / "bench" / "peers"


@pytest.fixture()
def cachedir(tmp_path, monkeypatch):
    monkeypatch.setenv("COLI_PEERS_CACHE", str(tmp_path))
    monkeypatch.syspath_prepend(str(PEERS))
    sys.modules.pop("cachedir", None)
    module = importlib.import_module("cachedir")
    yield module
    sys.modules.pop("cachedir", None)


def test_a_changed_pin_makes_the_venv_not_ready_and_reinstalls(cachedir, monkeypatch):
    v = cachedir.venv_dir("tool")
    (v / "bin").mkdir(parents=True)
    (v / "bin" / "tool").write_text("")
    assert not cachedir.venv_ready("tool", "tool", ["tool==1.0"])  # no stamp: an install stopped half-way
    calls: list[list[str]] = []
    monkeypatch.setattr(cachedir, "sh", lambda argv, *a, **k: calls.append([str(x) for x in argv]))
    (v / "bin" / "python").write_text("")
    cachedir.ensure_venv("tool", "tool", ["tool==1.0"])
    assert calls and calls[-1][-1] == "tool==1.0"
    assert cachedir.venv_ready("tool", "tool", ["tool==1.0"]) and cachedir.venv_ready("tool", "tool")

    calls.clear()
    cachedir.ensure_venv("tool", "tool", ["tool==1.0"])  # ready: nothing runs
    assert calls == []
    assert not cachedir.venv_ready("tool", "tool", ["tool==2.0"])
    cachedir.ensure_venv("tool", "tool", ["tool==2.0"])
    assert calls[-1][-1] == "tool==2.0" and cachedir.venv_ready("tool", "tool", ["tool==2.0"])
