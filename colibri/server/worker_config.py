"""The HTTP worker's limits as gunicorn settings, one per worker-scope row of the settings table
(colibri/settings.py): `colibri serve` sets them on gunicorn's config, and the worker reads
them from its own `cfg`, so they reach the worker process with the rest of its configuration
rather than through the environment. Registering them is importing this module, which must
happen before the gunicorn application builds its config."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gunicorn.config import Setting as GunicornSetting

from ..settings import SETTINGS, Settings

PREFIX = "colibri_"
WORKER_SETTINGS = tuple(s for s in SETTINGS if s.scope == "worker")


def _validator(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: kind(value)


for _s in WORKER_SETTINGS:
    type(f"Colibri_{_s.name}", (GunicornSetting,), {
        "name": PREFIX + _s.name, "section": "colibri", "validator": _validator(_s.type), "type": _s.type,
        "default": _s.default, "desc": _s.help})


def configure(cfg: Any, settings: Settings) -> None:
    """Put the worker's limits from `settings` on gunicorn's config."""
    for s in WORKER_SETTINGS:
        cfg.set(PREFIX + s.name, getattr(settings, s.name))


def limit(cfg: Any, name: str) -> Any:
    """One limit as the worker's config holds it (the table's default under a gunicorn that
    built its config before this module registered the settings, e.g. `gunicorn -k`)."""
    try:
        return getattr(cfg, PREFIX + name)
    except AttributeError:
        return next(s.default for s in WORKER_SETTINGS if s.name == name)
