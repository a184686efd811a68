"""The peers harness's rows for the embedded model (bench/peers/tiny.py): each engine serves the
`colibri export` of one family with the tool and reasoning parsers that read that family's
syntax, the export is rebuilt by running the command when the shipped model changes, and the
chat format llama-server detected is read from its log."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[1] / "bench" / "peers"


@pytest.fixture()
def harness(tmp_path, monkeypatch):
    monkeypatch.setenv("COLI_PEERS_CACHE", str(tmp_path))
    monkeypatch.syspath_prepend(str(PEERS))
    for name in ("cachedir", "tiny", "catalog", "llamacpp_build", "smollm2"):
        sys.modules.pop(name, None)
    tiny = importlib.import_module("tiny")
    catalog = importlib.import_module("catalog")
    yield tiny, catalog
    for name in ("cachedir", "tiny", "catalog", "llamacpp_build", "smollm2"):
        sys.modules.pop(name, None)


def test_each_engine_serves_each_family_with_the_parsers_of_its_syntax(harness):
    tiny, catalog = harness
    rows = catalog.TINY_PEERS
    want = {"glm": ["glm45", "glm45"], "chatml": ["hermes", "qwen3"], "qwen-xml": ["qwen3_xml", "qwen3"]}
    for fam, (tool, reasoning) in want.items():
        argv = rows[f"vllm-tiny-{fam}"].argv(8000)
        assert argv[argv.index("--tool-call-parser") + 1] == tool
        assert argv[argv.index("--reasoning-parser") + 1] == reasoning
        assert "--enable-auto-tool-choice" in argv and argv[2] == str(tiny.export_path(fam, "hf"))
        assert rows[f"vllm-tiny-{fam}"].model == f"colibri-tiny-{fam}" == argv[argv.index("--served-model-name") + 1]
        server = rows[f"llama-server-tiny-{fam}"].argv(8000)
        assert "--jinja" in server and server[server.index("-m") + 1].endswith(f"colibri-tiny-{fam}-f32.gguf")
    lcp = rows["llama-cpp-python-tiny-chatml"].argv(8000)
    assert lcp[lcp.index("--chat_format") + 1] == "chatml-function-calling"
    # the proxy points at its upstream engine, started first by the harness
    proxy = rows["litellm-tiny-chatml"]
    assert proxy.upstream == "llama-server-tiny-chatml"
    config = Path(proxy.argv(8000, upstream="http://127.0.0.1:9")[2]).read_text()
    assert "api_base: http://127.0.0.1:9/v1" in config and "hosted_vllm/colibri-tiny-chatml" in config
    # none of them runs by default: the published matrix of the default run stays as it is
    assert not set(rows) & set(catalog.PEERS)
    assert all("--rule" in r.conform_args and r.family for r in rows.values())


def test_the_export_is_made_by_the_colibri_export_command_and_remade_when_the_model_changes(harness, monkeypatch):
    tiny, _ = harness
    calls = []

    def fake_sh(argv, log_name, env=None, cwd=None):
        calls.append([str(a) for a in argv])
        out = Path(argv[-1])
        out.mkdir(parents=True)
        (out / "colibri-tiny-glm-f32.gguf").write_bytes(b"GGUF")

    monkeypatch.setattr(tiny, "sh", fake_sh)
    out = tiny.ensure_export("glm", "gguf")
    assert calls[0][1:] == ["-m", "colibri.cli", "export", "--family", "glm", "--format", "gguf",
                            str(out.with_name(out.name + ".part"))]
    assert tiny.gguf_file("glm") == out / "colibri-tiny-glm-f32.gguf" and tiny.exported("glm", "gguf")
    tiny.ensure_export("glm", "gguf")
    assert len(calls) == 1  # there, and of the same model: kept
    monkeypatch.setattr(tiny, "fingerprint", lambda: "another model")
    assert not tiny.exported("glm", "gguf")
    tiny.ensure_export("glm", "gguf")
    assert len(calls) == 2


def test_the_chat_format_llama_server_chose_is_read_from_its_slots(harness, monkeypatch):
    import httpx

    tiny, _ = harness
    slots = [{"id": 0, "params": {"chat_format": "peg-native", "reasoning_format": "deepseek"}}]
    monkeypatch.setattr(httpx, "get", lambda url, timeout: httpx.Response(200, json=slots, request=httpx.Request("GET", url)))
    assert tiny.chat_format("http://127.0.0.1:1") == "peg-native (reasoning format deepseek)"
    monkeypatch.setattr(httpx, "get", lambda url, timeout: httpx.Response(404, text="no", request=httpx.Request("GET", url)))
    assert tiny.chat_format("http://127.0.0.1:1") is None


def test_the_matrix_gains_a_tools_and_a_reasoning_column_per_engine_and_family(tmp_path):
    import json

    from colibri.spec import load_spec
    from conformance.compat import Run, headline, load_tool_verdicts, readme

    verdicts = tmp_path / "tools" / "verdicts"
    verdicts.mkdir(parents=True)
    for fam, tool_call in (("glm", "PASS"), ("qwen-xml", "INCONCLUSIVE")):
        (verdicts / f"vllm-tiny-{fam}.json").write_text(json.dumps({"rules": {
            "chat.tool_calls.shape": tool_call, "tool_choice.required.calls": "PASS",
            "reasoning.not-in-content": "FAIL", "body.json.invalid": "FAIL", "chat.reasoning.field": "SKIPPED"}}))
    tools = load_tool_verdicts(tmp_path / "tools")
    assert tools["vllm"]["glm"]["tools"] == {"PASS": 2} and tools["vllm"]["glm"]["reasoning"] == {"FAIL": 1}
    runs = [Run("vllm", {"rules": [], "model": "smollm2"}, {"version": "0.32.0"}),
            Run("mockllm", {"rules": [], "model": "gpt"}, {"version": "0.0.8"})]
    table = headline(runs, "docs/compat/", {}, tools)
    assert "| tools (embedded model, per family) | reasoning (embedded model, per family) |" in table[0]
    assert "glm: [2 pass](docs/compat/tools/vllm-tiny-glm.md)<br>qwen-xml: [1 pass 1 inconcl.]" in table[2]
    assert "glm: [1 FAIL](docs/compat/tools/vllm-tiny-glm.md)" in table[2]
    assert "| — | — |" in table[3]  # an engine without the embedded model's runs
    # the tools folder's own page: engines, families, the parsers they served with
    tiny = [Run("vllm-tiny-glm", {"rules": [{"id": "chat.tool_calls.shape", "outcome": "PASS"}], "model": "m"},
                {"version": "0.32.0", "family": "glm", "parsers": "--tool-call-parser glm45", "argv": "vllm serve D"})]
    page = readme(tiny, load_spec())
    assert "| [vllm-tiny-glm](vllm-tiny-glm.md) | 0.32.0 | glm | --tool-call-parser glm45 | `vllm serve D` | 1 pass | — |" in page
    assert "| `chat.tool_calls.shape` | MUST | pass |" in page
