"""``examples/langgraph_memory.py``: memory nodes in a LangGraph graph.

Collected only when ``langgraph`` is installed (the ``graph`` extra); see ``conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

from test_example_pipeline import load_example


async def test_graph_remembers_then_recalls_each_turn(tmp_path: Path) -> None:
    results = await load_example("langgraph_memory").main(tmp_path / "memory.db")
    assert [(r["consolidated"], r["memory"]) for r in results] == [
        ({"add": 1}, ["alice likes tea"]),
        ({"update": 1}, ["alice likes coffee"]),
        ({"add": 1}, ["alice likes coffee", "alice lives Oslo"]),
    ]
