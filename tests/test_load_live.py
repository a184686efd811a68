"""`colibri-conform load` end to end on a live `colibri serve`: the load rules pass, and a Locust
master with two workers on this machine reports the verdicts of a single-process run.

Small on purpose (CI shares two cores): a few users, a few seconds, a plan of four requests, and
a server with one slot and no queue so that eight users saturate every endpoint of it. The runs
are subprocesses: Locust monkey-patches its process with gevent, which pytest's must not be."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from live_server import free_port, live_server, stop_group

pytestmark = pytest.mark.integration

PLAN = ["--rule", "chat.response", "--rule", "stream.chunk", "--rule", "msgs.response"]
LOAD = ["--users", "8", "--duration", "6", "--disconnect-every", "3", "--batch-invariant", "-q", *PLAN]
SERVER = ("--kv-slots", "1", "--max-queue", "0", "--engine-threads", "1")


def conform(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "load", *args], capture_output=True, text=True,
                          timeout=timeout)


def verdicts(path) -> dict[str, str]:
    doc = json.loads(path.read_text())
    return {r["id"]: r["outcome"] for r in doc["rules"] if r["outcome"] != "SKIPPED"}


@pytest.fixture(scope="module")
def server():
    with live_server(*SERVER) as base:
        yield base


def test_load_rules_pass_on_colibri_serve_under_load(server, tmp_path):
    out = conform("--base-url", server, *LOAD, "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "html"))
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    got = verdicts(tmp_path / "r.json")
    load_rules = {k: v for k, v in got.items() if k.startswith("load.")}
    assert load_rules == {"load.requests.none-lost": "PASS", "load.saturation.no-5xx": "PASS",
                          "load.saturation.retry-after": "PASS", "load.disconnect.frees-capacity": "PASS",
                          "load.greedy.near-tie": "PASS", "load.greedy.divergence-rate": "PASS",
                          "load.greedy.bit-identical": "PASS"}, out.stdout
    assert set(got.values()) == {"PASS"}
    load = doc["load"]
    assert load["plan"] == {"requests": 4, "sent": 4, "excluded": load["plan"]["excluded"]}
    assert load["greedy"]["compared"] > 0 and load["disconnects"] > 0
    assert {"chat unary", "chat stream", "messages unary"} <= set(load["endpoints"])
    stream = load["endpoints"]["chat stream"]
    assert stream["requests_per_s"] > 0 and stream["ttft_ms"]["p50"] > 0 and stream["output_tokens_per_s"] > 0
    assert any(row["refused"] for row in load["timeline"])  # one slot, no queue: eight users saturate it
    page = (tmp_path / "html" / "index.html").read_text()
    assert '"timeline"' in page and "load-plot" in page


def test_load_master_and_two_workers_give_the_single_process_verdicts(server, tmp_path):
    single = conform("--base-url", server, *LOAD, "--json", str(tmp_path / "single.json"))
    assert single.returncode == 0, single.stdout + single.stderr
    port = free_port()
    master = subprocess.Popen([sys.executable, "-m", "conformance.cli", "load", "--base-url", server, *LOAD,
                               "--master", "--expect-workers", "2", "--master-bind-port", str(port),
                               "--json", str(tmp_path / "merged.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    workers = []
    try:
        time.sleep(1)
        workers = [subprocess.Popen([sys.executable, "-m", "conformance.cli", "load", "--worker", "-q",
                                     "--master-port", str(port)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(2)]
        text, _ = master.communicate(timeout=300)
        assert master.returncode == 0, text
        for w in workers:
            w.wait(timeout=60)
    finally:
        for p in [master, *workers]:
            stop_group(p, timeout=10)
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["load"]["workers"] == 2 and merged["load"]["plan"]["sent"] == 4
    one, many = verdicts(tmp_path / "single.json"), verdicts(tmp_path / "merged.json")
    # Every rule of the plan and every load rule is judged by both runs, alike. An invariant rule
    # such as err.envelope.anthropic is judged only when some answer on its endpoint was an error,
    # which depends on which requests the saturation happened to refuse: compared where both judged.
    always = {k for k in one if k.startswith(("load.", "chat.response", "stream.chunk", "msgs.response"))}
    assert always <= one.keys() and always <= many.keys(), (sorted(one), sorted(many))
    assert {k: many[k] for k in one.keys() & many.keys()} == {k: one[k] for k in one.keys() & many.keys()}
    assert set(many.values()) == {"PASS"}, many
