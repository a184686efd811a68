"""Rule ops.dashboard.csp for /spec and /spec.json: the same protection the dashboard has (no
script, no framing, no sniffing), with the page's one inline stylesheet allowed by its hash."""
from __future__ import annotations

import base64
import hashlib
import re

import pytest
from falcon import testing

from colibri.server.app import create_app
from colibri.server.service import Service, Settings


@pytest.fixture(scope="module")
def client():
    svc = Service(Settings(kv_slots=1))
    yield testing.TestClient(create_app(svc), headers={"Host": "localhost"})
    svc.scheduler.close()


def test_ops_dashboard_csp_spec_page_allows_only_its_own_stylesheet(client):
    got = client.simulate_get("/spec")
    assert got.status_code == 200
    csp = dict(part.strip().split(" ", 1) for part in got.headers["Content-Security-Policy"].split(";"))
    assert csp["default-src"] == "'none'"  # so no script of any kind, no connection, no image
    assert csp["frame-ancestors"] == "'none'" and csp["base-uri"] == "'none'" and csp["form-action"] == "'none'"
    assert "script-src" not in csp and "unsafe-inline" not in got.headers["Content-Security-Policy"]
    (style,) = re.findall(r"<style>(.*?)</style>", got.text, re.S)
    assert csp["style-src"] == f"'sha256-{base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()}'"
    assert got.headers["X-Content-Type-Options"] == "nosniff"


def test_ops_dashboard_csp_spec_json_is_not_sniffed_or_framed(client):
    got = client.simulate_get("/spec.json")
    assert got.status_code == 200
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in got.headers["Content-Security-Policy"]
