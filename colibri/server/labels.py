"""System One's label tokens: which letters and yes/no pairs the served model has as single
tokens, decided once at start-up and shown in /health (rule s1.labels.single-token)."""
from __future__ import annotations

import string
from typing import Any

LETTERS = list(string.ascii_uppercase)
NOUL_LABELS = [("Yes", "No"), ("yes", "no"), ("Y", "N")]


class Labels:
    """Which label tokens the served model offers, decided once at start-up."""

    def __init__(self, model: Any):
        def single(label: str) -> int | None:
            ids = model.encode(label)
            return ids[0] if len(ids) == 1 else None

        self.letters: list[int | None] = [single(c) for c in LETTERS]
        self.noul: tuple[list[str], list[int]] | None = None
        for pair in NOUL_LABELS:
            ids = [single(x) for x in pair]
            if None not in ids and len(set(ids)) == 2:
                self.noul = (list(pair), [i for i in ids if i is not None])
                break

    def letters_for(self, k: int) -> list[int] | None:
        ids = self.letters[:k]
        return None if None in ids or len(set(ids)) != k else [i for i in ids if i is not None]

    def report(self) -> dict[str, Any]:
        """For /health: the labels each question type uses and whether they are single tokens."""
        usable = 0
        while usable < len(LETTERS) and self.letters_for(usable + 1) is not None:
            usable += 1
        return {"choice": {"labels": f"A..{LETTERS[usable - 1]}" if usable else None, "max_options": usable},
                "score": {"labels": f"A..{LETTERS[usable - 1]}" if usable else None, "max_levels": usable},
                "noul": {"labels": self.noul[0] if self.noul else None, "available": self.noul is not None}}
