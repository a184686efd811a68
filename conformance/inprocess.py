"""In-process reference servers, one per distinct `server` block of the spec vectors, all on
one loaded model (the Cython-bound engine, no sockets). Test-only settings (busy slots, a
closing scheduler, an injected fault) are applied here, not in the server."""
from __future__ import annotations

import json
import logging
from typing import Any

from colibri.model import Model
from colibri.paths import EMBEDDED_FAMILY
from colibri.server.app import create_app
from colibri.server.service import Service, Settings
from colibri.settings import VECTOR_SETTINGS

from .targets import InProcessTarget, RunTargets


def model_target(path: Any, *, model_id: str | None = None, kv_slots: int = 1, n_threads: int = 0,
                 dequantize: bool = False, systemone_prompt: str = "shared-first") -> tuple[InProcessTarget, Service]:
    """colibri in-process on a model directory or GGUF file, with the family its own chat
    template shows (as `colibri serve --model` detects it): for comparisons with other servers."""
    from colibri.families import detect_family
    from colibri.spec import load_spec

    model = Model(path)
    family, _ = detect_family(model.own_template(), load_spec())
    svc = Service(Settings(model_id=model_id or model.name, family=family, kv_slots=kv_slots, n_threads=n_threads,
                           dequantize=dequantize, systemone_prompt=systemone_prompt), model=model)
    return InProcessTarget(create_app(svc), {"Host": "localhost"}, model=svc.settings.model_id), svc


class ServerPool:
    def __init__(self, family: str = EMBEDDED_FAMILY, wrap: Any = None, spec: Any = None) -> None:
        from colibri.spec import load_spec

        self.model = Model()
        self.spec = spec or load_spec()  # read once: parsing the tables costs more than a server
        self.wrap = wrap  # a WSGI wrapper applied to every app (the suite's own tests inject defects)
        self.family = family  # for vectors that do not name one
        self.services: dict[str, Service] = {}
        self.apps: dict[int, Any] = {}  # one app (and test client) per service, built once

    def _conf(self, server: dict[str, Any]) -> dict[str, Any]:
        # the settings of the block (colibri/settings.py marks them); the rest are test knobs
        conf = {"family": self.family} | {k: v for k, v in server.items() if k in VECTOR_SETTINGS}
        if "engine_delay" in server:
            conf["step_delay"] = server["engine_delay"]
        return conf

    def service(self, server: dict[str, Any]) -> Service:
        conf = self._conf(server)
        key = json.dumps(conf, sort_keys=True)
        if key not in self.services:
            self.services[key] = Service(Settings(**conf), model=self.model, spec=self.spec)
        return self.services[key]

    def target(self, server: dict[str, Any]) -> InProcessTarget:
        svc = self.service(server)
        if server.get("busy"):
            svc.scheduler.busy.update(range(svc.settings.kv_slots))
        if server.get("busy_slots"):
            svc.scheduler.busy.update(server["busy_slots"])
        if server.get("closing"):
            svc.scheduler.close()
        if id(svc) not in self.apps:
            app = create_app(svc)
            self.apps[id(svc)] = InProcessTarget(self.wrap(app) if self.wrap else app)
        if server.get("fault") == "mid-stream":
            _fail_after_tokens(svc, 3)
        if server.get("fault") == "engine-thread" and svc.scheduler.failed is None:
            _kill_engine_thread(svc)
        if server.get("fault") == "raise":
            logging.getLogger("colibri.server").setLevel(logging.CRITICAL)  # the fault is the point
            def boom(*a: Any, **k: Any) -> Any:
                raise RuntimeError("injected fault")
            svc.render = boom  # type: ignore[method-assign]
        return self.apps[id(svc)]

    def release(self, server: dict[str, Any]) -> None:
        """Undo the test-only state a vector put on a shared service."""
        if any(k in server for k in ("busy", "busy_slots", "closing", "fault")):
            svc = self.services.pop(json.dumps(self._conf(server), sort_keys=True), None)
            if svc is not None:
                self.apps.pop(id(svc), None)
                svc.scheduler.close()

    def close(self) -> None:
        for s in self.services.values():
            s.scheduler.close()



def pool_run_targets(spec: Any, family: str) -> RunTargets:
    """Each vector to the in-process server its `server` block asks for, on one loaded model."""
    pool = ServerPool(family=family, spec=spec)

    def phase_target() -> dict[str, Any]:
        fresh = pool.target({})  # vectors with test-only state may have retired the probe's server
        return {"app": fresh.client.app, "target": fresh}

    return RunTargets(f"in-process reference server (family {family})", pool.target({}),
                      lambda vector: pool.target(vector.server), lambda vector: pool.release(vector.server),
                      phase_target)

def _kill_engine_thread(svc: Service) -> None:
    """Break the engine thread's own loop (not one task's work) the way a bug would, and wait
    until its supervisor has failed the work it held (rule ops.engine.supervised)."""
    from colibri.server.task import Task

    def boom() -> None:
        raise RuntimeError("injected engine-loop fault")

    logging.getLogger("colibri.server").setLevel(logging.CRITICAL + 1)  # the fault is the point
    svc.scheduler._step = boom  # type: ignore[method-assign]
    probe = Task(prompt=[1, 2, 3], max_new=1, end_tokens=frozenset())
    svc.scheduler.admit(probe)
    svc.scheduler.thread.join(timeout=10)


def _fail_after_tokens(svc: Service, n: int) -> None:
    """Make sampling fail once a request has had `n` tokens: an engine fault after the stream's
    200 (rule stream.error-after-commit)."""
    real = svc.scheduler._sample_rows
    calls = {"n": 0}

    def flaky(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > n:
            raise RuntimeError("injected sampling fault")
        return real(*args)

    logging.getLogger("colibri.server").setLevel(logging.CRITICAL + 1)  # the fault is the point
    svc.scheduler._sample_rows = flaky  # type: ignore[assignment]
