"""`colibri serve`'s gunicorn application: one gthread worker (the model lives in one process)
with the admitting worker class, its limits on gunicorn's config, and the hooks that close the
scheduler at SIGTERM and write the KV state at exit."""
from __future__ import annotations

import signal
from typing import Any

from gunicorn.app.base import BaseApplication

from .engine_kernels import kernels_note
from .engine_threads import threads_note
from .server import worker_config
from .settings import Settings


class ServeApplication(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, threads: int, model: Any, spec: Any, family_note: str):
        self.settings = settings
        self.threads = threads
        self.model = model
        self.spec = spec
        self.family_note = family_note
        self.service: Any = None  # built in the worker by load()
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        self.cfg.set("bind", f"[{s.host}]:{s.port}" if ":" in s.host else f"{s.host}:{s.port}")
        self.cfg.set("workers", 1)
        self.cfg.set("worker_class", "colibri.server.worker.AdmittingThreadWorker")
        self.cfg.set("threads", self.threads)
        self.cfg.set("timeout", 0)  # generation may take longer than any heartbeat
        self.cfg.set("graceful_timeout", 30)
        self.cfg.set("keepalive", int(s.idle_timeout))  # rule ops.keepalive.idle
        self.cfg.set("limit_request_line", 8190)
        worker_config.configure(self.cfg, s)
        # No control socket: gunicorn's default path is one per user, so a second server
        # would replace (and on exit delete) the first one's, and its `worker add` would
        # start another model worker on the same --kv-dir (rule ops.control-socket.none).
        if "control_socket_disable" in self.cfg.settings:  # gunicorn 25 and later have one
            self.cfg.set("control_socket_disable", True)
        self.cfg.set("post_worker_init", self._post_worker_init)
        self.cfg.set("worker_exit", self._worker_exit)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        # The requests still running at SIGTERM have finished (or the grace period ran
        # out): write the KV state they left before the process ends.
        if self.service is not None:
            self.service.close()

    def _post_worker_init(self, worker: Any) -> None:
        # Release queued requests with 503 scheduler_closed as soon as shutdown starts.
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: Any) -> None:
            if self.service is not None:
                self.service.scheduler.close()
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)

    def load(self) -> Any:
        from .server.app import create_app
        from .server.service import Service

        settings, model = self.settings, self.model
        self.service = svc = Service(settings, model=model, spec=self.spec)
        for slot, what in sorted(svc.kv_report.items()):
            print(f"colibri: KV slot {slot}: {what}", flush=True)
        print(f"colibri: family {settings.family} ({self.family_note})", flush=True)
        print(f"colibri: weights: {model.weights_note(settings.dequantize)}", flush=True)
        print(f"colibri: engine: {threads_note(settings.n_threads)}; {kernels_note(svc.scheduler.engine)}", flush=True)
        quality = model.quality_note(settings.dequantize, getattr(svc.scheduler.engine, "kernels", None))
        if quality:
            print(f"colibri: quality: {quality}", flush=True)
        print(f"colibri: answers stop at {settings.max_tokens} tokens when a request sets no limit (--max-tokens): "
              "finish_reason length, stop_reason max_tokens, or status incomplete", flush=True)
        print(f"colibri: serving {settings.model_id} (family {settings.family}, {model.config.n_ctx}-token context, "
              f"{settings.kv_slots} KV slots, model {model.path}) on http://{settings.host}:{settings.port}/v1",
              flush=True)
        return create_app(svc)
