"""The Locust side of `colibri-conform load`: the user class, the per-process state its users
share, and how records reach the master.

Importing this module imports Locust, which monkey-patches the process with gevent: only the
load command imports it. Each user is one client with its own connection pool (the suite's
HttpTarget), sending plan items in turn — every tenth (by default) a long stream it leaves
after the first bytes — and reporting each request to Locust's statistics (the request, and
for streams its time to first token and each inter-token gap), so Locust's stats, its spawn
control and its master/worker distribution do the load-tool work. Verdicts travel as records:
a worker sends its records to the master in custom messages every second; the master (or a
local runner) folds them."""
from __future__ import annotations

import time
from typing import Any

import gevent
from locust import User, constant, task

from ..targets import HttpTarget
from .figures import ITL, REQUEST, TTFT, label
from .judge import disconnect
from .state import Shared

#: Custom Locust messages: master -> workers, workers -> master.
PLAN, STOP, RECORDS = "colibri_plan", "colibri_stop", "colibri_records"
#: The longest a user waits on a Retry-After before its next request (a load keeps loading).
MAX_BACKOFF = 2.0


class RefusedOrWrong(Exception):
    """How a request that was not a clean 200 shows in Locust's failure table."""


def _target(sh: Shared) -> HttpTarget:
    t = HttpTarget(sh.base_url, sh.headers, timeout=sh.deadline, model=sh.model)
    t.api_key = next((v.removeprefix("Bearer ").strip() for k, v in sh.headers.items()
                      if k.lower() == "authorization"), None)
    return t


class ConformUser(User):
    """One client: sends plan items back to back, each judged as a normal run judges it."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.target: HttpTarget | None = None

    @task
    def one_request(self) -> None:
        sh: Shared | None = getattr(self.environment, "colibri", None)
        if sh is None or sh.stopping:  # a worker without its plan yet, or a load that is ending
            gevent.sleep(0.2)
            return
        if self.target is None:
            self.target = _target(sh)
        item = sh.next_item()
        sh.inflight += 1
        try:
            rec = disconnect(self.target, sh.model, sh.deadline) if item is None else sh.judge.send(item, self.target)
            sh.sent += 1
            self._report(rec)
            sh.records.append(rec.to_dict())
        finally:
            sh.inflight -= 1
        if rec.status == 429:  # wait as a client that honours Retry-After would, within reason
            ra = rec.retry_after or ""
            gevent.sleep(min(float(ra), MAX_BACKOFF) if ra.strip().isdigit() else 0.5)

    def _report(self, rec: Any) -> None:
        # Refusals under a name of their own: the figures' latency is that of answered requests.
        name = label(rec.endpoint, rec.mode) + (" (disconnecting)" if rec.key == "disconnect" else "") \
            + (" (429)" if rec.status == 429 else "")
        fire = self.environment.events.request.fire
        bad = None
        if rec.lost or rec.status != 200 or rec.failures:
            bad = RefusedOrWrong(rec.lost or (f"{rec.status}" + (f": {rec.failures[0][0]} {rec.failures[0][1]}"
                                                                  if rec.failures else "")))
        fire(request_type=REQUEST, name=name, response_time=rec.elapsed * 1000, response_length=0, exception=bad,
             context={})
        if rec.ttft is not None:
            fire(request_type=TTFT, name=name, response_time=rec.ttft * 1000, response_length=0, exception=None,
                 context={})
        for gap in rec.itl:
            fire(request_type=ITL, name=name, response_time=gap * 1000, response_length=0, exception=None, context={})

    def on_stop(self) -> None:
        if self.target is not None:
            self.target.close()


def environment(host: str) -> Any:
    from locust.env import Environment

    env = Environment(user_classes=[ConformUser], host=host)
    env.colibri = None  # type: ignore[attr-defined]
    return env


def run_local(env: Any, sh: Shared, users: int, spawn_rate: float, duration: float) -> float:
    """Run the load in this process; return the seconds it ran."""
    env.colibri = sh
    runner = env.create_local_runner()
    t0 = time.monotonic()
    runner.start(users, spawn_rate=spawn_rate)
    gevent.sleep(duration)
    sh.stopping = True
    _wait(lambda: sh.inflight == 0, sh.deadline + 5)
    seconds = time.monotonic() - t0
    runner.quit()
    return seconds


def run_master(env: Any, plan_msg: dict[str, Any], sink: list[dict[str, Any]], users: int, spawn_rate: float,
               duration: float, workers: int, bind: tuple[str, int], deadline: float, say: Any) -> float:
    """Run the load from `workers` Locust workers; their records land in `sink`."""
    runner = env.create_master_runner(master_bind_host=bind[0], master_bind_port=bind[1])
    done: set[str] = set()

    def on_records(msg: Any, **_kw: Any) -> None:
        sink.extend(msg.data["records"])
        if msg.data.get("done"):
            done.add(msg.node_id)

    runner.register_message(RECORDS, on_records)
    say(f"waiting for {workers} worker(s) on {bind[0]}:{bind[1]}")
    if not _wait(lambda: len(runner.clients.ready) >= workers, 300):
        runner.quit()
        raise RuntimeError(f"only {len(runner.clients.ready)} of {workers} workers connected within 300 s")
    ids = [c.id for c in runner.clients.ready]
    runner.send_message(PLAN, plan_msg)
    t0 = time.monotonic()
    runner.start(users, spawn_rate=spawn_rate)
    gevent.sleep(duration)
    runner.send_message(STOP)
    finished = _wait(lambda: done >= set(ids), deadline + 15)
    seconds = time.monotonic() - t0
    gevent.sleep(3.5)  # one more of Locust's worker stats reports (every 3 s) reaches the master
    runner.quit()
    if not finished:
        raise RuntimeError(f"workers {sorted(set(ids) - done)} did not report their last records")
    return seconds


def run_worker(env: Any, master: tuple[str, int], make_shared: Any) -> None:
    """Serve a master until it quits: build the plan it sends, run the users it spawns, and
    send the records back every second (and the rest, marked done, once the load stopped)."""
    runner = env.create_worker_runner(master_host=master[0], master_port=master[1])

    def on_plan(msg: Any, **_kw: Any) -> None:
        env.colibri = make_shared(msg.data)

    def on_stop(msg: Any, **_kw: Any) -> None:
        if env.colibri is not None:
            env.colibri.stopping = True

    def sender() -> None:
        while True:
            gevent.sleep(1.0)
            sh = env.colibri
            if sh is None:
                continue
            done = sh.done
            recs = sh.drain()
            if recs or done:
                runner.send_message(RECORDS, {"records": recs, "done": done})

    runner.register_message(PLAN, on_plan)
    runner.register_message(STOP, on_stop)
    runner.greenlet.spawn(sender)
    runner.greenlet.join()


def _wait(cond: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        gevent.sleep(0.1)
    return True
