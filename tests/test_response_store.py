"""The /v1/responses store (rule resp.store.bounded and the --kv-dir persistence) and the
items-to-messages translation chaining depends on."""
from __future__ import annotations

import json

import falcon.testing

from colibri.server.app import create_app
from colibri.server.response_store import ResponseStore
from colibri.server.responses_api import to_messages
from colibri.server.service import Service, Settings


def _resp(rid: str, text: str = "x", created: int = 1) -> dict:
    return {"id": rid, "object": "response", "created_at": created, "output": [{"type": "message", "text": text}]}


def test_resp_store_bounded_by_count_oldest_first():
    store = ResponseStore(max_count=2, max_bytes=1 << 20)
    for rid in ("resp_a", "resp_b", "resp_c"):
        store.put(_resp(rid), [])
    assert store.get("resp_a") is None and store.get("resp_b") and store.get("resp_c") and len(store) == 2


def test_resp_store_bounded_by_bytes_and_accounts_deletes():
    one = len(json.dumps({"response": _resp("resp_a", "y" * 1000), "context": [], "tokens": []}).encode())
    store = ResponseStore(max_count=100, max_bytes=int(one * 2.5))
    for rid in ("resp_a", "resp_b", "resp_c"):
        store.put(_resp(rid, "y" * 1000), [])
    assert store.get("resp_a") is None and len(store) == 2 and store.bytes == 2 * one
    assert store.delete("resp_b") and not store.delete("resp_b") and store.bytes == one
    # One response larger than the whole limit is kept until the next arrives (it was just served).
    store.put(_resp("resp_big", "z" * one * 3), [])
    assert store.get("resp_big") is not None and len(store) == 1


def test_store_persists_under_kv_dir_and_discards_torn_files(tmp_path):
    store = ResponseStore(10, 1 << 20, tmp_path)
    store.put(_resp("resp_old", created=1), [{"type": "message", "role": "user", "content": "hi"}])
    store.put(_resp("resp_new", created=2), [])
    store.delete("resp_new")
    folder = tmp_path / "responses"
    assert sorted(p.name for p in folder.iterdir()) == ["resp_old.json"]
    (folder / "resp_torn.json").write_text('{"response": {"id": "resp_torn"')  # a write cut short
    (folder / "resp_x.json.tmp").write_text("{}")  # never renamed into place
    (folder / "resp_other.json").write_text(json.dumps({"response": _resp("resp_else"), "context": []}))
    again = ResponseStore(10, 1 << 20, tmp_path)
    assert again.get("resp_old").context == [{"type": "message", "role": "user", "content": "hi"}]
    assert len(again) == 1 and sorted(p.name for p in folder.iterdir()) == ["resp_old.json"]
    # Limits lowered across a restart: the oldest go.
    store2 = ResponseStore(10, 1 << 20, tmp_path)
    store2.put(_resp("resp_2", created=5), [])
    assert len(ResponseStore(1, 1 << 20, tmp_path)) == 1 and not (folder / "resp_old.json").exists()


def test_a_chain_survives_a_restart_with_kv_dir(tmp_path):
    """The store is kept beside the KV files: a child continues a parent made before a restart."""
    def client(svc: Service) -> falcon.testing.TestClient:
        return falcon.testing.TestClient(create_app(svc), headers={"Host": "localhost"})

    body = {"model": "colibri-tiny", "input": "My name is Ada.", "max_output_tokens": 8, "temperature": 0}
    before = Service(Settings(kv_dir=str(tmp_path)))
    parent = client(before).simulate_post("/v1/responses", json=body).json
    before.close()  # what a SIGTERM does; the store files stay
    after = Service(Settings(kv_dir=str(tmp_path)))
    second = client(after)
    assert second.simulate_get(f"/v1/responses/{parent['id']}").json == parent
    child = second.simulate_post("/v1/responses", json=dict(body, input="What is my name?",
                                                            previous_response_id=parent["id"]))
    assert child.status_code == 200 and child.json["usage"]["input_tokens"] > parent["usage"]["input_tokens"]
    after.close()


def test_items_to_messages_groups_calls_and_attaches_reasoning():
    items = [
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in "},
                                                         {"type": "input_text", "text": "Drassa?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Use the tool."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Drassa"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
    ]
    assert to_messages(items) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Drassa?"},
        {"role": "assistant", "content": "", "reasoning_content": "Use the tool.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Drassa"}}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]


def test_a_child_prompt_keeps_its_parents_tokens():
    """Service._after: the parent's tokens stay as they are when the prompt's text starts with
    them, even where tokenizing the whole text afresh would merge across the boundary."""
    svc = Service(Settings())
    try:
        model = svc.model
        text = "Hello wonderful world"

        def ids_of(t: str) -> list[int]:
            return model.encode_pieces([(t, False)])

        # an answer cut inside a word, where tokenizing the whole text afresh merges across the cut
        cut = next(k for k in range(1, len(text)) if ids_of(text)[:len(ids_of(text[:k]))] != ids_of(text[:k]))
        history = ids_of(text[:cut])
        whole = [(text, False), ("<|user|>", True), ("\nAgain", False)]
        ids = svc._after(history, whole)
        assert ids is not None and ids[:len(history)] == history
        assert ids[len(history):] == model.encode_pieces([(text[cut:], False), ("<|user|>", True), ("\nAgain", False)])
        assert model.encode_pieces(whole)[:len(history)] != history  # afresh, the cut word is tokenized otherwise
        assert svc._after(history, [("Goodbye", False)]) is None  # another text: tokenized afresh
        assert svc._after([10**9], whole) is None  # not this model's tokens (a store from another model)
    finally:
        svc.close()
