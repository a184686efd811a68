"""KV slot state on disk, so a restarted server reuses its prefixes.

One file per slot: a header (magic, model fingerprint, payload length, payload SHA-256) and
the engine's slot state. Writes go to a temporary file that is fsynced and renamed over the
old one, so a process killed mid-write leaves the old file or a stray temporary, never a
torn file under the real name; a file that still fails its checks (truncated, foreign
model, corrupt) is discarded at start, never loaded.

The engine thread only copies a released slot's state (a memory copy); hashing, writing and
fsync happen on a writer thread, so no stream waits for a disk. When a slot is released
again before its previous state was written, only the latest state is written. A clean
shutdown (`close`) writes what is pending; a killed process loses at most the states not yet
written, and each slot file on disk is then an older valid state, or absent.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("colibri.server")
MAGIC = b"COLIKV1\n"
HEADER = struct.Struct("<8s32sQ32s")


def fingerprint(config: dict[str, Any], weights: Path) -> bytes:
    """Which model the state belongs to: its config and the weights file's size and head."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    st = weights.stat()
    h.update(str(st.st_size).encode())
    with open(weights, "rb") as f:
        h.update(f.read(1 << 20))
    return h.digest()


class KvStore:
    def __init__(self, directory: Path | str, engine: Any, model_fingerprint: bytes):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.engine = engine
        self.fp = model_fingerprint
        self.pending: dict[int, bytes] = {}  # slot -> latest state not yet written
        self.writes = 0  # files written (a test and the soak read it)
        self.superseded = 0  # states replaced by a newer one before they were written
        self._cv = threading.Condition()
        self._closing = False
        self._writing = False
        self._writer = threading.Thread(target=self._write_loop, name="colibri-kv-writer", daemon=True)
        self._writer.start()

    def path(self, slot: int) -> Path:
        return self.dir / f"slot-{slot}.colikv"

    def save(self, slot: int) -> None:
        """Queue the slot's current state for writing (called on the engine thread)."""
        data = self.engine.slot_state(slot)
        with self._cv:
            if slot in self.pending:
                self.superseded += 1
            self.pending[slot] = data
            self._cv.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cv:
                while not self.pending and not self._closing:
                    self._cv.wait()
                if not self.pending:
                    return
                slot = next(iter(self.pending))
                data = self.pending.pop(slot)
                self._writing = True
            try:
                self.write(slot, data)
            except Exception:  # a full disk must not stop later writes, nor any request
                log.exception("writing the KV state of slot %d failed", slot)
            finally:
                with self._cv:
                    self._writing = False
                    self._cv.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued state is on disk; False if `timeout` passed first."""
        with self._cv:
            return self._cv.wait_for(lambda: not self.pending and not self._writing, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is pending, then stop the writer."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._writer.join(timeout)

    def write(self, slot: int, data: bytes) -> None:
        tmp = self.dir / f".slot-{slot}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(HEADER.pack(MAGIC, self.fp, len(data), hashlib.sha256(data).digest()))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path(slot))
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self.writes += 1

    def _check(self, raw: bytes) -> bytes | str:
        if len(raw) < HEADER.size:
            return "shorter than its header"
        magic, fp, n, digest = HEADER.unpack_from(raw)
        payload = raw[HEADER.size:]
        if magic != MAGIC:
            return "not a colibri KV file"
        if fp != self.fp:
            return "written for another model"
        if len(payload) != n:
            return f"truncated ({len(payload)} of {n} bytes)"
        if hashlib.sha256(payload).digest() != digest:
            return "checksum mismatch"
        return payload

    def load_all(self, n_slots: int) -> dict[int, str]:
        """Restore every valid slot file; discard the rest. Returns slot -> what happened."""
        for stray in self.dir.glob(".slot-*.tmp"):
            stray.unlink(missing_ok=True)  # a write that never got renamed into place
        report: dict[int, str] = {}
        for slot in range(n_slots):
            p = self.path(slot)
            if not p.exists():
                continue
            checked = self._check(p.read_bytes())
            if isinstance(checked, str):
                log.warning("discarding %s: %s", p, checked)
                p.unlink(missing_ok=True)
                report[slot] = f"discarded: {checked}"
                continue
            try:
                self.engine.load_slot_state(slot, checked)
                report[slot] = f"restored {self.engine.slot_len(slot)} tokens"
            except Exception as e:  # the engine's own shape checks
                log.warning("discarding %s: %s", p, e)
                p.unlink(missing_ok=True)
                report[slot] = f"discarded: {e}"
        return report
