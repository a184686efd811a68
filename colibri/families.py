"""Which row of spec/families.yaml fits a model: read from the model's own chat template.

Each row lists `template_markers`, strings its templates always contain (role markers, the
tool-call syntax). The row whose markers all appear wins, the one with the most markers
first (qwen-xml's `<function=` beats chatml, which beats a ChatML template with no tool
block); a template matching no row with markers gets `plain`, which refuses what it
cannot render. `--family` overrides the guess.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def family_rows(spec_root: Path | None = None) -> dict[str, dict[str, Any]]:
    """The rows of families.yaml by id, read alone (loading the whole spec takes seconds; a
    command that only needs this table should not wait for it)."""
    from .spec.tables import table

    return {row["id"]: row for row in table("families.yaml", spec_root).get("families", [])}


def detect_family(template: str | None, spec: Any) -> tuple[str, str]:
    """(family id, why) for a chat template's text."""
    return detect_family_in_rows(template, {fid: fam.row for fid, fam in spec.families.items()})


def detect_family_in_rows(template: str | None, rows: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """detect_family over families.yaml's rows (as family_rows returns them)."""
    if template is None:
        return "plain", "the model has no chat template of its own"
    best: tuple[int, str, list[str]] | None = None
    for fid, row in rows.items():
        markers = list(row.get("template_markers") or [])
        if markers and all(m in template for m in markers) and (best is None or len(markers) > best[0]):
            best = (len(markers), fid, markers)
    if best is None:
        return "plain", "its chat template matches no family's markers"
    return best[1], "its chat template contains " + ", ".join(best[2])
