"""colibri-conform as a user runs it: exit codes, reports valid against their schema, the
dry-run listing, expectations, matrix and diff."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from colibri.schemas import validator
from conformance.cli import main
from conformance.report import embedded_reports

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("conform")
    code = main(["-q", "--json", str(out / "r.json"), "--junit", str(out / "r.xml"), "--markdown", str(out / "r.md"),
                 "--html", str(out / "html")])
    return code, out


def test_reference_server_exits_0_with_valid_reports(run):
    code, out = run
    assert code == 0
    doc = json.loads((out / "r.json").read_text())
    validator("conform-report.json").validate(doc)
    assert doc["summary"]["FAIL"] == 0 and doc["summary"]["ERROR"] == 0 and doc["summary"]["PASS"] > 130
    root = ET.parse(out / "r.xml").getroot()
    assert root.tag == "testsuite" and int(root.get("failures")) == 0 and int(root.get("tests")) > 400
    page = (out / "html" / "index.html").read_text()
    assert embedded_reports(page) == [doc] and "renderReports(" in page  # the report, drawn by web/report.js
    assert "## Compat profile" in (out / "r.md").read_text()
    assert doc["compat"]["developer_role"] is True and doc["compat"]["pi_compat"]["maxTokensField"] == "max_completion_tokens"


def test_nothing_selected_exits_3(capsys):
    assert main(["--rule", "no.such.rule"]) == 3
    assert "no rule selected" in capsys.readouterr().err


def test_list_is_a_dry_run(capsys):
    assert main(["--list", "--profile", "anthropic"]) == 0
    out = capsys.readouterr().out
    assert "run  msgs.response.shape" in out and "skip chat.stop.trimmed" in out


def test_bad_expectations_file_exits_2(tmp_path):
    f = tmp_path / "exp.yaml"
    f.write_text("no.such.rule: because\n")
    assert main(["--rule", "req.n", "--expectations", str(f)]) == 2


def test_expectation_that_now_passes_is_reported(tmp_path, capsys):
    f = tmp_path / "exp.yaml"
    f.write_text("req.n.one: we used to accept n=2\n")
    assert main(["-q", "--rule", "req.n.one", "--expectations", str(f)]) == 0
    assert "req.n.one is listed in --expectations but now passes" in capsys.readouterr().out


def test_unreachable_target_exits_3():
    assert main(["--base-url", "http://127.0.0.1:9/v1", "--rule", "req.n"]) == 3


def test_matrix_and_diff(run, tmp_path, capsys):
    _, out = run
    doc = json.loads((out / "r.json").read_text())
    worse = json.loads(json.dumps(doc))
    worse["target"] = "worse"
    next(r for r in worse["rules"] if r["id"] == "req.n.one")["outcome"] = "FAIL"
    (tmp_path / "w.json").write_text(json.dumps(worse))
    assert main(["matrix", str(out / "r.json"), str(tmp_path / "w.json"), "--html", str(tmp_path / "m")]) == 0
    assert "| `req.n.one` | PASS | FAIL |" in capsys.readouterr().out
    assert embedded_reports((tmp_path / "m" / "index.html").read_text()) == [doc, worse]  # one page, both columns
    assert main(["diff", str(out / "r.json"), str(tmp_path / "w.json")]) == 1
    assert "regression req.n.one: PASS -> FAIL" in capsys.readouterr().out


def test_replay_and_remote_run_against_a_live_server(tmp_path, capsys):
    from live_server import live_server

    with live_server() as base:
        assert main(["replay", "chat.stop.trimmed[mid-text]", "--base-url", base + "/v1"]) == 0
        assert '"outcome": "PASS"' in capsys.readouterr().out
        code = main(["--base-url", base + "/v1", "--profile", "openai", "-q", "--fuzz", "5",
                     "--json", str(tmp_path / "remote.json")])
        doc = json.loads((tmp_path / "remote.json").read_text())
        assert code == 0 and doc["summary"]["FAIL"] == 0 and doc["summary"]["PASS"] > 40
