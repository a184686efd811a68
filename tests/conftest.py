"""Shared fixtures: the shipped spec, and a scratch copy of it for tests that break it."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from colibri.spec import Spec

SOURCE = Path(__file__).resolve().parent.parent / "colibri"


def pytest_configure(config: pytest.Config) -> None:
    """`python -m pytest` puts the working folder first on sys.path, so in a clone whose package
    was installed with `pip install .` the source tree's colibri (which has no compiled engine)
    hides the installed one, and tests die on "cannot import name '_engine'". Say what to do
    instead, before any test module imports it (colibri is imported lazily in this file)."""
    found = importlib.util.find_spec("colibri")
    if (found is not None and found.origin is not None and Path(found.origin).resolve().parent == SOURCE
            and not any(SOURCE.glob("_engine*.so")) and not any(SOURCE.glob("_engine*.pyd"))):
        pytest.exit("this checkout's colibri/ has no compiled engine (`pip install .` built it into "
                    "site-packages, and `python -m pytest` imports the checkout first): run "
                    "`python -m pip install -e '.[test]'` once here, then `python -m pytest tests/test_x.py` "
                    "tests the checkout as you edit it (`tox` tests the built wheel instead)", returncode=4)


@pytest.fixture(scope="session")
def spec() -> Spec:
    from colibri.spec import load_spec

    return load_spec()


@pytest.fixture
def spec_copy(tmp_path: Path) -> Path:
    """A writable copy of spec/ (the schemas stay the shipped ones)."""
    from colibri.paths import data_dir

    dst = tmp_path / "spec"
    shutil.copytree(data_dir("spec"), dst)
    return dst
