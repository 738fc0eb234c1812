"""``over: history`` patterns: evidence that spans passes, kept in durable aggregates.

Nightly passes promote what one pass over the same episodes promotes; ``earlier`` finds
an episode an earlier pass consumed; a database written before aggregates existed is
migrated and rebuilt from its episodes; a window keeps the state bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from backends import NewLocation
from e2e_helpers import RULES, episode
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_helpers import undo_version_4
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import IRError
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.stores.models import Episode

FREQUENCY = RULES / "frequency_promotion.yaml"
WEEKLY = RULES / "weekly_promotion.yaml"
DAY0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

Spoc = tuple[str, str, str, str, str, float]


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def sighting(eid: str, day: float, session: str, obj: str = "tea", user: str = "ann") -> Episode:
    return episode(
        eid,
        at=DAY0 + timedelta(days=day),
        user=user,
        session=session,
        subject=user,
        predicate="likes",
        object=obj,
    )


async def current(location: str) -> list[Spoc]:
    async with Consolidator.open(location, []) as c:
        facts = await c.fact_store.query(FactPattern())
    return sorted((f.user, f.agent, f.subject, f.predicate, f.object, f.confidence) for f in facts)


async def consolidated(
    location: str, packs: Sequence[Path], passes: Sequence[Sequence[Episode]]
) -> list[Spoc]:
    """Each group of episodes stored, then consolidated at the time of its newest one."""
    for group in passes:
        async with Consolidator.open(location, packs) as c:
            await c.memory.put_many(list(group))
            await c.consolidate(now=max(e.timestamp for e in group))
    return await current(location)


# --- the four nights of the shipped pack ----------------------------------------------------


def test_four_nightly_passes_promote_like_one_pass(tmp_path: Path) -> None:
    """One sighting of "ann likes tea" per night in sessions s1..s4, consolidated nightly
    through the CLI: the third night promotes, the fourth strengthens, as one pass would."""
    nightly, once = str(tmp_path / "nightly.db"), str(tmp_path / "once.db")
    for night in range(1, 5):
        line = {
            "id": f"e{night}",
            "user": "ann",
            "session": f"s{night}",
            "agent": "rag",
            "content": "ann likes tea",
            "timestamp": f"2026-03-0{night}T12:00:00+00:00",
            "metadata": {"subject": "ann", "predicate": "likes", "object": "tea"},
        }
        lines = tmp_path / f"night{night}.jsonl"
        lines.write_text(json.dumps(line) + "\n")
        invoke("ingest", "--db", nightly, str(lines))
        invoke("ingest", "--db", once, str(lines))
        now = f"2026-03-0{night}T23:00:00+00:00"
        invoke("consolidate", "--db", nightly, "--pack", str(FREQUENCY), "--now", now)
    invoke("consolidate", "--db", once, "--pack", str(FREQUENCY), "--now", "2026-03-05T03:00:00Z")

    def listed(db: str) -> list[tuple[Any, ...]]:
        out = invoke("facts", "--db", db, "--json").stdout
        shown = [json.loads(line) for line in out.splitlines()]
        return [(f["subject"], f["predicate"], f["object"], f["confidence"]) for f in shown]

    assert listed(nightly) == [("ann", "likes", "tea", 0.6)]
    assert listed(once) == listed(nightly)
    # without history, nightly passes of three sessions never promoted anything
    pass_only = tmp_path / "pass_only.yaml"
    pass_only.write_text(
        FREQUENCY.read_text()
        .replace("over: history", "over: pass")
        .replace("          within: {days: 30}\n", "")
    )
    other = str(tmp_path / "pass_only.db")
    for night in range(1, 5):
        invoke("ingest", "--db", other, str(tmp_path / f"night{night}.jsonl"))
        now = f"2026-03-0{night}T23:00:00+00:00"
        invoke("consolidate", "--db", other, "--pack", str(pass_only), "--now", now)
    assert listed(other) == []


# --- cuts of one stream --------------------------------------------------------------------

sightings = st.lists(
    st.tuples(
        st.sampled_from(["ann", "bo"]),
        st.sampled_from(["tea", "gin"]),
        st.integers(min_value=0, max_value=4),  # session
        st.integers(min_value=0, max_value=40),  # day
    ),
    min_size=1,
    max_size=25,
)


def stream(drawn: Sequence[tuple[str, str, int, int]]) -> list[Episode]:
    """Sightings in timestamp order (hours break ties between days' items)."""
    out = [
        sighting(f"e{n}", day + n / 100, f"s{session}", obj, user)
        for n, (user, obj, session, day) in enumerate(drawn)
    ]
    return sorted(out, key=lambda e: e.timestamp)


@pytest.mark.parametrize("pack", [FREQUENCY, WEEKLY], ids=lambda p: p.stem)
@settings(max_examples=15, deadline=None)
@given(drawn=sightings, cuts=st.sets(st.integers(min_value=1, max_value=24)))
def test_history_packs_give_the_same_facts_however_the_stream_is_cut(
    pack: Path, drawn: list[tuple[str, str, int, int]], cuts: set[int]
) -> None:
    """Each pack by itself (two packs writing the same facts run one after the other over
    a pass, so together they are not cut-invariant: see the README)."""
    episodes = stream(drawn)
    bounds = [0, *sorted(c for c in cuts if c < len(episodes)), len(episodes)]
    groups = [episodes[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    with tempfile.TemporaryDirectory() as tmp:
        packs = [pack]
        cut = asyncio.run(consolidated(str(Path(tmp) / "cut.db"), packs, groups))
        whole = asyncio.run(consolidated(str(Path(tmp) / "whole.db"), packs, [episodes]))
    assert cut == whole


@pytest.mark.parametrize("pack", [FREQUENCY, WEEKLY], ids=lambda p: p.stem)
async def test_nightly_passes_match_one_pass_on_every_backend(
    new_location: NewLocation, pack: Path
) -> None:
    """Two months of sightings over several users, nightly passes against one pass."""
    episodes = [
        sighting(f"e{u}-{d}", d + 0.1 * u, f"s{d % 5}", ["tea", "gin"][d % 2], user)
        for u, user in enumerate(["ann", "bo", "cy"])
        for d in range(0, 60, 1 + u)
    ]
    episodes.sort(key=lambda e: e.timestamp)
    nights: dict[int, list[Episode]] = {}
    for e in episodes:
        nights.setdefault((e.timestamp - DAY0).days, []).append(e)
    nightly, once = new_location(), new_location()
    got = await consolidated(nightly, [pack], list(nights.values()))
    assert got == await consolidated(once, [pack], [episodes])
    assert {(f[0], f[4]) for f in got} == {(e.user, e.metadata["object"]) for e in episodes}


# --- earlier over history ------------------------------------------------------------------

LATEST = """\
ir_version: 1
pack: latest_wins
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {cron: "0 3 * * *"}, confidence: 0.7}
rules:
  - id: newer_replaces
    priority: 20
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - earlier:
          as: prev
          keys: [subject, predicate]
          over: history
          object: {bind: was}
    emit:
      kind: update
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
      replaces: [prev]
      sources: [prev]
      reason: "{o} after {was}"
  - id: first_sighting
    priority: 10
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}", reason: first}
"""


async def test_earlier_over_history_finds_the_episode_of_an_earlier_pass(
    new_location: NewLocation, tmp_path: Path
) -> None:
    pack = tmp_path / "latest_wins.yaml"
    pack.write_text(LATEST)
    said = [
        sighting("e1", 0, "s1", "tea"),
        sighting("e2", 1, "s2", "gin"),
        sighting("e3", 2, "s3", "rum"),
    ]
    nightly, once = new_location(), new_location()
    got = await consolidated(nightly, [pack], [[e] for e in said])
    assert got == await consolidated(once, [pack], [said])
    assert [f[4] for f in got] == ["rum"]
    async with Consolidator.open(nightly, []) as c:
        (fact,) = await c.fact_store.query(FactPattern())
        why = await c.fact_store.explain(fact.id)
        history = await c.fact_store.query(FactPattern(include_history=True))
    assert why.reason == "rum after gin"
    assert sorted(e.id for e in why.source_episodes) == ["e2", "e3"]
    assert sorted(f.object for f in history) == ["gin", "rum", "tea"]


# --- databases written before aggregates -----------------------------------------------------


def downgrade(path: Path) -> None:
    """Make ``path`` look like a fact store of schema 3: no aggregates table, no time of
    the newest observation on facts."""
    with sqlite3.connect(path) as db:
        undo_version_4(db)
        db.execute("UPDATE fact_store_meta SET value = '3' WHERE key = 'schema_version'")


async def test_a_database_without_aggregates_is_migrated_and_rebuilt(tmp_path: Path) -> None:
    """Two nights consolidated, then the file taken back to schema 3: opening it migrates,
    and the third night promotes from the two earlier sessions, as without the downgrade."""
    first = [sighting("e1", 0, "s1"), sighting("e2", 1, "s2")]
    third = [sighting("e3", 2, "s3")]
    old, kept = tmp_path / "old.db", tmp_path / "kept.db"
    for path in (old, kept):
        await consolidated(str(path), [FREQUENCY], [first[:1], first[1:]])
    downgrade(old)
    with sqlite3.connect(old) as db:
        assert "aggregates" not in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    before = await current(str(old))  # opens: migrated, the same facts
    assert before == await current(str(kept)) == []
    got = await consolidated(str(old), [FREQUENCY], [third])
    assert got == await consolidated(str(kept), [FREQUENCY], [third])
    assert [(f[4], f[5]) for f in got] == [("tea", 0.5)]
    with sqlite3.connect(old) as db:
        version = db.execute("SELECT value FROM fact_store_meta WHERE key = 'schema_version'")
        assert version.fetchone() == ("7",)


async def test_a_changed_relation_starts_from_the_consumed_episodes(tmp_path: Path) -> None:
    """A pack whose window changes keeps no stale state: the new relation is rebuilt."""
    path = str(tmp_path / "m.db")
    await consolidated(path, [WEEKLY], [[sighting("e1", 0, "s1")]])
    wider = tmp_path / "weekly.yaml"
    wider.write_text(WEEKLY.read_text().replace("within: {days: 7}", "within: {days: 20}"))
    got = await consolidated(path, [wider], [[sighting("e2", 15, "s2")]])
    assert [(f[4], f[5]) for f in got] == [("tea", 0.9)]


# --- bounded state -------------------------------------------------------------------------


async def test_windowed_state_stays_bounded_by_the_window(tmp_path: Path) -> None:
    """A year of sightings in rotating sessions: the rows kept per key never exceed the
    sessions seen within the last few windows."""
    path = tmp_path / "year.db"
    days = [[sighting(f"e{d}", d, f"s{d % 50}")] for d in range(0, 365, 3)]
    await consolidated(str(path), [WEEKLY], days)
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT count(*), sum(length(ref) + length(value) + length(last_id) + length(data)) "
            "FROM aggregates WHERE value NOT IN ('#kept', '#most')"
        ).fetchone()
    # kept: the sightings of the last four windows (28 days), taken 3 days apart
    assert rows[0] <= 28 // 3 + 1


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("within: {days: 7}", "'within' needs 'over: history'"),
        ("over: forever", "over"),
        ("over: history\n          within: {days: -1}", "within"),
    ],
)
def test_bad_history_options_are_refused_with_a_position(
    tmp_path: Path, pattern: str, message: str
) -> None:
    from stargraph_mem.compiler.pack import compile_file

    text = WEEKLY.read_text().replace("over: history\n          within: {days: 7}", pattern)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(IRError) as caught:
        compile_file(path)
    shown = str(caught.value)
    assert "bad.yaml:" in shown and message in shown


# --- insertion order -----------------------------------------------------------------------

DEDUP = RULES / "dedup_against_facts.yaml"
observations = st.lists(
    st.tuples(
        st.sampled_from(["ann", "bo"]),
        st.sampled_from(["tea", "gin", "rum"]),
        st.integers(min_value=0, max_value=3),  # session
        st.integers(min_value=0, max_value=20),  # day
    ),
    min_size=1,
    max_size=20,
    unique_by=lambda item: (item[0], item[3]),  # one observation per user and day
)


@pytest.mark.parametrize("pack", [DEDUP, FREQUENCY, WEEKLY], ids=lambda p: p.stem)
@settings(max_examples=15, deadline=None)
@given(drawn=observations, data=st.data())
def test_packs_give_the_same_facts_whatever_the_insertion_order(
    pack: Path, drawn: list[tuple[str, str, int, int]], data: st.DataObject
) -> None:
    """The same episodes inserted in a random order and consolidated in random passes
    (each at the time of its newest episode) end with the facts of one pass over them in
    timestamp order: a late episode never overrides what newer ones established."""
    episodes = stream(drawn)
    shuffled = data.draw(st.permutations(episodes))
    cuts = data.draw(st.sets(st.integers(min_value=1, max_value=len(episodes))))
    bounds = [0, *sorted(c for c in cuts if c < len(episodes)), len(episodes)]
    groups = [list(shuffled[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
    latest = max(e.timestamp for e in episodes)
    with tempfile.TemporaryDirectory() as tmp:
        mixed = asyncio.run(consolidated_at(str(Path(tmp) / "mixed.db"), [pack], groups, latest))
        ordered = asyncio.run(consolidated(str(Path(tmp) / "ordered.db"), [pack], [episodes]))
    assert mixed == ordered


async def consolidated_at(
    location: str, packs: Sequence[Path], passes: Sequence[Sequence[Episode]], latest: datetime
) -> list[Spoc]:
    """Each group stored, then consolidated at the latest time of the whole stream (so no
    pass leaves an episode pending)."""
    for group in passes:
        async with Consolidator.open(location, packs) as c:
            await c.memory.put_many(list(group))
            await c.consolidate(now=latest)
    return await current(location)


@pytest.mark.parametrize("worker", ["never", "always"])
@pytest.mark.parametrize("pack", [FREQUENCY, WEEKLY], ids=lambda p: p.stem)
async def test_a_run_of_many_short_passes_carries_its_aggregates(
    tmp_path: Path, pack: Path, worker: Literal["never", "always"]
) -> None:
    """A backlog consolidated three episodes per pass (each pass reading the aggregates the
    previous one left, before it is committed) ends as one long pass does, whether the
    passes after the first are computed here or in a worker process (which reads the rows
    its first pass needs and carries its own state)."""
    episodes = [
        sighting(f"e{n}", n * 0.7, f"s{n % 5}", ["tea", "gin"][n % 3 == 0], ["ann", "bo"][n % 2])
        for n in range(40)
    ]
    facts = []
    counts = []
    for name, size in (("short", 3), ("long", 1000)):
        async with Consolidator.open(
            str(tmp_path / f"{name}.db"), [pack], max_episodes=size, worker=worker
        ) as c:
            await c.memory.put_many(episodes)
            report = await c.consolidate(now=max(e.timestamp for e in episodes))
            assert len(report.passes) >= (2 if size == 3 else 1)
        facts.append(await current(str(tmp_path / f"{name}.db")))
        counts.append(report.counts)
    assert facts[0] == facts[1] and facts[0] != []
    assert counts[0] == counts[1]  # the same deltas: no pass counted from stale rows
