"""The spec's tables (errors, families, endpoints, checks, metrics), each parsed once per process and
shared by whoever reads it: the loader (which also validates them against the meta-schema),
and the modules that need one table alone, at import (the server's error classes and the
envelope of a path, server/errors.py; family detection, families.py; the scheduler's metrics,
spec/metrics.py), which should not wait
seconds for the whole spec. What these return is shared: never change it."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from ..paths import data_dir
from .yaml_lines import LineMap, parse_with_lines

METRICS_FILE = "metrics.yaml"
TABLE_FILES = ("errors.yaml", "families.yaml", "endpoints.yaml", "checks.yaml", METRICS_FILE)


@lru_cache(maxsize=16)
def _parsed(text: str) -> tuple[Any, LineMap]:
    # Keyed by the text, not the path: a spec edited on disk (lint's own tests do it) is parsed anew.
    return parse_with_lines(text)


def load_table(path: Path) -> tuple[Any, LineMap]:
    """One table file's document and line map; raises yaml.YAMLError on bad syntax."""
    return _parsed(path.read_text(encoding="utf-8"))


def table(name: str, root: Path | None = None) -> Any:
    """The document of table `name` (one of TABLE_FILES) in `root` (default: the shipped spec/)."""
    return load_table((root or data_dir("spec")) / name)[0]
