"""`colibri spec diff`: classification of crafted before/after pairs in a scratch git repo."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from colibri.cli import main
from colibri.paths import data_dir

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    shutil.copytree(data_dir("spec"), r / "spec")
    shutil.copytree(data_dir("schemas"), r / "schemas")
    git(r, "init", "-q", "-b", "main")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "base")
    return r


def change(repo: Path, rel: str, old: str, new: str) -> None:
    p = repo / rel
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))


def run_diff(repo: Path, capsys, *extra: str) -> tuple[int, list[dict]]:
    code = main(["spec", "diff", "HEAD", "--repo", str(repo), "--spec", str(repo / "spec"), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def kinds(changes: list[dict], subject_prefix: str) -> set[str]:
    return {c["kind"] for c in changes if c["subject"].startswith(subject_prefix)}


def test_no_change(repo, capsys):
    assert run_diff(repo, capsys) == (0, [])


def test_text_change_is_not_breaking(repo, capsys):
    change(repo, "spec/30-fields.yaml", "One process decodes one continuation", "A single process decodes one continuation")
    code, changes = run_diff(repo, capsys)
    assert code == 0 and kinds(changes, "req.n.one") == {"changed"}


def test_added_rule(repo, capsys):
    change(repo, "spec/40-completions.yaml", "rules:\n", """rules:
  - id: cmpl.new.rule
    title: A new informational rule
    level: INFO
    profiles: [completions]
    kind: wire
    modes: [unary]
    endpoints: [completions]
    body: Nothing is checked; this rule only reports.
    source: ["test"]
""")
    code, changes = run_diff(repo, capsys)
    assert code == 0 and {"kind": "added", "subject": "cmpl.new.rule", "detail": "new INFO rule"} in changes


def test_removed_rule_is_breaking(repo, capsys):
    text = (repo / "spec/75-generation.yaml").read_text()
    start = text.index("  - id: gen.repeat-exactly")
    (repo / "spec/75-generation.yaml").write_text(text[:start])
    code, changes = run_diff(repo, capsys)
    assert code == 1 and kinds(changes, "gen.repeat-exactly") == {"BREAKING"}
    assert main(["spec", "diff", "HEAD", "--repo", str(repo), "--spec", str(repo / "spec"), "--allow-breaking"]) == 0


def test_must_loosened_is_breaking(repo, capsys):
    text = (repo / "spec/30-fields.yaml").read_text()
    i = text.index("  - id: req.seed.integer")
    j = text.index("level: MUST", i)
    (repo / "spec/30-fields.yaml").write_text(text[:j] + "level: SHOULD" + text[j + len("level: MUST"):])
    code, changes = run_diff(repo, capsys)
    assert code == 1
    assert {"kind": "BREAKING", "subject": "req.seed.integer", "detail": "level MUST -> SHOULD"} in changes


def test_narrowed_range_refuses_a_previously_accepted_request(repo, capsys):
    change(repo, "spec/30-fields.yaml", "range: {min: 0, max: 2}, error: invalid_value}",
           "range: {min: 0, max: 1.5}, error: invalid_value}")
    code, changes = run_diff(repo, capsys)
    assert code == 1
    assert any(c["kind"] == "BREAKING" and "previously accepted request now refused by req.temperature.range"
               in c["detail"] for c in changes)


def test_changed_expected_code_is_breaking(repo, capsys):
    change(repo, "spec/30-fields.yaml", "{name: two, request: {n: 2}, expect: {status: 400, code: unsupported_value",
           "{name: two, request: {n: 2}, expect: {status: 400, code: invalid_value")
    code, changes = run_diff(repo, capsys)
    assert {"kind": "BREAKING", "subject": "req.n.one[two]",
            "detail": "expected code 'unsupported_value' -> 'invalid_value'"} in changes


def test_error_status_change_is_breaking(repo, capsys):
    change(repo, "spec/errors.yaml", "  - code: request_too_large\n    status: 413", "  - code: request_too_large\n    status: 400")
    _, changes = run_diff(repo, capsys)
    assert kinds(changes, "error request_too_large") == {"BREAKING"}


def test_response_property_removed_is_breaking(repo, capsys):
    path = repo / "schemas/chat.response.json"
    doc = json.loads(path.read_text())
    del doc["properties"]["usage"]
    doc["required"].remove("usage")
    path.write_text(json.dumps(doc))
    _, changes = run_diff(repo, capsys)
    assert {"kind": "BREAKING", "subject": "chat.response.json:usage", "detail": "response property removed"} in changes


def test_family_capability_off_is_breaking(repo, capsys):
    change(repo, "spec/families.yaml", "    logprobs: true\n", "    logprobs: false\n")
    _, changes = run_diff(repo, capsys)
    assert {"kind": "BREAKING", "subject": "family glm", "detail": "capability logprobs switched off"} in changes


def test_revision_without_spec_reports_everything_added(tmp_path, capsys):
    r = tmp_path / "empty"
    (r / "x").mkdir(parents=True)
    (r / "x" / "f").write_text("x")
    git(r, "init", "-q", "-b", "main")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "first")
    shutil.copytree(data_dir("spec"), r / "spec")
    shutil.copytree(data_dir("schemas"), r / "schemas")
    code, changes = run_diff(r, capsys)
    assert code == 0 and changes and {c["kind"] for c in changes} == {"added"}
