"""Where the shipped data lives: the checkout's top-level folders, or the installed copy."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the folder `name` (spec, schemas, web): COLI_<NAME>_DIR, the checkout, or the wheel."""
    override = os.environ.get(f"COLI_{name.upper()}_DIR")
    if override:
        return Path(override)
    checkout = PACKAGE.parent / name
    if checkout.is_dir() and (PACKAGE.parent / "pyproject.toml").is_file():
        return checkout
    return PACKAGE / "data" / name


MODELS = PACKAGE / "models"
EMBEDDED_MODEL = MODELS / "tiny"
