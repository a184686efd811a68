"""Chat templates render as transformers renders them (whitespace rules, tojson, globals), and a
template's own refusal is a named 400 (rule prompt.template.refusal)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from colibri.chat_template import TemplateRefusal, render
from conformance.inprocess import model_target

TINY = Path(__file__).resolve().parents[1] / "colibri" / "models" / "tiny"
REFUSING = (TINY / "chat_template.chatml.jinja").read_text().replace(
    "{%- set ns = namespace(system='') -%}",
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{ raise_exception('System messages are not supported by this model.') }}{%- endif -%}"
    "{%- set ns = namespace(system='') -%}", 1)


def test_templates_render_under_transformers_whitespace_rules():
    # trim_blocks: the newline right after a block tag goes; lstrip_blocks: so do the spaces
    # before a tag that starts a line. Written for those rules, this prints one line per turn.
    source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}"
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "b"}]
    assert render(source, msgs) == "a\nb\n"
    # transformers' tojson keeps key order and non-ASCII text, and takes its keyword arguments
    doc = {"b": "é", "a": 1}
    assert render("{{ messages[0] | tojson(separators=(',', ':')) }}", [doc]) == '{"b":"é","a":1}'
    assert render("{{ messages[0] | tojson(indent=1) }}", [doc]) == json.dumps(doc, ensure_ascii=False, indent=1)
    # its globals and the loop-control extension
    assert render("{{ strftime_now('%Y') | length }}", []) == "4"
    assert render("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m }}{% endfor %}",
                  ["p", "q"]) == "p"
    with pytest.raises(TemplateRefusal, match="no system"):
        render("{{ raise_exception('no system') }}", [])


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    """The embedded model in a folder of its own, with a template that refuses system turns."""
    folder = tmp_path_factory.mktemp("refusing")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copyfile(TINY / name, folder / name)
    (folder / "chat_template.jinja").write_text(REFUSING)
    target, _ = model_target(folder, model_id="refusing")
    return target


def _post(target, path, body):
    ex = target.send("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return ex.status, ex.json()


def test_prompt_template_refusal_is_a_named_400_in_each_envelope(refusing):
    system = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    for path in ("/v1/chat/completions", "/v1/render"):
        status, doc = _post(refusing, path, {"model": "refusing", "messages": system, "max_tokens": 2})
        assert status == 400, (path, doc)
        err = doc["error"]
        assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "template_refused", "messages")
        assert "System messages are not supported by this model." in err["message"]
    status, doc = _post(refusing, "/v1/messages", {"model": "refusing", "system": "be brief", "max_tokens": 2,
                                                    "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and doc["type"] == "error"
    assert doc["error"]["type"] == "invalid_request_error" and "not supported by this model" in doc["error"]["message"]
    # the same server answers what its template accepts, and keeps answering
    status, doc = _post(refusing, "/v1/chat/completions", {"model": "refusing", "max_tokens": 2,
                                                           "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and doc["choices"][0]["finish_reason"] in ("stop", "length")
