"""A YAML loader that remembers the line of every mapping, so lint messages can say file:line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class LineMap:
    """Line numbers of loaded mappings, keyed by object identity (the objects stay alive)."""

    def __init__(self) -> None:
        self._lines: dict[int, int] = {}
        self._keep: list[Any] = []

    def add(self, obj: Any, line: int) -> None:
        self._lines[id(obj)] = line
        self._keep.append(obj)

    def line(self, obj: Any) -> int | None:
        return self._lines.get(id(obj))


def load_with_lines(path: Path) -> tuple[Any, LineMap]:
    """Parse one YAML file; raise yaml.YAMLError (which carries a mark) on bad syntax."""
    return parse_with_lines(path.read_text(encoding="utf-8"))


def parse_with_lines(text: str) -> tuple[Any, LineMap]:
    """Parse YAML text, remembering each mapping's line."""
    lines = LineMap()

    class _Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=True)
        lines.add(mapping, node.start_mark.line + 1)
        return mapping

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    data = yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    return data, lines
