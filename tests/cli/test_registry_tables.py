"""docs/architecture.md's registry tables are the registries': regenerated here and compared
with the committed page."""

from __future__ import annotations

import pytest

from oasr.cli import registry_tables
from oasr.cli.registry_tables import BEGIN, DOC, END, render, replace_block


def test_the_committed_tables_are_the_registries():
    page = DOC.read_text()
    assert replace_block(page, render()) == page, (
        f"{DOC} disagrees with the registries: run python -m oasr.cli.registry_tables --write "
        "and commit the page")


def test_every_in_tree_entry_has_its_row():
    from oasr.engine.decode.registry import DECODE_STRATEGIES
    from oasr.models.registry import MODEL_REGISTRY

    body = render()
    assert f"### Architectures ({len(MODEL_REGISTRY)} registered)" in body
    assert f"### Decode families ({len(DECODE_STRATEGIES)} registered)" in body
    for name in (*MODEL_REGISTRY.names(), *DECODE_STRATEGIES.names()):
        assert f"| `{name}` |" in body, name


def test_check_mode_names_the_fix_when_stale(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "architecture.md"
    stale.write_text(f"# page\n\n{BEGIN}\nold tables\n{END}\n\nafter\n")
    monkeypatch.setattr(registry_tables, "DOC", stale)
    assert registry_tables.main(["--check"]) == 1
    assert "--write" in capsys.readouterr().err
    assert registry_tables.main(["--write"]) == 0
    assert registry_tables.main(["--check"]) == 0
    assert stale.read_text().endswith(f"{END}\n\nafter\n")


def test_a_page_without_markers_is_refused():
    with pytest.raises(ValueError, match="no generated block"):
        replace_block("# no markers here\n", "body")
