"""Regenerate the documentation's generated pages: the CLI reference (every command's
``--help``), the API reference (the public names) and the operator table.

Run from the repository root: ``python scripts/gen_docs.py`` (``--check`` exits 1 when a
page differs from what this script writes, as the drift test in ``tests/`` does).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer.main
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
API_PAGE = ROOT / "docs" / "reference" / "api.md"
OPERATORS_PAGE = ROOT / "docs" / "rule-packs.md"
WIDTH = "100"

CLI_HEAD = """# CLI reference

Every command of `stargraph-mem` and its `--help`, generated from the command line
itself by `scripts/gen_docs.py` (a test fails when this page is stale). Each help text
ends with examples, and the tests run every one of them. How the commands behave
(errors, `--json`, `--db`) is in [Operations](../operations.md).
"""

API_HEAD = """# API reference

The public API, generated from the docstrings. Everything a program needs is importable
from `stargraph_mem` (its `__all__`); the store contract (the specification's names,
and the repositories and records the stores exchange) from `stargraph_mem.stores`.
Names are listed by `scripts/gen_docs.py` from the two `__all__` lists.
"""


def _help(args: list[str]) -> str:
    """What ``stargraph-mem ARGS --help`` prints, at a fixed width."""
    from stargraph_mem.cli import app

    env = {"COLUMNS": WIDTH, "NO_COLOR": "1", "STARGRAPH_MEM_DB": None}
    result = CliRunner().invoke(app, [*args, "--help"], env=env, prog_name="stargraph-mem")
    if result.exit_code != 0:
        raise RuntimeError(f"stargraph-mem {' '.join(args)} --help failed: {result.output}")
    return "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")


def _commands(group: Any, prefix: list[str]) -> list[list[str]]:
    """Every command path under ``group``, in name order (groups before their commands)."""
    paths: list[list[str]] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if command.hidden:
            continue
        paths.append([*prefix, name])
        if hasattr(command, "commands"):
            paths.extend(_commands(command, [*prefix, name]))
    return paths


def cli_page() -> str:
    """The CLI reference page."""
    from stargraph_mem.cli import app

    group = typer.main.get_command(app)
    parts = [CLI_HEAD, "## stargraph-mem\n", "```text\n" + _help([]) + "\n```\n"]
    for path in _commands(group, []):
        parts.append(f"## {' '.join(path)}\n")
        parts.append("```text\n" + _help(path) + "\n```\n")
    return "\n".join(parts)


def api_page() -> str:
    """The API reference page: one mkdocstrings entry per public name."""
    import stargraph_mem
    import stargraph_mem.stores

    parts = [API_HEAD, "## stargraph_mem\n"]
    parts += [f"::: stargraph_mem.{name}\n" for name in sorted(stargraph_mem.__all__)]
    parts.append("## stargraph_mem.stores\n")
    top = set(stargraph_mem.__all__)
    names = sorted(n for n in stargraph_mem.stores.__all__ if n not in top)
    parts.append(
        "The names `stargraph_mem` also exports are documented above; the store contract "
        "adds these.\n"
    )
    parts += [f"::: stargraph_mem.stores.{name}\n" for name in names]
    return "\n".join(parts)


def operators_page() -> str:
    """The rule-pack reference with its operator table regenerated."""
    from stargraph_mem.ir.operators import with_readme_table

    return with_readme_table(OPERATORS_PAGE.read_text(encoding="utf-8"))


def pages() -> dict[Path, str]:
    """Every generated page and the text this script writes into it."""
    return {CLI_PAGE: cli_page(), API_PAGE: api_page(), OPERATORS_PAGE: operators_page()}


def main(argv: list[str]) -> int:
    """Write the pages, or with ``--check`` list the stale ones and exit 1."""
    stale = 0
    for path, text in pages().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if "--check" in argv:
            print(f"{path.relative_to(ROOT)}: stale; run python scripts/gen_docs.py")
            stale += 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
