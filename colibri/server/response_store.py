"""The store behind `store: true` on /v1/responses: each response object as it was returned,
and the context a child naming it in `previous_response_id` continues from.

Bounded by count and by bytes (rule resp.store.bounded): storing past either limit evicts
the oldest responses first, so memory never grows with the number of requests served. The
bytes are the ones really held: each response is kept as its compact UTF-8 JSON text and its
tokens as 4-byte integers, parsed again when read, because parsed objects take many times
their JSON size (a small metadata key is a few bytes of JSON and a hundred of Python
objects). With a folder (`--kv-dir`, beside the KV slot files) each response is also one
JSON file, written beside its old self and renamed into place, so a restart finds the chain
where it was; files that are not a stored response (torn, malformed, too deep or too large,
or not files at all) are skipped at start with a log line."""
from __future__ import annotations

import json
import logging
import os
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("colibri.server")

# What one entry costs beside its text and tokens: the entry object, the bytes and array
# headers, the id string and the ordered dict's node (tracemalloc over 5,000 small entries: 354
# bytes each beside their text and tokens).
ENTRY_OVERHEAD = 512


@dataclass(frozen=True)
class Stored:
    text: bytes  # {"response": the object the create call returned, "context": items a child continues from}
    token_ids: array  # its prompt and generated tokens, as its KV slot holds them ('i': 4 bytes each)

    @property
    def size(self) -> int:
        """The bytes this entry holds in memory (what --responses-max-bytes counts)."""
        return len(self.text) + self.token_ids.itemsize * len(self.token_ids) + ENTRY_OVERHEAD

    @property
    def response(self) -> dict[str, Any]:
        return json.loads(self.text)["response"]  # type: ignore[no-any-return]

    @property
    def context(self) -> list[dict[str, Any]]:
        """Ancestors' and own input items, then own output (a fresh copy the caller may extend)."""
        return json.loads(self.text)["context"]  # type: ignore[no-any-return]

    @property
    def tokens(self) -> list[int]:
        return self.token_ids.tolist()


def _entry(response: dict[str, Any], context: list[dict[str, Any]], tokens: list[int]) -> Stored:
    text = json.dumps({"response": response, "context": context}, ensure_ascii=False, separators=(",", ":"))
    return Stored(text.encode(), array("i", tokens))


class ResponseStore:
    def __init__(self, max_count: int, max_bytes: int, directory: str | Path | None = None):
        self.max_count, self.max_bytes = max_count, max_bytes
        self.dir = Path(directory) / "responses" if directory else None
        self._items: OrderedDict[str, Stored] = OrderedDict()  # oldest first
        self._bytes = 0
        self._lock = threading.Lock()
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._load()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, response: dict[str, Any], context: list[dict[str, Any]], tokens: list[int] | None = None) -> None:
        entry = _entry(response, context, list(tokens or []))
        rid = str(response["id"])
        with self._lock:
            self._drop(rid)
            self._items[rid] = entry
            self._bytes += entry.size
            evicted = self._evict()
        if self.dir is not None:
            self._write(rid, json.dumps({"response": response, "context": context, "tokens": list(tokens or [])},
                                        ensure_ascii=False))
            for old in evicted:
                self._unlink(old)
            # Another put may have evicted this one (or a delete removed it) while its file was
            # being written, and unlinked the file before it existed: no file outlives its entry.
            with self._lock:
                gone = self._items.get(rid) is not entry
            if gone:
                self._unlink(rid)

    def get(self, rid: str) -> Stored | None:
        with self._lock:
            return self._items.get(rid)

    def delete(self, rid: str) -> bool:
        with self._lock:
            found = self._drop(rid)
        if found and self.dir is not None:
            self._unlink(rid)
        return found

    # ------------------------------------------------------------------ internals

    def _drop(self, rid: str) -> bool:
        entry = self._items.pop(rid, None)
        if entry is None:
            return False
        self._bytes -= entry.size
        return True

    def _evict(self) -> list[str]:
        """Oldest first until both limits hold; a response larger than the byte limit alone is
        kept until the next one arrives, so the caller can still read back what it just made."""
        out = []
        while len(self._items) > 1 and (len(self._items) > self.max_count or self._bytes > self.max_bytes):
            rid, entry = self._items.popitem(last=False)
            self._bytes -= entry.size
            out.append(rid)
        return out

    def _path(self, rid: str) -> Path:
        assert self.dir is not None
        return self.dir / f"{rid}.json"

    def _write(self, rid: str, text: str) -> None:
        path = self._path(rid)
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:  # the response was served; only its survival of a restart is lost
            log.warning("could not save response %s: %s", rid, e)

    def _unlink(self, rid: str) -> None:
        try:
            self._path(rid).unlink(missing_ok=True)
        except OSError as e:
            log.warning("could not remove response %s: %s", rid, e)

    def _load(self) -> None:
        assert self.dir is not None
        found = []
        for path in self.dir.glob("*.json*"):
            try:
                entry, created = self._read(path)
                found.append((created, path.stat().st_mtime, path.stem, entry))
            except (OSError, ValueError, KeyError, TypeError, RecursionError, MemoryError) as e:
                log.warning("discarding %s: %s", path.name, e or type(e).__name__)
                if path.is_file() or path.is_symlink():
                    self._remove(path)
        for _, _, rid, entry in sorted(found, key=lambda f: (f[0], f[1])):
            self._items[rid] = entry
            self._bytes += entry.size
        for rid in self._evict():  # the limits may be lower than when these were written
            self._unlink(rid)
        if self._items:
            log.info("restored %d stored responses from %s", len(self._items), self.dir)

    def _read(self, path: Path) -> tuple[Stored, float]:
        """One file as a stored response and its created_at; raises on anything else."""
        if path.suffix != ".json":
            raise ValueError("an unfinished write")
        if not path.is_file() or path.is_symlink():
            raise ValueError("not a regular file")
        if path.stat().st_size > max(self.max_bytes, 1) * 2:  # its entry alone could not be kept
            raise ValueError(f"larger than twice --responses-max-bytes ({path.stat().st_size} bytes)")
        doc = json.loads(path.read_text(encoding="utf-8"))
        response, context, tokens = doc["response"], doc["context"], doc.get("tokens", [])
        created = response.get("created_at", 0) if isinstance(response, dict) else None
        if not (isinstance(response, dict) and isinstance(context, list) and response.get("id") == path.stem
                and isinstance(created, (int, float)) and not isinstance(created, bool)
                and isinstance(tokens, list) and all(type(t) is int and -2**31 <= t < 2**31 for t in tokens)):
            raise ValueError("not a stored response")
        return _entry(response, context, tokens), float(created)

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            log.warning("could not remove %s: %s", path.name, e)
