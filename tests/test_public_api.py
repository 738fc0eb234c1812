"""The public API: ``stargraph_mem.__all__`` resolves, ``import *`` works, importing the
package alone loads nothing, mypy sees what the lazy imports give, and every Consolidator
call returns the one report type."""

from __future__ import annotations

import ast
import importlib
import inspect
from datetime import UTC, datetime
from pathlib import Path

import pytest
from readme_helpers import readme_section_example, run_example
from test_imports import fresh

import stargraph_mem
from stargraph_mem import errors
from stargraph_mem.engine.schedule.scheduler import ConsolidationReport, ScheduleReport

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def test_every_public_name_resolves_to_its_defining_module() -> None:
    lazy: dict[str, str] = stargraph_mem._LAZY
    assert set(stargraph_mem.__all__) == {*lazy, "__version__"}
    for name, module in lazy.items():
        assert getattr(stargraph_mem, name) is getattr(importlib.import_module(module), name)
    assert stargraph_mem.__version__ == "0.1.0"
    assert set(stargraph_mem.__all__) <= set(dir(stargraph_mem))
    internal = "Scheduler"
    with pytest.raises(AttributeError, match="has no attribute 'Scheduler'"):
        getattr(stargraph_mem, internal)


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from stargraph_mem import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(stargraph_mem.__all__)


def test_mypy_sees_what_the_lazy_imports_give() -> None:
    """The ``if TYPE_CHECKING:`` block imports each public name from the module
    ``__getattr__`` takes it from, and nothing else."""
    tree = ast.parse((ROOT / "stargraph_mem" / "__init__.py").read_text(encoding="utf-8"))
    [block] = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    typed = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == stargraph_mem._LAZY


def test_every_error_class_is_public() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and value.__module__ == errors.__name__
        and (issubclass(value, Exception) or name == "IRIssue")
    }
    assert defined <= set(stargraph_mem.__all__)


LOADED = """
import json, sys
before = set(sys.modules)
{statement}
print(json.dumps({{"new": sorted(set(sys.modules) - before)}}))
"""


def test_importing_the_package_loads_nothing_else() -> None:
    result = fresh(LOADED.format(statement="import stargraph_mem"))
    assert result["new"] == ["__future__", "stargraph_mem"]  # __future__: the annotations flag


@pytest.mark.parametrize(
    ("name", "forbidden"),
    [
        ("Episode", ("clips", "aiosqlite", "stargraph_mem.stores", "stargraph_mem.engine")),
        ("StargraphMemError", ("pydantic", "clips", "aiosqlite", "stargraph_mem.model")),
        ("SQLiteMemoryStore", ("clips", "stargraph_mem.engine", "stargraph_mem.compiler")),
    ],
)
def test_a_public_name_loads_only_what_it_needs(name: str, forbidden: tuple[str, ...]) -> None:
    code = f"""
    import json, sys
    from stargraph_mem import {name}
    prefixes = {forbidden!r}
    print(json.dumps({{"loaded": sorted(m for m in sys.modules if m.startswith(prefixes))}}))
    """
    assert fresh(code) == {"loaded": []}


# --- one report type -----------------------------------------------------------------------


def test_the_report_keeps_its_earlier_name() -> None:
    assert ScheduleReport is ConsolidationReport
    assert stargraph_mem.ConsolidationReport is ConsolidationReport


async def test_every_consolidator_call_returns_one_report_type(tmp_path: Path) -> None:
    from stargraph_mem import Consolidator, Episode

    def observation(n: int, obj: str) -> Episode:
        return Episode(
            id=f"e{n}",
            content=f"alice likes {obj}",
            timestamp=NOW.replace(hour=n),
            user="alice",
            session="s1",
            agent="rag",
            metadata={"subject": "alice", "predicate": "likes", "object": obj},
        )

    pack = ROOT / "examples" / "streaming_dedup.yaml"
    async with Consolidator.open(tmp_path / "m.db", [pack], clock=lambda: NOW) as mem:
        recorded = await mem.record(observation(1, "tea"))
        batch = await mem.record_many([observation(2, "tea"), observation(3, "coffee")])
        ticked = await mem.tick()
        consolidated = await mem.consolidate(now=NOW)
    for report in (recorded, batch, ticked, consolidated):
        assert type(report) is ConsolidationReport
    assert recorded.counts == {"add": 1, "update": 0, "delete": 0, "noop": 0}
    assert batch.counts == {"add": 0, "update": 1, "delete": 0, "noop": 1}
    assert [p.episodes for p in batch.passes] == [2]
    assert ticked.passes == []
    assert consolidated.episodes == 0  # nothing was left to do (one empty pass)
    assert consolidated.counts == {"add": 0, "update": 0, "delete": 0, "noop": 0}
    assert consolidated.now == NOW and consolidated.ran
    assert set(consolidated.timings) == {"total"}


# --- the README's example -------------------------------------------------------------------


def readme_example() -> tuple[str, str]:
    """The code block of the README's "Python API" section, and the output shown after it."""
    return readme_section_example("Python API")


def test_the_readme_example_runs_verbatim(tmp_path: Path) -> None:
    code, output = readme_example()
    assert "from stargraph_mem import " in code and "stargraph_mem." not in code
    done = run_example(code, tmp_path, "rules/dedup_against_facts.yaml", timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == output
