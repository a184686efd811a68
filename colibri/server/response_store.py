"""The store behind `store: true` on /v1/responses: each response object as it was returned,
and the context a child naming it in `previous_response_id` continues from.

Bounded by count and by bytes (rule resp.store.bounded): storing past either limit evicts
the oldest responses first, so memory never grows with the number of requests served. With
a folder (`--kv-dir`, beside the KV slot files) each response is also one JSON file, written
beside its old self and renamed into place, so a restart finds the chain where it was;
unreadable files are discarded at start."""
from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("colibri.server")


@dataclass
class Stored:
    response: dict[str, Any]  # the object the create call returned
    context: list[dict[str, Any]]  # items a child continues from: ancestors' and own input, then own output
    size: int  # bytes of all three as JSON
    tokens: list[int] = field(default_factory=list)  # its prompt and generated tokens, as its KV slot holds them


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
        text = json.dumps({"response": response, "context": context, "tokens": tokens or []}, ensure_ascii=False)
        entry = Stored(response, context, len(text.encode()), list(tokens or []))
        rid = str(response["id"])
        with self._lock:
            self._drop(rid)
            self._items[rid] = entry
            self._bytes += entry.size
            evicted = self._evict()
        if self.dir is not None:
            self._write(rid, text)
            for old in evicted:
                self._unlink(old)

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
                if path.suffix != ".json":
                    raise ValueError("an unfinished write")
                doc = json.loads(path.read_text(encoding="utf-8"))
                response, context, tokens = doc["response"], doc["context"], doc.get("tokens", [])
                if not (isinstance(response, dict) and isinstance(context, list) and response.get("id") == path.stem
                        and isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)):
                    raise ValueError("not a stored response")
                found.append((response.get("created_at", 0), path.stat().st_mtime, response, context, tokens, path))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("discarding %s: %s", path.name, e)
                path.unlink(missing_ok=True)
        for *_, response, context, tokens, path in sorted(found, key=lambda f: (f[0], f[1])):
            size = len(json.dumps({"response": response, "context": context, "tokens": tokens},
                                  ensure_ascii=False).encode())
            self._items[path.stem] = Stored(response, context, size, tokens)
            self._bytes += size
        for rid in self._evict():  # the limits may be lower than when these were written
            self._unlink(rid)
        if self._items:
            log.info("restored %d stored responses from %s", len(self._items), self.dir)
