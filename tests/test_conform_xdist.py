"""`pytest conformance/ -n 2` (pytest-xdist) gives the verdicts of a serial run: each worker
collects the same rules and builds its own in-process servers, so splitting the rules over
processes changes nothing a rule sees. A subset of rules keeps it small (CI shares two cores):
a few that share the default server, and ops.queue.* whose vectors need servers of their own."""
from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SUBSET = "chunk or usage or queue or role"


def verdicts(junit: Path) -> dict[str, str]:
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        out[case.get("name")] = kinds[0] if kinds else "passed"
    return out


def run(tmp: Path, *extra: str) -> dict[str, str]:
    import conformance

    junit = tmp / f"junit{len(extra)}.xml"
    # The installed package's folder (under tox, the wheel's), from a folder that is not the checkout
    suite = Path(conformance.__file__).resolve().parent
    done = subprocess.run([sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider",
                           "-k", SUBSET, f"--junitxml={junit}", *extra], cwd=tmp, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    return verdicts(junit)


def test_pytest_conformance_in_two_processes_gives_the_serial_verdicts(tmp_path):
    pytest.importorskip("xdist")
    serial = run(tmp_path)
    parallel = run(tmp_path, "-n", "2")
    assert len(serial) >= 8 and any(name.startswith("test_rule[ops.queue") for name in serial)
    assert parallel == serial
