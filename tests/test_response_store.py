"""The /v1/responses store (rule resp.store.bounded and the --kv-dir persistence) and the
items-to-messages translation chaining depends on."""
from __future__ import annotations

import json
import threading

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
    probe = ResponseStore(max_count=100, max_bytes=1 << 30)
    probe.put(_resp("resp_a", "y" * 1000), [])
    one = probe.bytes
    store = ResponseStore(max_count=100, max_bytes=int(one * 2.5))
    for rid in ("resp_a", "resp_b", "resp_c"):
        store.put(_resp(rid, "y" * 1000), [])
    assert store.get("resp_a") is None and len(store) == 2 and store.bytes == 2 * one
    assert store.delete("resp_b") and not store.delete("resp_b") and store.bytes == one
    # One response larger than the whole limit is kept until the next arrives (it was just served).
    store.put(_resp("resp_big", "z" * one * 3), [])
    assert store.get("resp_big") is not None and len(store) == 1


def test_resp_store_bounded_counts_the_memory_really_held():
    """Many small keys take a few bytes each as JSON and far more as Python objects: the byte
    limit must bound what the process holds, not the JSON it came from."""
    import tracemalloc

    metadata = {f"k{i}": str(i) for i in range(2000)}
    context = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"t{i}"}
                                                                for i in range(500)]}]
    store = ResponseStore(max_count=1000, max_bytes=1 << 30)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20):
            # as a request brings them: fresh objects, parsed from its body
            resp = dict(_resp(f"resp_{n:04d}"), metadata=json.loads(json.dumps(metadata)))
            store.put(resp, json.loads(json.dumps(context)), list(range(300)))
            del resp
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 1.25 * store.bytes, (held, store.bytes)
    got = store.get("resp_0007")
    assert got is not None and got.response["metadata"] == metadata and got.context == context
    assert got.tokens == list(range(300))


def test_resp_store_bounded_no_file_outlives_its_entry(tmp_path):
    """A put whose file is still being written when a later put evicts it leaves no file behind."""
    writing, evicted = threading.Event(), threading.Event()

    class SlowWrite(ResponseStore):
        def _write(self, rid, text):
            if rid == "resp_first":
                writing.set()
                evicted.wait(10)
            super()._write(rid, text)

    store = SlowWrite(max_count=1, max_bytes=1 << 20, directory=tmp_path)
    first = threading.Thread(target=store.put, args=(_resp("resp_first"), []))
    first.start()
    assert writing.wait(10)
    store.put(_resp("resp_second"), [])  # evicts resp_first, whose file does not exist yet
    evicted.set()
    first.join()
    assert len(store) == 1 and store.get("resp_first") is None
    assert sorted(p.name for p in (tmp_path / "responses").iterdir()) == ["resp_second.json"]


def test_resp_store_bounded_malformed_files_are_skipped_at_start(tmp_path, caplog):
    folder = tmp_path / "responses"
    ResponseStore(10, 1 << 20, tmp_path).put(_resp("resp_good", created=3), [])
    (folder / "resp_when.json").write_text(json.dumps({"response": _resp("resp_when", created="yesterday"),
                                                       "context": []}))
    (folder / "resp_deep.json").write_text('{"response": {"id": "resp_deep", "x": ' + "[" * 200000 + "]" * 200000
                                           + '}, "context": []}')
    (folder / "resp_dir.json").mkdir()
    (folder / "resp_huge.json").write_text(json.dumps({"response": _resp("resp_huge", "h" * 5000), "context": []}))
    (folder / "resp_tok.json").write_text(json.dumps({"response": _resp("resp_tok"), "context": [], "tokens": [2**40]}))
    with caplog.at_level("WARNING", logger="colibri.server"):
        again = ResponseStore(10, 2048, tmp_path)
    assert list(again._items) == ["resp_good"]
    for name in ("resp_when", "resp_deep", "resp_dir", "resp_huge", "resp_tok"):
        assert any(f"discarding {name}.json" in r.getMessage() for r in caplog.records), name
    # Files go; a directory is not ours to delete.
    assert sorted(p.name for p in folder.iterdir()) == ["resp_dir.json", "resp_good.json"]


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
