"""`colibri spec docs`: a page per topic, a section per rule, the tables, and examples."""
from __future__ import annotations

from colibri.cli import main


def test_docs_cover_every_rule(spec, tmp_path, capsys):
    out = tmp_path / "docs"
    assert main(["spec", "docs", str(out)]) == 0
    index = (out / "index.md").read_text()
    for topic in spec.topics:
        page = (out / f"{topic.name}.md").read_text()
        assert f"({topic.name}.md)" in index
        for rule in topic.rules:
            assert f"### `{rule.id}` — {rule.title}" in page
            assert rule.body.strip().splitlines()[0] in page
    errors = (out / "errors.md").read_text()
    assert all(f"`{code}`" in errors for code in spec.errors)
    assert "| `glm` |" in (out / "families.md").read_text()


def test_docs_show_vectors_as_examples(tmp_path):
    out = tmp_path / "docs"
    main(["spec", "docs", str(out)])
    page = (out / "logprobs.md").read_text()
    assert "- **true-refused** — `completions` with request `{\"logprobs\": true}` → 400 · code `invalid_type` · param `logprobs`" in page
    assert "| `top_logprobs` (chat) | range {\"min\": 0, \"max\": 32} | `invalid_value` |" in page
