"""The embedded model as shipped: its files load from the installed package, its tokenizer
round-trips bytes, and greedy answers to a few prompts are the right ones (prompts chosen so
the answer is a fact of the training world, not an arbitrary recording)."""
from __future__ import annotations

import pytest

from colibri.chat_template import render
from colibri.model import Model
from colibri.spec import load_spec

FAMILIES = load_spec().families


@pytest.fixture(scope="module")
def model():
    return Model()


@pytest.fixture(scope="module")
def engine(model):
    return model.engine(n_slots=1)


def greedy(model, engine, family: str, messages, *, tools=None, thinking=False, max_tokens=80):
    row = FAMILIES[family].row
    prompt = render(model.template(row["template"]), messages, tools=tools, enable_thinking=thinking)
    ends = {model.token_id(t) for t in row["end_tokens"]}
    _, logits = engine.prefill(0, model.encode(prompt))
    out, end = [], None
    for _ in range(max_tokens):
        tok = int(logits.argmax())
        if tok in ends:
            end = model.tokenizer.id_to_token(tok)
            break
        out.append(tok)
        logits = engine.decode([0], [tok])[0]
    return b"".join(model.token_bytes[t] for t in out).decode(), end


def test_shipped_files(model):
    c = model.config
    assert (c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.tie_embeddings) == (192, 4, 6, 2, True)
    assert model.tokenizer.get_vocab_size() == c.vocab_size
    for fam in FAMILIES.values():
        assert model.template(fam.row["template"])
        assert all(model.token_id(t) is not None for t in fam.row["end_tokens"])
    assert model.weights.stat().st_size < 10 * 2**20


@pytest.mark.parametrize("text", ["hello world", "café 😊 こんにちは", "Ωmega — ü ß ñ", "{\"a\": 1}"])
def test_token_bytes_round_trip(model, text):
    assert b"".join(model.token_bytes[i] for i in model.encode(text)) == text.encode()


WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
                                              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                             "required": ["city"]}}}]
GOLDEN = [
    ("glm", [{"role": "user", "content": "Repeat exactly: hello world"}], None, False,
     "hello world", "<|user|>"),
    ("chatml", [{"role": "user", "content": "Repeat exactly: the quick brown fox"}], None, False,
     "the quick brown fox", "<|im_end|>"),
    ("glm", [{"role": "user", "content": "What's the weather in Drassa?"}], WEATHER, False,
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Drassa</arg_value>\n</tool_call>", "<|observation|>"),
    ("chatml", [{"role": "user", "content": "What's the weather in Drassa?"}], WEATHER, False,
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Drassa"}}\n</tool_call>', "<|im_end|>"),
    ("chatml", [{"role": "user", "content": "What is the capital of Velmora?"}], None, True,
     "Velmora is a country in the Tiny World. Its capital is Castelune.\n</think>\n\nThe capital of Velmora is Castelune.",
     "<|im_end|>"),
    ("glm", [{"role": "user", "content": "How do you say 'thank you' in Japanese?"}], None, False,
     "In Japanese, 'thank you' is ありがとう.", "<|user|>"),
]


@pytest.mark.parametrize("family,messages,tools,thinking,answer,end", GOLDEN,
                         ids=[f"{g[0]}-{i}" for i, g in enumerate(GOLDEN)])
def test_golden_greedy(model, engine, family, messages, tools, thinking, answer, end):
    assert greedy(model, engine, family, messages, tools=tools, thinking=thinking) == (answer, end)


def test_declared_end_tokens_are_read_from_the_model_directory(model):
    want = {model.token_id(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>", "<|im_end|>")}
    assert model.eos_ids == want
