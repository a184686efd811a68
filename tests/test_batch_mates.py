"""A valid stream is untouched by whatever arrives beside it (issue 11's batch-mate test).

One seeded, sampled stream runs on a live server while every bad input known to have hurt
other requests arrives over real HTTP: integral floats for integer fields, numbers beyond a
double or below a 32-bit float, 3,000 nested brackets, malformed Anthropic blocks, a Range
past a file's end, a cross-site form POST, special tokens in content, a chunked body, a
client trickling its headers, a stream cut by its client. Each gets its exact named answer,
and the stream's text is the same as when it runs alone.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from live_server import live_server

from conformance.hostile import HOSTILE, MODEL, verdict

pytestmark = pytest.mark.integration

STREAM = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story about a fox."}],
          "max_tokens": 48, "temperature": 0.9, "seed": 7, "stream": True, "cache_slot": 0}


def _stream_text(client: httpx.Client) -> str:
    parts = []
    with client.stream("POST", "/v1/chat/completions", json=STREAM) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def _check(client: httpx.Client, case) -> str | None:
    name, method, path, body, headers, expect = case
    r = client.request(method, path, content=body, headers=headers)
    problem = verdict(r.status_code, r.content, expect)
    return f"{name}: {problem}" if problem else None


def _trickle(addr: tuple[str, int], out: list[str]) -> None:
    with socket.create_connection(addr, timeout=20) as s:
        for ch in b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 500\r\n\r\n{":
            s.sendall(bytes([ch]))
            time.sleep(0.03)
        s.settimeout(20)
        reply = s.recv(65536)
        out.append("trickle" if reply.startswith(b"HTTP/1.1 408") else f"trickle: {reply[:80]!r}")


def _cut_stream(base: str) -> None:
    with httpx.Client(base_url=base, timeout=30) as c:
        with c.stream("POST", "/v1/chat/completions",
                      json={**STREAM, "cache_slot": 3, "seed": 1, "max_tokens": 200}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 6:
                    break  # leave mid-stream


def _chunked(base: str, out: list[str]) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "cache_slot": 2}).encode()
    with httpx.Client(base_url=base, timeout=30) as c:
        r = c.post("/v1/chat/completions", content=iter([body[:10], body[10:]]))
        out.append("chunked" if r.status_code == 200 else f"chunked: {r.status_code}")


def test_a_stream_is_untouched_by_every_bad_input_beside_it():
    with live_server("--kv-slots", "4", "--read-deadline", "3", "--debug-step-delay", "0.01") as base:
        host, port = base.split("//")[1].split(":")
        with httpx.Client(base_url=base, timeout=60) as client:
            _stream_text(client)  # warm slot 0 so that every run below reuses the same prefix
            alone = _stream_text(client)
            assert alone

            result: list[str] = []
            runner = threading.Thread(target=lambda: result.append(_stream_text(httpx.Client(base_url=base,
                                                                                              timeout=60))))
            side: list[str] = []
            helpers = [threading.Thread(target=_trickle, args=((host, int(port)), side)),
                       threading.Thread(target=_cut_stream, args=(base,)),
                       threading.Thread(target=_chunked, args=(base, side))]
            runner.start()
            for h in helpers:
                h.start()
            problems = []
            rounds = 0
            while runner.is_alive() or rounds == 0:
                rounds += 1
                problems += [p for case in HOSTILE if (p := _check(client, case))]
            runner.join()
            for h in helpers:
                h.join(30)
            assert not problems, problems
            assert sorted(side) == ["chunked", "trickle"]
            assert result == [alone], "the stream changed while bad requests ran beside it"
            assert _stream_text(client) == alone  # and after them

            health = client.get("/health").json()["scheduler"]
            assert health["active"] == 0
            assert health["admitted"] == health["completed"] + health["failed"] + health["cancelled"]
            assert health["failed"] == 0
