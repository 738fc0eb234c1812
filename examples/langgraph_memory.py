"""The Consolidator as memory nodes of a LangGraph graph (``pip install '.[graph]'``).

    START ──▶ remember ──▶ recall ──▶ END

``remember`` records the turn's observation (the ``every: 1`` pack consolidates it at
once); ``recall`` puts the user's current facts into the graph state for the next node,
say an LLM prompt. The graph is run once per turn.

    python examples/langgraph_memory.py
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from stargraph_mem import Consolidator, Episode

PACK = Path(__file__).with_name("streaming_dedup.yaml")
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
LATEST = [T0]
"""The consolidator's clock: the time of the latest turn (a pass consumes only episodes
stamped at or before its time)."""


class Turn(TypedDict, total=False):
    """The graph state: one observed turn in, the consolidated memory out."""

    n: int
    user: str
    text: str
    triple: tuple[str, str, str]
    consolidated: dict[str, int]
    memory: list[str]


def build_graph(mem: Consolidator) -> Any:
    """A compiled two-node graph over ``mem``."""

    async def remember(state: Turn) -> Turn:
        subject, predicate, obj = state["triple"]
        LATEST[0] = T0 + timedelta(minutes=state["n"])  # the turn happens now
        report = await mem.record(
            Episode(
                id=f"turn{state['n']}",
                content=state["text"],
                timestamp=LATEST[0],
                user=state["user"],
                session="chat",
                agent="assistant",
                metadata={"subject": subject, "predicate": predicate, "object": obj},
            )
        )
        return {"consolidated": {k: v for k, v in report.counts.items() if v}}

    async def recall(state: Turn) -> Turn:
        facts = await mem.facts(user=state["user"], agent="assistant")
        return {"memory": [f"{f.subject} {f.predicate} {f.object}" for f in facts]}

    graph = StateGraph(Turn)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile()


async def main(db: Path) -> list[Turn]:
    turns: list[Turn] = [
        {"n": 0, "user": "alice", "text": "I like tea", "triple": ("alice", "likes", "tea")},
        {"n": 1, "user": "alice", "text": "Coffee now", "triple": ("alice", "likes", "coffee")},
        {"n": 2, "user": "alice", "text": "I live in Oslo", "triple": ("alice", "lives", "Oslo")},
    ]
    LATEST[0] = T0
    async with Consolidator.open(db, packs=[PACK], clock=lambda: LATEST[0]) as mem:
        app = build_graph(mem)
        results: list[Turn] = []
        for turn in turns:
            out: Turn = await app.ainvoke(turn)
            print(f"turn{out['n']}: {out['consolidated']} -> {out['memory']}")
            results.append(out)
        return results


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp) / "memory.db"))
