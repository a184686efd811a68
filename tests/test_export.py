"""`colibri export` (issue 48, point 1): the embedded model as a transformers directory and as a
GGUF file, in each family's format. Each export, loaded back by colibri (and the transformers
directory by transformers itself), must answer token for token what the embedded model answers
greedily: a repeat, a tool call, a tool result round trip, a reasoning block, a non-Latin answer.
The metadata other engines read (template, end tokens, pre-tokenizer, token types,
hyper-parameters) is checked by reading the files back with the `gguf` package."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from colibri.chat_template import render
from colibri.cli import main
from colibri.export import CONTROL, USER_DEFINED, export, exportable_families, family_export, gguf_file_name
from colibri.families import detect_family
from colibri.model import Model
from colibri.spec import load_spec

SPEC = load_spec()
FAMILIES = ["glm", "chatml", "qwen-xml"]
MAX_TOKENS = 80

WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
                                              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                             "required": ["city"]}}}]
CALLED = [{"role": "user", "content": "What's the weather in Drassa?"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Drassa"}}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees"}]
#: (name, messages, tools, thinking)
PROMPTS = [
    ("repeat", [{"role": "user", "content": "Repeat exactly: the quick brown fox"}], None, False),
    ("tool-call", [{"role": "user", "content": "What's the weather in Drassa?"}], WEATHER, False),
    ("tool-result", CALLED, WEATHER, False),
    ("reasoning", [{"role": "user", "content": "What is the capital of Velmora?"}], None, True),
    ("japanese", [{"role": "user", "content": "How do you say 'thank you' in Japanese?"}], None, False),
]


def greedy(model: Model, engine, template: str, family: str, messages, tools, thinking) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids ending with the end token if one came) for the model's greedy
    answer, stopping where the family's turn ends or the model's own end tokens say."""
    prompt = model.encode(render(template, messages, tools=tools, enable_thinking=thinking))
    ends = {model.token_id(t) for t in SPEC.families[family].row["end_tokens"]} | set(model.eos_ids)
    _, logits = engine.prefill(0, prompt)
    out: list[int] = []
    for _ in range(MAX_TOKENS):
        tok = int(logits.argmax())
        out.append(tok)
        if tok in ends:
            break
        logits = engine.decode([0], [tok])[0]
    return prompt, out


@pytest.fixture(scope="module")
def embedded() -> dict[tuple[str, str], tuple[list[int], list[int]]]:
    """The embedded model's greedy answers: the reference every export must reproduce."""
    model = Model()
    engine = model.engine(n_slots=1)
    return {(fam, name): greedy(model, engine, model.template(SPEC.families[fam].row["template"]), fam, msgs, tools,
                                thinking)
            for fam in FAMILIES for name, msgs, tools, thinking in PROMPTS}


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for fam in FAMILIES:
        export(fam, "hf", root / f"hf-{fam}")
        out[fam, "hf"] = root / f"hf-{fam}"
        export(fam, "gguf", root / f"gguf-{fam}")
        out[fam, "gguf"] = root / f"gguf-{fam}" / gguf_file_name(fam, "f32")
    return out


def test_the_exportable_families_are_the_ones_whose_template_names_them():
    assert exportable_families() == FAMILIES  # chatml-text and plain borrow chatml's template


@pytest.mark.parametrize("fmt", ["hf", "gguf"])
@pytest.mark.parametrize("family", FAMILIES)
def test_colibri_loads_the_export_and_answers_like_the_embedded_model(exports, embedded, family, fmt):
    model = Model(exports[family, fmt])
    # the family a server gives it: detected from the template the export carries
    assert detect_family(model.own_template(), SPEC)[0] == family
    assert model.eos_ids == set(family_export(family).end_ids)
    engine = model.engine(n_slots=1)
    for name, msgs, tools, thinking in PROMPTS:
        prompt, answer = greedy(model, engine, model.template(), family, msgs, tools, thinking)
        want_prompt, want = embedded[family, name]
        assert prompt == want_prompt, name  # the GGUF's tokenizer is rebuilt from its metadata
        assert answer == want, name
        assert answer[-1] in model.eos_ids, name  # every prompt ends its turn within MAX_TOKENS


def test_the_prompts_exercise_a_call_a_result_and_reasoning(embedded):
    """The agreement above means something only if the answers hold what the prompts ask for."""
    model = Model()
    text = {k: b"".join(model.token_bytes[t] for t in v[1]).decode() for k, v in embedded.items()}
    assert text["chatml", "tool-call"].startswith('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Drassa"}}')
    assert text["glm", "tool-call"].startswith("<tool_call>get_weather\n<arg_key>city</arg_key>")
    assert "<tool_call>" not in text["chatml", "tool-result"] and "24" in text["chatml", "tool-result"]
    assert all("</think>" in text[f, "reasoning"] for f in FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_files_name_the_family_template_and_end_tokens(exports, family):
    d = exports[family, "hf"]
    fam = family_export(family)
    assert sorted(p.name for p in d.iterdir()) == ["README.md", "config.json", "generation_config.json",
                                                   "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    tc = json.loads((d / "tokenizer_config.json").read_text())
    assert tc["chat_template"] == fam.template
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (tc["eos_token"], tc["pad_token"], tc["bos_token"]) == (fam.end_tokens[0], "<|pad|>", None)
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == list(fam.end_ids)
    assert json.loads((d / "config.json").read_text())["eos_token_id"] == list(fam.end_ids)
    assert f"--family {family}" in (d / "README.md").read_text()


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_metadata_read_back(exports, family):
    from gguf import GGUFReader

    fam = family_export(family)
    r = GGUFReader(str(exports[family, "gguf"]))
    meta = {k: f.contents() for k, f in r.fields.items()}
    assert meta["general.architecture"] == "llama"
    assert meta["tokenizer.chat_template"] == fam.template
    # llama.cpp (0c1e570, the peers' build) refuses "gpt2": "unknown pre-tokenizer type"
    assert (meta["tokenizer.ggml.model"], meta["tokenizer.ggml.pre"]) == ("gpt2", "gpt-2")
    ends = [meta[f"tokenizer.ggml.{k}_token_id"] for k in ("eos", "eot", "eom") if f"tokenizer.ggml.{k}_token_id" in meta]
    assert ends == list(fam.end_ids)
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.add_bos_token"]) == (1, False)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == 2058 and len(meta["tokenizer.ggml.merges"]) == 1784
    control = {tokens[i] for i, t in enumerate(types) if t == CONTROL}
    assert control == {"<|pad|>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                       "<|im_start|>", "<|im_end|>"}
    assert {tokens[i] for i, t in enumerate(types) if t == USER_DEFINED} >= {"<think>", "</think>", "<tool_call>"}
    hyper = {k.removeprefix("llama."): meta[k] for k in meta if k.startswith("llama.")}
    assert hyper == {"context_length": 2048, "embedding_length": 192, "block_count": 4, "feed_forward_length": 512,
                     "attention.head_count": 6, "attention.head_count_kv": 2, "rope.dimension_count": 32,
                     "rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": pytest.approx(1e-5),
                     "vocab_size": 2058}
    assert {t.tensor_type.name for t in r.tensors} == {"F32"} and len(r.tensors) == 38  # tied: no output.weight


@pytest.mark.parametrize("gguf_type,matrix_type", [("f16", "F16"), ("q8_0", "Q8_0")])
def test_smaller_gguf_types_load_and_still_call_the_tool(tmp_path, gguf_type, matrix_type):
    from gguf import GGUFReader

    (path,) = [f for f in export("chatml", "gguf", tmp_path, gguf_type=gguf_type) if f.suffix == ".gguf"]
    types = {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}
    assert types["blk.0.attn_q.weight"] == types["token_embd.weight"] == matrix_type
    assert types["blk.0.attn_norm.weight"] == "F32"
    model = Model(path)
    _, answer = greedy(model, model.engine(n_slots=1), model.template(), "chatml", *PROMPTS[1][1:])
    text = b"".join(model.token_bytes[t] for t in answer).decode()
    assert text.startswith('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Drassa"}}')


def test_transformers_loads_the_hf_export_and_answers_the_same_tokens(exports, embedded):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 2M-parameter model: a second thread only waits on the first
    try:
        _transformers_agree(torch, transformers, exports, embedded)
    finally:
        torch.set_num_threads(threads)


def _transformers_agree(torch, transformers, exports, embedded) -> None:
    for family in FAMILIES:
        d = exports[family, "hf"]
        tok = transformers.AutoTokenizer.from_pretrained(d)
        lm = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        for name, msgs, tools, thinking in PROMPTS:
            # transformers renders the template from tokenizer_config.json itself
            ids = tok.apply_chat_template(msgs, tools=tools, enable_thinking=thinking, add_generation_prompt=True,
                                          tokenize=True, return_dict=True, return_tensors="pt")["input_ids"]
            want_prompt, want = embedded[family, name]
            assert ids[0].tolist() == want_prompt, (family, name)
            with torch.no_grad():
                out = lm.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
            assert out[0, ids.shape[1]:].tolist() == want, (family, name)


@pytest.mark.parametrize("argv,code", [
    (["--family", "chatml-text", "--format", "hf"], "unknown_family"),
    (["--family", "llama3", "--format", "hf"], "unknown_family"),
    (["--family", "glm", "--format", "onnx"], "unknown_format"),
    (["--family", "glm", "--format", "gguf", "--type", "q4_0"], "unknown_type"),
])
def test_bad_arguments_are_refused_by_name(tmp_path, capsys, argv, code):
    assert main(["export", *argv, str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith(f"colibri export: {code}: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("occupied", ["file", "dir"])
def test_an_occupied_output_is_refused_and_left_alone(tmp_path, capsys, occupied):
    out = tmp_path / "out"
    if occupied == "file":
        out.write_text("keep me")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    assert main(["export", "--family", "glm", "--format", "hf", str(out)]) == 2
    assert capsys.readouterr().err.startswith("colibri export: output_not_empty: ")
    assert (out.read_text() if occupied == "file" else sorted(p.name for p in out.iterdir())) in ("keep me", ["notes.txt"])


def test_an_empty_output_directory_is_used_and_progress_is_printed(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert main(["export", "--family", "qwen-xml", "--format", "gguf", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "family qwen-xml: template chat_template.qwen-xml.jinja, end tokens <|im_end|> (7), <|endoftext|> (1)"
    assert lines[-1].startswith("wrote 2 files, ") and lines[-1].endswith(f"MB, to {out}")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "colibri-tiny-qwen-xml-f32.gguf"]
