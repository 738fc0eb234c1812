"""Import direction (model ← ir → compiler → engine → stores, CLI on top) and start-up cost:
read from the source with ``ast``, then checked in fresh interpreters through ``sys.modules``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stargraph_mem"


def module_name(path: Path) -> str:
    """``stargraph_mem/ir/checks.py`` → ``stargraph_mem.ir.checks``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function bodies and TYPE_CHECKING too)."""
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else None
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (package or module_name(path)).split(".")
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def ours(names: set[str], *prefixes: str) -> set[str]:
    """The names that are, or lie under, one of ``prefixes``."""
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)}


def sources(subpackage: str) -> list[Path]:
    return sorted((PACKAGE / subpackage).rglob("*.py"))


@pytest.mark.parametrize("layer", ["ir", "compiler"])
def test_ir_and_compiler_import_neither_stores_nor_engine(layer: str) -> None:
    found = {
        str(p.relative_to(PACKAGE)): sorted(bad)
        for p in sources(layer)
        if (bad := ours(imported(p), "stargraph_mem.stores", "stargraph_mem.engine"))
    }
    assert found == {}


def test_stores_never_import_the_engine() -> None:
    found = {
        str(p.relative_to(PACKAGE)): sorted(bad)
        for p in sources("stores")
        if (bad := ours(imported(p), "stargraph_mem.engine"))
    }
    assert found == {}


def test_model_imports_only_itself_and_errors() -> None:
    found = {
        str(p.relative_to(PACKAGE)): sorted(bad)
        for p in sources("model")
        if (
            bad := ours(imported(p), "stargraph_mem")
            - ours(imported(p), "stargraph_mem.model", "stargraph_mem.errors")
        )
    }
    assert found == {}


def test_library_never_imports_the_cli() -> None:
    library = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "cli"]
    cli = {"stargraph_mem.cli"} | {module_name(p) for p in sources("cli")}
    found = {
        str(p.relative_to(PACKAGE)): sorted(bad) for p in library if (bad := imported(p) & cli)
    }
    assert found == {}


def run_at_import(nodes: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements among ``nodes`` that run when the module is imported: not in
    function bodies, nor under ``if TYPE_CHECKING:``."""
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            yield from run_at_import(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from run_at_import(ast.iter_child_nodes(node))


def test_root_package_imports_nothing() -> None:
    """Its public names are imported by ``__getattr__`` on first use, and by mypy from the
    ``if TYPE_CHECKING:`` block (``tests/test_public_api.py`` checks the two agree)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    found = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in run_at_import(tree.body)
        for alias in node.names
    }
    assert found == {"__future__"}


# --- in a fresh interpreter -------------------------------------------------------------


def fresh(code: str, *args: str) -> dict[str, object]:
    """Run ``code`` in a new interpreter; it prints one JSON document as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


LOADED = """
import json, sys
def loaded(*prefixes):
    return sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in prefixes))
"""


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("stargraph_mem", ("stargraph_mem.model", "stargraph_mem.engine", "stargraph_mem.stores")),
        ("stargraph_mem.stores", ("stargraph_mem.engine", "stargraph_mem.compiler", "clips")),
        ("stargraph_mem.ir.checks", ("stargraph_mem.stores", "stargraph_mem.engine", "clips")),
        ("stargraph_mem.compiler.pack", ("stargraph_mem.stores", "stargraph_mem.engine")),
    ],
)
def test_importing_a_layer_loads_nothing_above_it(module: str, forbidden: tuple[str, ...]) -> None:
    code = LOADED + f"import {module}\nprint(json.dumps({{'loaded': loaded(*sys.argv[1:])}}))"
    assert fresh(code, *forbidden) == {"loaded": []}


def test_cli_commands_that_need_no_clips_do_not_load_it(tmp_path: Path) -> None:
    db = tmp_path / "facts.db"
    db.touch()
    code = (
        LOADED
        + """
from typer.testing import CliRunner
from stargraph_mem.cli import app
runner = CliRunner()
codes = [runner.invoke(app, ["--help"]).exit_code]
after_help = loaded("clips", "stargraph_mem.compiler", "stargraph_mem.stores", "pydantic.main")
codes.append(runner.invoke(app, ["facts", "--db", sys.argv[1]]).exit_code)
after_facts = loaded("clips", "stargraph_mem.compiler", "stargraph_mem.engine.api")
print(json.dumps({"codes": codes, "help": after_help, "facts": after_facts}))
"""
    )
    assert fresh(code, str(db)) == {"codes": [0, 0], "help": [], "facts": []}


def test_memory_store_consolidates_with_only_the_store_imported(tmp_path: Path) -> None:
    code = (
        LOADED
        + """
import asyncio
from datetime import UTC, datetime
from stargraph_mem.stores.models import ConsolidationRule, Episode
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

before = loaded("stargraph_mem.engine", "clips")

async def main():
    episode = Episode(
        id="c1", content="alice likes tea", timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        user="alice", session="s1", agent="rag",
        metadata={"subject": "alice", "predicate": "likes", "object": "tea"},
    )
    async with SQLiteMemoryStore(sys.argv[1]) as store:
        await store.put(episode, user="alice", session="s1", agent="rag")
        return [(d.kind, d.rule_id) for d in await store.consolidate(ConsolidationRule(id="r1"))]

print(json.dumps({"before": before, "deltas": asyncio.run(main())}))
"""
    )
    result = fresh(code, str(tmp_path / "memory.db"))
    assert result == {"before": [], "deltas": [["add", "r1"]]}
