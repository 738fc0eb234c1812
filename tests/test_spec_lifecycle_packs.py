"""The shipped packs of specifications 002 (``rules/engram.yaml``) and 003
(``rules/graph_memory.yaml``) over months of simulated nights, through the Python API, on
SQLite and on PostgreSQL: both backends end every night with the same facts (ids,
confidences, statuses, validity), and the numbers are the specifications' formulas worked
here in plain Python, not read back from the engine."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from backends import PG_URL, _admin
from pydantic import JsonValue

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.model.facts import Fact
from stargraph_mem.stores.models import Episode

RULES = Path(__file__).resolve().parent.parent / "rules"
GRAPH = RULES / "graph_memory.yaml"
ENGRAM = RULES / "engram.yaml"
DAY = timedelta(days=1)
NIGHT0 = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
"""The first nightly pass; episodes of day ``n`` are stamped the day before night ``n``."""

Row = tuple[str, str, str, str, str, str, float, str, str | None, str, str]
Nights = dict[int, list[Row]]


def night(n: int) -> datetime:
    return NIGHT0 + n * DAY


def said(
    eid: str, day: int, content: str, metadata: dict[str, JsonValue], *, user: str = "alice"
) -> Episode:
    """Episode ``eid`` at 09:00 on the day before night ``day``."""
    return Episode(
        id=eid,
        content=content,
        timestamp=night(day) - timedelta(hours=18),
        user=user,
        session=f"s{day}",
        agent="rag",
        metadata=metadata,
    )


def spo(s: str, p: str, o: str) -> dict[str, JsonValue]:
    return {"subject": s, "predicate": p, "object": o}


def row(f: Fact) -> Row:
    until = None if f.valid_until is None else f.valid_until.isoformat()
    return (
        f.id,
        f.user,
        f.subject,
        f.predicate,
        f.object,
        f.layer,
        f.confidence,
        f.valid_from.isoformat(),
        until,
        f.status,
        f.rule_id,
    )


async def every_fact(mem: Consolidator) -> list[Row]:
    return sorted(row(f) for f in await mem.facts(status="all"))


@asynccontextmanager
async def locations(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A fresh SQLite file and a fresh PostgreSQL schema (dropped afterwards)."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield str(tmp_path / "memory.db"), f"{PG_URL}?schema={schema}"
    finally:
        admin = await _admin()
        async with admin:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def current(rows: Sequence[Row], subject: str, predicate: str) -> list[Row]:
    return [r for r in rows if r[2:4] == (subject, predicate) and r[9] in ("current",)]


# --- specification 003: graph_memory -------------------------------------------------


def decay(confidence: float, days: float) -> float:
    """003: confidence · exp(−0.1 · days^0.8)."""
    return confidence * math.exp(-0.1 * days**0.8)


def boost(reads: int) -> float:
    """003: + 0.05 · ln(1 + access_count/20)."""
    return 0.05 * math.log(1 + reads / 20)


READ_DAYS = (5, 40)
"""Nights before which (at 21:00 the evening before) alice's tea fact is read."""


CONFIRM: dict[str, JsonValue] = {"subject": "alice", "predicate": "lives_in"}


async def graph_nights(location: str) -> Nights:
    """75 nights of alice and bob: statements on day 0, a confirm on day 10, a restated
    and a corrected statement on day 20, reads of the tea fact before nights 5 and 40."""
    episodes = {
        0: [
            said("t", 0, "alice likes tea", spo("alice", "likes", "tea")),
            said("o", 0, "alice likes opera", spo("alice", "hears", "opera")),
            said("c", 0, "alice lives in oslo", spo("alice", "lives_in", "oslo")),
            said("ch", 0, "alice plays chess", spo("alice", "plays", "chess")),
            said("j", 0, "bob likes jazz", spo("bob", "likes", "jazz"), user="bob"),
        ],
        10: [said("cf", 10, "yes, oslo", {"intent": "confirm", **CONFIRM})],
        20: [
            said("ch2", 20, "alice plays chess", spo("alice", "plays", "chess")),
            said("j2", 20, "bob likes blues", spo("bob", "likes", "blues"), user="bob"),
        ],
    }
    out: Nights = {}
    async with Consolidator.open(location, [GRAPH], embedder=None) as mem:
        for n in range(76):
            if n in episodes:
                await mem.record_many(episodes[n])
            if n in READ_DAYS:
                (tea,) = [f for f in await mem.facts(user="alice") if f.object == "tea"]
                await mem.record_access([tea.id], at=night(n) - timedelta(hours=6))
            await mem.consolidate(now=night(n))
            out[n] = await every_fact(mem)
    return out


async def test_graph_memory_gives_the_same_facts_on_both_backends(tmp_path: Path) -> None:
    async with locations(tmp_path) as (sqlite, postgresql):
        lite = await graph_nights(sqlite)
        pg = await graph_nights(postgresql)
    for n in lite:
        assert lite[n] == pg[n], f"night {n}"

    def confidence(n: int, subject: str, predicate: str) -> float | None:
        rows = current(lite[n], subject, predicate)
        assert len(rows) <= 1
        return rows[0][6] if rows else None

    # made on night 0 at 1.0, never read: kept on night 70, pruned on night 71
    assert confidence(70, "alice", "hears") == round(decay(1.0, 70), 9) == 0.050146574
    assert confidence(71, "alice", "hears") is None
    (pruned,) = [r for r in lite[71] if r[4] == "opera" and r[9] == "expired"]
    assert pruned[10] == "decay"  # night 71's decayed fact is what prune closed
    # confirmed on night 10: 1.0 from then on, never decayed
    assert {confidence(n, "alice", "lives_in") for n in range(10, 76)} == {1.0}
    assert [r[10] for r in current(lite[75], "alice", "lives_in")] == ["confirm"]
    # tea: read before night 5 (1st read) and before night 40 (2nd read); each read
    # restarts the curve from the night before and adds 003's boost of its count
    read5 = night(5) - timedelta(hours=6)
    read40 = night(40) - timedelta(hours=6)
    c4 = decay(1.0, 4)
    c39 = decay(c4 + boost(1), (night(39) - read5) / DAY)
    assert confidence(4, "alice", "likes") == round(c4, 9)
    assert math.isclose(confidence(39, "alice", "likes") or 0, c39, abs_tol=1e-8)
    after = {n: decay(c39 + boost(2), (night(n) - read40) / DAY) for n in range(40, 76)}
    gone = min(n for n, c in after.items() if c < 0.05)  # below 003's threshold: pruned
    for n in range(40, gone):
        assert math.isclose(confidence(n, "alice", "likes") or 0, after[n], abs_tol=1e-8)
    assert confidence(gone, "alice", "likes") is None
    assert "tea" in {r[4] for r in lite[gone] if r[9] == "expired"}
    # chess restated on day 20: its curve restarts from night 19's confidence
    restated = decay(decay(1.0, 19), (night(30) - night(20)) / DAY)
    assert math.isclose(confidence(30, "alice", "plays") or 0, restated, abs_tol=1e-8)
    # bob's jazz was corrected to blues on night 20 (a new fact at 1.0)
    assert [r[4] for r in current(lite[20], "bob", "likes")] == ["blues"]
    assert confidence(20, "bob", "likes") == 1.0


# --- specification 002: engram ---------------------------------------------------------


def memory(
    eid: str,
    day: int,
    content: str,
    category: str,
    confidence: float,
    importance: float,
    **more: JsonValue,
) -> Episode:
    extracted: dict[str, JsonValue] = {
        "subject": "alice",
        "category": category,
        "confidence": confidence,
        "importance": importance,
    }
    return said(eid, day, content, {**extracted, **more})


async def engram_nights(location: str) -> tuple[Nights, list[str], list[str]]:
    """120 nights of extracted memories: duplicates, speculation (confirmed or not), a
    commitment resolved on day 10, a correction on day 15, unimportant memories that get
    archived, one of them extracted again on day 110."""
    episodes = {
        0: [
            memory("tea", 0, "Alice likes green tea.", "preference", 0.9, 0.6),
            memory("move", 0, "Alice might move to Paris", "fact", 0.3, 0.5),
            memory("car", 0, "Alice might sell her car", "fact", 0.35, 0.5),
            memory("report", 0, "Send the report by Friday", "commitment", 0.9, 0.8),
            memory("book", 0, "Write the book", "commitment", 0.9, 0.8),
            memory("park", 0, "Alice parked on level 2", "fact", 0.7, 0.1),
            memory("lunch", 0, "Alice had lunch at noon", "moment", 0.8, 0.2),
            memory("oslo", 0, "Alice lives in Oslo", "fact", 0.8, 0.5),
        ],
        3: [memory("tea2", 3, "ALICE likes GREEN tea!!", "preference", 0.9, 0.6)],
        12: [memory("move2", 12, "alice might move to paris", "fact", 0.3, 0.5)],
        10: [said("done", 10, "send the report by friday.", {"intent": "resolve"})],
        110: [memory("park2", 110, "alice parked on level 2", "fact", 0.5, 0.1)],
    }
    out: Nights = {}
    async with Consolidator.open(location, [ENGRAM], embedder=None) as mem:
        for n in range(0, 121):
            if n in episodes:
                await mem.record_many(episodes[n])
            if n == 15:  # a correction names the fact the Oslo memory made
                (oslo,) = [f for f in await mem.facts() if f.object == "Alice lives in Oslo"]
                bergen = "Alice lives in Bergen now"
                fix = memory("fix", 15, bergen, "correction", 0.95, 0.7, replaces=[oslo.id])
                await mem.record(fix)
            await mem.consolidate(now=night(n))
            out[n] = await every_fact(mem)
        searched = await mem.search("parked level", include_history=True, touch=False)
        default = await mem.search("parked level", touch=False)
    return out, [h.fact.status for h in searched], [h.fact.status for h in default]


async def test_engram_gives_the_same_facts_on_both_backends(tmp_path: Path) -> None:
    async with locations(tmp_path) as (sqlite, postgresql):
        lite, lite_history, lite_default = await engram_nights(sqlite)
        pg, pg_history, pg_default = await engram_nights(postgresql)
    for n in lite:
        assert lite[n] == pg[n], f"night {n}"
    assert (lite_history, lite_default) == (pg_history, pg_default)

    def objects(n: int) -> set[str]:
        return {r[4] for r in lite[n] if r[9] == "current"}

    def closed(n: int, status: str) -> set[str]:
        return {r[4] for r in lite[n] if r[9] == status}

    # dedup: the repeated tea memory wrote nothing
    assert [r[4] for r in lite[3] if r[3] == "preference"] == ["Alice likes green tea."]
    # speculative (< 0.40): the unconfirmed car memory expires on night 30 (30 days old),
    # the move memory confirmed by a later extraction (day 12) never does
    assert "Alice might sell her car" in objects(29)
    assert "Alice might sell her car" in closed(30, "expired")
    assert "Alice might move to Paris" in objects(120)
    # the commitment resolved on night 10 is removed 90 days later (night 100), the
    # unresolved one stays
    assert "Send the report by Friday" in objects(99)
    assert "Send the report by Friday" in closed(100, "deleted")
    assert "Write the book" in objects(120)
    # the correction superseded the Oslo memory
    assert "Alice lives in Oslo" in closed(15, "superseded")
    assert "Alice lives in Bergen now" in objects(120)
    # archival: importance 0.1 / 0.2, never read, unprotected: archived once 90 days old
    assert {"Alice parked on level 2", "Alice had lunch at noon"} <= objects(89)
    assert {"Alice parked on level 2", "Alice had lunch at noon"} <= closed(90, "archived")
    # preferences and commitments are protected; the parking memory extracted again is back
    assert "Alice likes green tea." in objects(120)
    assert "Alice parked on level 2" in objects(110)
    # archived memories leave default search; include_history still finds them
    assert "archived" in lite_history
    assert "archived" not in lite_default
