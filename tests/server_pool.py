"""In-process reference servers, one per distinct `server` block of the spec vectors, all on
one loaded model. Test-only settings (busy slots, a closing scheduler, an injected fault)
are applied here, not in the server."""
from __future__ import annotations

import json
from typing import Any

from colibri.model import Model
from colibri.server.app import create_app
from colibri.server.service import Service, Settings
from conformance.exchange import InProcessTarget

SETTING_KEYS = {"family", "api_key", "max_queue", "queue_timeout", "kv_slots", "allowed_hosts", "continue_assistant",
                "keepalive_seconds", "model_id"}


class ServerPool:
    def __init__(self) -> None:
        self.model = Model()
        self.services: dict[str, Service] = {}

    def service(self, server: dict[str, Any]) -> Service:
        conf = {k: v for k, v in server.items() if k in SETTING_KEYS}
        if "engine_delay" in server:
            conf["step_delay"] = server["engine_delay"]
        key = json.dumps(conf, sort_keys=True)
        if key not in self.services:
            self.services[key] = Service(Settings(**conf), model=self.model)
        return self.services[key]

    def target(self, server: dict[str, Any]) -> InProcessTarget:
        svc = self.service(server)
        if server.get("busy"):
            svc.scheduler.busy.update(range(svc.settings.kv_slots))
        if server.get("busy_slots"):
            svc.scheduler.busy.update(server["busy_slots"])
        if server.get("closing"):
            svc.scheduler.close()
        app = create_app(svc)
        if server.get("fault") == "raise":
            def boom(*a: Any, **k: Any) -> Any:
                raise RuntimeError("injected fault")
            svc.render = boom  # type: ignore[method-assign]
        return InProcessTarget(app)

    def release(self, server: dict[str, Any]) -> None:
        """Undo the test-only state a vector put on a shared service."""
        if any(k in server for k in ("busy", "busy_slots", "closing", "fault")):
            conf = {k: v for k, v in server.items() if k in SETTING_KEYS}
            if "engine_delay" in server:
                conf["step_delay"] = server["engine_delay"]
            self.services.pop(json.dumps(conf, sort_keys=True), None)

    def close(self) -> None:
        for s in self.services.values():
            s.scheduler.close()
