"""Shared fixtures: the shipped spec, and a scratch copy of it for tests that break it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from colibri.paths import data_dir
from colibri.spec import Spec, load_spec


@pytest.fixture(scope="session")
def spec() -> Spec:
    return load_spec()


@pytest.fixture
def spec_copy(tmp_path: Path) -> Path:
    """A writable copy of spec/ (the schemas stay the shipped ones)."""
    dst = tmp_path / "spec"
    shutil.copytree(data_dir("spec"), dst)
    return dst
