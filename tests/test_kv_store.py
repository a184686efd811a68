"""KV persistence off the engine thread (colibri/server/kv_store.py): `save` only copies,
a writer thread hashes, writes and fsyncs; the latest state per slot wins; close writes
what is pending. Rule ops.kv-persistence (its restart test is in test_live_server)."""
from __future__ import annotations

import threading
import time

from colibri.server import kv_store
from colibri.server.kv_store import KvStore


class FakeEngine:
    def __init__(self) -> None:
        self.states = {0: b"a0", 1: b"b0"}
        self.loaded: dict[int, bytes] = {}

    def slot_state(self, slot: int) -> bytes:
        return self.states[slot]

    def load_slot_state(self, slot: int, data: bytes) -> None:
        self.loaded[slot] = data

    def slot_len(self, slot: int) -> int:
        return len(self.loaded[slot])


def _blocked_store(tmp_path):
    engine = FakeEngine()
    store = KvStore(tmp_path, engine, b"f" * 32)
    gate = threading.Event()
    real = store.write

    def slow_write(slot: int, data: bytes) -> None:
        gate.wait(10)
        real(slot, data)

    store.write = slow_write  # type: ignore[method-assign]
    return engine, store, gate


def test_save_returns_while_the_disk_is_busy_and_the_latest_state_wins(tmp_path):
    engine, store, gate = _blocked_store(tmp_path)
    store.save(0)  # the writer takes this one and blocks in write
    time.sleep(0.1)
    start = time.monotonic()
    for i in range(1, 6):
        engine.states[0] = f"a{i}".encode()
        store.save(0)
    engine.states[1] = b"b1"
    store.save(1)
    assert time.monotonic() - start < 0.5  # no save waited for the blocked write
    assert store.superseded == 4  # a1..a4 were replaced before being written
    gate.set()
    assert store.flush(10)
    assert store.writes == 3  # a0, a5, b1
    fresh = FakeEngine()
    report = KvStore(tmp_path, fresh, b"f" * 32).load_all(2)
    assert fresh.loaded == {0: b"a5", 1: b"b1"}
    assert report == {0: "restored 2 tokens", 1: "restored 2 tokens"}
    store.close()


def test_close_writes_what_is_pending(tmp_path):
    engine, store, gate = _blocked_store(tmp_path)
    store.save(0)
    store.save(1)
    threading.Timer(0.2, gate.set).start()
    store.close()
    assert store.writes == 2 and not store.pending
    assert (tmp_path / "slot-0.colikv").exists() and (tmp_path / "slot-1.colikv").exists()


def test_a_failing_write_is_logged_and_later_writes_go_on(tmp_path, monkeypatch):
    # A recorder in place of the module's logger: the server's logger may be disabled or not
    # propagate, depending on what configured logging before this test.
    logged: list[str] = []

    class Recorder:
        def exception(self, msg: str, *args: object) -> None:
            logged.append(msg % args)

    monkeypatch.setattr(kv_store, "log", Recorder())
    engine = FakeEngine()
    store = KvStore(tmp_path, engine, b"f" * 32)
    real = store.write
    calls = []

    def flaky(slot: int, data: bytes) -> None:
        calls.append(slot)
        if len(calls) == 1:
            raise OSError("disk full")
        real(slot, data)

    store.write = flaky  # type: ignore[method-assign]
    store.save(0)
    assert store.flush(5)
    store.save(1)
    assert store.flush(5)
    assert store.writes == 1 and logged == ["writing the KV state of slot 0 failed"]
    store.close()
