"""Which row of spec/families.yaml fits a model: read from the model's own chat template.

Each row lists `template_markers`, strings its templates always contain (role markers, the
tool-call syntax). The row whose markers all appear wins, the one with the most markers
first (qwen-xml's `<function=` beats chatml, which beats a ChatML template with no tool
block); a template matching no row with markers gets `plain`, which refuses what it
cannot render. `--family` overrides the guess.
"""
from __future__ import annotations

from typing import Any


def detect_family(template: str | None, spec: Any) -> tuple[str, str]:
    """(family id, why) for a chat template's text."""
    if template is None:
        return "plain", "the model has no chat template of its own"
    best: tuple[int, str, list[str]] | None = None
    for fid, fam in spec.families.items():
        markers = list(fam.row.get("template_markers") or [])
        if markers and all(m in template for m in markers) and (best is None or len(markers) > best[0]):
            best = (len(markers), fid, markers)
    if best is None:
        return "plain", "its chat template matches no family's markers"
    return best[1], "its chat template contains " + ", ".join(best[2])
