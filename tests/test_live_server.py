"""`colibri serve` as a real service: concurrency over slots, admission queue refusals,
disconnects, auth, host guard, CORS, limits, metrics — real HTTP on a free loopback port."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from live_server import live_server

pytestmark = pytest.mark.integration


def header(headers, name):
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def post(base, path, body, headers=None, timeout=60):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(base, path, headers=None):
    req = urllib.request.Request(base + path, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def chat(content, **kw):
    return {"model": "colibri-tiny", "messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": 40, **kw}


def stream_text(base, body):
    status, _, raw = post(base, "/v1/chat/completions", dict(body, stream=True))
    assert status == 200
    out = ""
    for line in raw.decode().split("\n"):
        if line.startswith("data: {"):
            for ch in json.loads(line[6:])["choices"]:
                out += ch["delta"].get("content") or ""
    return out


def wait_idle(base, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = get_json(base, "/health")["scheduler"]
        if s["active"] == 0 and s["queued"] == 0:
            return s
        time.sleep(0.05)
    raise AssertionError(f"server not idle: {s}")


def test_concurrent_streams_over_four_slots_get_the_tokens_they_get_alone():
    prompts = [f"Repeat exactly: {w}" for w in ("alpha beta", "café 😊", "the quick brown fox", "seven eight nine",
                                                   "ΩMEGA", "green tea", "Count", "hello world")]
    with live_server("--kv-slots", "4") as base:
        alone = [stream_text(base, chat(p)) for p in prompts]
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda p: stream_text(base, chat(p)), prompts))
        assert together == alone
        s = wait_idle(base)
        assert s["admitted"] == s["completed"] + s["failed"] + s["cancelled"] == 2 * len(prompts)
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(base + "/metrics") as r:
            fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
        value = {f.name: f.samples[0].value for f in fams.values() if f.type in ("counter", "gauge")}
        assert value["colibri_scheduler_admitted"] == 16 and value["colibri_scheduler_completed"] == 16
        assert value["colibri_scheduler_active"] == 0


def _hold_slot(base, seconds_of_tokens=200):
    """A streaming request that keeps its slot busy until the connection is closed."""
    conn = http.client.HTTPConnection(base.split("//")[1], timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat("Count from 1 to 60.", stream=True,
                                                                  max_tokens=seconds_of_tokens)),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    resp.read1(64)
    return conn, resp


def test_full_queue_and_queue_timeout_are_429_with_retry_after():
    with live_server("--kv-slots", "1", "--max-queue", "0", "--debug-step-delay", "0.05") as base:
        conn, _ = _hold_slot(base)
        status, headers, body = post(base, "/v1/chat/completions", chat("hi"))
        assert status == 429 and header(headers, "Retry-After") == "1"
        assert json.loads(body)["error"]["code"] == "queue_full"
        conn.close()
    with live_server("--kv-slots", "1", "--max-queue", "2", "--queue-timeout", "0.3", "--debug-step-delay", "0.05") as base:
        conn, _ = _hold_slot(base)
        status, headers, body = post(base, "/v1/chat/completions", chat("hi", stream=True))
        assert status == 429 and header(headers, "Retry-After") == "1"
        assert json.loads(body)["error"]["code"] == "queue_timeout"
        conn.close()


def test_disconnect_mid_stream_frees_the_slot_and_counts_a_cancel():
    with live_server("--kv-slots", "1", "--debug-step-delay", "0.02") as base:
        before = get_json(base, "/health")["scheduler"]
        conn, resp = _hold_slot(base)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        s = wait_idle(base, timeout=5)
        assert s["cancelled"] == before["cancelled"] + 1 and s["completed"] == before["completed"]
        assert post(base, "/v1/chat/completions", chat("Repeat exactly: ok"))[0] == 200


def test_disconnect_while_waiting_for_a_json_answer_cancels():
    with live_server("--kv-slots", "1", "--debug-step-delay", "0.02") as base:
        host, port = base.split("//")[1].split(":")
        s = socket.create_connection((host, int(port)))
        body = json.dumps(chat("Count from 1 to 60.", max_tokens=300)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.3)
        s.close()
        st = wait_idle(base, timeout=5)
        assert st["cancelled"] == 1


def test_auth_host_cors_and_limits():
    with live_server("--api-key", "sekrit") as base:
        assert post(base, "/v1/chat/completions", chat("hi"))[0] == 401
        assert post(base, "/v1/chat/completions", chat("hi"), {"Authorization": "Bearer nope"})[0] == 401
        assert post(base, "/v1/chat/completions", chat("hi"), {"Authorization": "Bearer sekrit"})[0] == 200
        assert post(base, "/v1/messages", {"model": "colibri-tiny", "max_tokens": 5,
                                           "messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": "sekrit"})[0] == 200
        status, _, body = post(base, "/v1/chat/completions", chat("hi"), {"Authorization": "Bearer sekrit", "Host": "evil.example"})
        assert status == 403 and json.loads(body)["error"]["code"] == "forbidden_host"
        assert "--allowed-host" in json.loads(body)["error"]["message"]
        h = get_json(base, "/health")
        assert h == {"status": "ok", "engine": "ok"}
        req = urllib.request.Request(base + "/v1/models", headers={"Authorization": "Bearer sekrit",
                                                                   "Origin": "https://evil.example"})
        with urllib.request.urlopen(req) as r:
            assert r.headers.get("Access-Control-Allow-Origin") is None
        req = urllib.request.Request(base + "/v1/models", headers={"Authorization": "Bearer sekrit",
                                                                   "Origin": "http://localhost:5173"})
        with urllib.request.urlopen(req) as r:
            assert r.headers.get("Access-Control-Allow-Origin") == "http://localhost:5173"
        # An oversize body is refused from its Content-Length, before it is read.
        host, port = base.split("//")[1].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sekrit\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n{")
            reply = b""
            while b"request_too_large" not in reply and (chunk := s.recv(65536)):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 413") and b"request_too_large" in reply


def test_refuses_public_bind_without_key():
    from colibri.serve import main

    assert main(["--host", "0.0.0.0", "--port", "1"]) == 2


def test_trickled_request_gets_408_and_is_dropped():
    """Rule ops.read-deadline: a slowloris client cannot hold a thread past the deadline."""
    with live_server("--read-deadline", "1") as base:
        host, port = base.split("//")[1].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            start = time.monotonic()
            reply = b""
            for ch in b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n":
                try:
                    s.sendall(bytes([ch]))
                except OSError:
                    break
                time.sleep(0.1)
                s.setblocking(False)
                try:
                    reply += s.recv(65536)
                except BlockingIOError:
                    pass
                s.setblocking(True)
                if reply:
                    break
            if not reply:
                s.settimeout(5)
                reply = s.recv(65536)
            assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply
            assert time.monotonic() - start < 5
        # a normal request is still served
        assert post(base, "/v1/chat/completions", chat("Repeat exactly: ok"))[0] == 200


def _cached(base, body):
    status, _, raw = post(base, "/v1/chat/completions", body)
    assert status == 200
    return json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_kv_state_survives_a_restart_and_a_torn_file_is_discarded(tmp_path):
    """Rule ops.kv-persistence."""
    kv = tmp_path / "kv"
    long_prompt = "Repeat exactly: " + " ".join(["alpha beta gamma delta"] * 20)
    body = chat(long_prompt, max_tokens=4, cache_slot=0)
    with live_server("--kv-slots", "2", "--kv-dir", str(kv)) as base:
        assert _cached(base, body) == 0
        assert _cached(base, body) > 50  # the slot holds the prefix
    assert (kv / "slot-0.colikv").exists()
    with live_server("--kv-slots", "2", "--kv-dir", str(kv)) as base:
        assert _cached(base, body) > 50  # reused after the restart
    # A process killed mid-write: a stray temporary, and a torn file under the real name.
    good = (kv / "slot-0.colikv").read_bytes()
    (kv / ".slot-1.999.tmp").write_bytes(good[:100])
    (kv / "slot-0.colikv").write_bytes(good[: len(good) // 2])
    with live_server("--kv-slots", "2", "--kv-dir", str(kv)) as base:
        assert _cached(base, body) == 0  # discarded, never loaded: a clean start
        assert not (kv / ".slot-1.999.tmp").exists()


def test_sigterm_releases_waiters_with_503_and_exits():
    """Rule ops.shutdown.scheduler-closed on a real process: a queued request gets 503
    scheduler_closed, the generating one is cut cleanly, and the process exits."""
    import os
    import signal

    procs: list = []
    with live_server("--kv-slots", "1", "--max-queue", "4", "--debug-step-delay", "0.05", process=procs) as base:
        conn, _ = _hold_slot(base)
        results: list = []
        waiter = threading.Thread(target=lambda: results.append(post(base, "/v1/chat/completions", chat("hi"))))
        waiter.start()
        deadline = time.monotonic() + 5
        while get_json(base, "/health")["scheduler"]["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(procs[0].pid, signal.SIGTERM)
        waiter.join(timeout=20)
        assert results, "the queued request never got an answer"
        status, _, body = results[0]
        assert status == 503 and json.loads(body)["error"]["code"] == "scheduler_closed"
        conn.close()
        assert procs[0].wait(timeout=35) is not None


def test_ops_auth_required_a_non_ascii_key_matches_the_bytes_clients_send():
    key = "clé-ключ"
    with live_server("--api-key", key) as base:
        host, port = base.split("//")[1].split(":")
        for header in (b"Authorization: Bearer ", b"x-api-key: "):
            for sent, status in ((key, b" 200 "), ("cle-kljuch", b" 401 ")):
                with socket.create_connection((host, int(port)), timeout=30) as s:
                    s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                              + header + sent.encode() + b"\r\n\r\n")
                    reply = b""
                    while chunk := s.recv(65536):
                        reply += chunk
                assert status in reply.split(b"\r\n", 1)[0] + b" ", (header, sent, reply[:200])
