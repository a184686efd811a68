"""`colibri spec lint`: clean on the repo, and each kind of breakage named with file and line."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from colibri.cli import main
from colibri.spec.lint import lint


def messages(root: Path) -> list[str]:
    _, problems = lint(root)
    return [str(p) for p in problems]


def edit(root: Path, name: str, old: str, new: str) -> None:
    p = root / name
    text = p.read_text()
    assert old in text, f"fixture text not found in {name}: {old!r}"
    p.write_text(text.replace(old, new, 1))


def test_repo_spec_is_clean(capsys):
    assert main(["spec", "lint"]) == 0
    assert re.search(r"ok: \d+ rules", capsys.readouterr().out)


def test_broken_spec_exits_1(spec_copy, capsys):
    edit(spec_copy, "30-fields.yaml", "level: MUST", "level: MAYBE")
    assert main(["spec", "lint", "--spec", str(spec_copy)]) == 1


BREAKAGES = [
    # (file, old, new, expected message regex)
    ("30-fields.yaml", "  - id: req.n.one\n", "  - id: req.best_of.one\n", r"30-fields\.yaml:\d+: req\.best_of\.one: duplicate rule id"),
    ("30-fields.yaml", "level: MUST", "level: MAYBE", r"30-fields\.yaml:\d+: meta-schema: at rules/0/level: 'MAYBE' is not one of"),
    ("30-fields.yaml", "  - id: req.n.one\n", "  - id: Req..One\n", r"meta-schema: at rules/\d+/id: 'Req\.\.One' does not match"),
    ("30-fields.yaml", "{field: n, type: [integer], error: invalid_type}", "{field: n, type: [integer], error: no_such_code}",
     r"req\.n\.one: check on 'n' names error 'no_such_code', which spec/errors\.yaml lacks"),
    ("30-fields.yaml", "{field: n, type: [integer], error: invalid_type}", "{field: n, shape: [integer], error: invalid_type}",
     r"30-fields\.yaml:\d+: meta-schema: at rules/2/checks/0: Additional properties are not allowed \('shape' was unexpected\)"),
    ("30-fields.yaml", "{name: two, request: {n: 2}, expect: {status: 400, code: unsupported_value",
     "{name: two, request: {n: 2}, expect: {status: 404, code: unsupported_value",
     r"req\.n\.one: vector 'two' expects status 404 but unsupported_value is 400"),
    ("30-fields.yaml", "{name: two, request: {n: 2}, expect: {status: 400, code: unsupported_value",
     "{name: two, request: {n: 2}, expect: {status: 400, code: unsupported_value, checks: [no_such_check]",
     r"req\.n\.one: vector 'two' names check 'no_such_check', which spec/checks\.yaml lacks"),
    ("30-fields.yaml", "{name: null-is-absent, request: {n: null}, expect: {status: 200}}",
     "{name: null-is-absent, request: {n: null}, invalid: true, expect: {status: 200}}",
     r"req\.n\.one: vector 'null-is-absent' is marked invalid but satisfies chat\.request\.json"),
    ("30-fields.yaml", "{name: bool, request: {n: true}, invalid: true,", "{name: bool, request: {n: true},",
     r"req\.n\.one: vector 'bool' breaks chat\.request\.json at n: True is not of type"),
    ("30-fields.yaml", "{name: two, request: {n: 2}", "{name: two, server: {colour: red}, request: {n: 2}",
     r"req\.n\.one: vector 'two' sets unknown server setting 'colour'"),
    ("50-stop.yaml", "    families: [glm]\n", "    families: [nonesuch]\n", r"stop\.implicit-role-markers: unknown family 'nonesuch'"),
    ("10-transport.yaml", "title: A body that is not JSON is refused with invalid_json\n",
     "title: A body that is not JSON is refused with invalid_json.\n", r"body\.json\.invalid: title ends with a period"),
    ("30-fields.yaml", "{name: null-is-absent, request: {n: null}, expect: {status: 200}}",
     "{name: null-is-absent, request: {n: null}, expect: {status: 200}}\n      - {name: null-is-absent, expect: {status: 200}}",
     r"req\.n\.one: duplicate vector name 'null-is-absent'"),
    ("75-generation.yaml", "    vectors:\n      - {name: hello,", "    level2: x\n    vectors:\n      - {name: hello,",
     r"75-generation\.yaml:\d+: meta-schema: .*Additional properties are not allowed \('level2' was unexpected\)"),
    ("errors.yaml", "  - code: invalid_json\n", "  - code: [invalid_json\n", r"errors\.yaml:\d+: YAML syntax error"),
    # A range whose bounds contradict each other: the sampler's inclusive minimum is refused by
    # the check itself, which lint reports instead of silently dropping the sample.
    ("30-fields.yaml", "range: {min: 0, max: 2}, error: invalid_value}", "range: {min: 5, max: 2}, error: invalid_value}",
     r"req\.temperature\.range: the range check on temperature \(chat\): its boundary sampler calls 5 valid, "
     r"its predicate refuses it"),
]


@pytest.mark.parametrize("name,old,new,pattern", BREAKAGES, ids=[b[3][:60] for b in BREAKAGES])
def test_each_breakage_is_named(spec_copy, name, old, new, pattern):
    edit(spec_copy, name, old, new)
    found = messages(spec_copy)
    assert any(re.search(pattern, m) for m in found), "\n".join(found) or "no problems reported"


def test_rule_without_vectors_is_reported(spec_copy):
    # stream.keepalive has one explicit vector and no checks: removing it leaves nothing.
    edit(spec_copy, "70-streaming.yaml",
         "    vectors:\n      - {name: slow, request: {stream: true}, server: {keepalive_seconds: 0.05, engine_delay: 0.3}, "
         "expect: {status: 200, checks: [keepalive_seen, sse_framing]}}\n", "")
    assert any("stream.keepalive: has no vector" in m for m in messages(spec_copy))


def test_missing_table_file_is_reported(spec_copy):
    (spec_copy / "families.yaml").unlink()
    assert any(m.startswith("families.yaml:1: required table file is missing") for m in messages(spec_copy))


def _checkout(tmp_path: Path) -> Path:
    """A scratch colibri checkout: pyproject.toml, spec/ and schemas/."""
    from colibri.paths import data_dir

    root = tmp_path / "clone"
    shutil.copytree(data_dir("spec"), root / "spec")
    shutil.copytree(data_dir("schemas"), root / "schemas")
    (root / "pyproject.toml").write_text('[project]\nname = "colibri"\n')
    (root / "docs").mkdir()
    return root


def test_spec_commands_read_the_checkout_they_run_in_and_say_so(tmp_path, monkeypatch, capsys):
    """Issue 50 item 9: in a clone with a non-editable install, `colibri spec lint` checked the
    installed copy and printed ok over a broken edit; it reads the checkout and names it."""
    monkeypatch.delenv("COLI_SPEC_DIR", raising=False)
    monkeypatch.delenv("COLI_SCHEMAS_DIR", raising=False)
    root = _checkout(tmp_path)
    f = root / "spec" / "30-fields.yaml"
    f.write_text(f.read_text().replace("level: MUST", "level: MAYBE", 1))
    monkeypatch.chdir(root / "docs")  # anywhere inside the checkout
    assert main(["spec", "lint"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"colibri spec: reading {root.resolve() / 'spec'} (this checkout's; --spec to read another)\n")
    assert "COLI_SCHEMAS_DIR" not in os.environ  # set for the command only
    out = tmp_path / "pages"
    f.write_text(f.read_text().replace("level: MAYBE", "level: MUST", 1))
    assert main(["spec", "docs", str(out)]) == 0
    assert "(this checkout's" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # outside any checkout: the installed package's, said so
    assert main(["spec", "lint"]) == 0
    assert "(the installed package's; run inside a checkout to read its spec/, or pass --spec)" in capsys.readouterr().err
