"""The generated documentation pages (CLI reference, API reference, operator table) are
what ``scripts/gen_docs.py`` writes now; the API page names every public name."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def gen_docs() -> ModuleType:
    """The maintainers' script, imported from its file."""
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_up_to_date() -> None:
    for path, text in gen_docs().pages().items():
        shown = path.read_text(encoding="utf-8")
        assert shown == text, f"{path.relative_to(ROOT)} is stale: run python scripts/gen_docs.py"


def test_the_cli_page_has_every_command() -> None:
    import typer.main

    from stargraph_mem.cli import app

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    group: Any = typer.main.get_command(app)
    names = sorted(group.commands)
    assert "consolidate" in names
    for name in names:
        assert f"\n## {name}\n" in page, name


def test_the_api_page_documents_every_public_name() -> None:
    import stargraph_mem
    import stargraph_mem.stores

    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    for name in stargraph_mem.__all__:
        assert f"::: stargraph_mem.{name}\n" in page, name
    for name in stargraph_mem.stores.__all__:
        assert f"stargraph_mem.{name}\n" in page or f"stores.{name}\n" in page, name
