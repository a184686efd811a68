"""pytest plugin face of the suite: `pytest conformance/ [--base-url URL]` collects one test
per selected rule, named by its id. The CLI (`colibri-conform`) runs the same rules with
reports; this is for people who live in pytest."""
from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    g = parser.getgroup("colibri-conform")
    g.addoption("--base-url", default=None, help="target server; default: the in-process reference server")
    g.addoption("--api-key", default=None, help="key sent as Bearer and x-api-key")
    g.addoption("--model", default=None, help="model id for requests against --base-url")
    g.addoption("--conform-profile", action="append", default=None, help="rule profile (repeatable)")
    g.addoption("--conform-include-should", "--conform-strict", dest="conform_include_should", action="store_true",
                help="also run SHOULD rules, as colibri-conform --include-should (--conform-strict: its old "
                     "spelling; the stricter contract is --conform-profile strict)")


def pytest_generate_tests(metafunc: Any) -> None:
    if "rule" not in metafunc.fixturenames:
        return
    from colibri.spec import load_spec

    from .suite import PROFILES_ALL, REMOTE_DEFAULT, Selection, skip_reason

    cfg = metafunc.config
    remote = bool(cfg.getoption("--base-url"))
    sel = Selection(profiles=cfg.getoption("--conform-profile") or (
        list(REMOTE_DEFAULT) if remote else list(PROFILES_ALL)),
                    strict=cfg.getoption("conform_include_should"), remote=remote)
    spec = load_spec()
    rules = [r for r in spec.rules if skip_reason(r, sel) is None]
    metafunc.parametrize("rule", rules, ids=[r.id for r in rules])


@pytest.fixture(scope="session")
def conform_env(request: Any) -> Any:
    from colibri.spec import load_spec

    from .suite import PROFILES_ALL, REMOTE_DEFAULT, Selection
    from .targets import remote_target

    cfg = request.config
    spec = load_spec()
    url = cfg.getoption("--base-url")
    sel = Selection(profiles=cfg.getoption("--conform-profile") or (
        list(REMOTE_DEFAULT) if url else list(PROFILES_ALL)),
                    strict=cfg.getoption("conform_include_should"), remote=bool(url))
    if url:
        key = cfg.getoption("--api-key")
        target = remote_target(url, {"Authorization": f"Bearer {key}", "x-api-key": key} if key else {},
                               cfg.getoption("--model"))
        yield spec, sel, (lambda v: target), None
        return
    from .inprocess import ServerPool

    pool = ServerPool(spec=spec)
    yield spec, sel, (lambda v: pool.target(v.server)), (lambda v: pool.release(v.server))
    pool.close()
