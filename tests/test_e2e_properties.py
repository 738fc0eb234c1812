"""Property tests of whole consolidations over real SQLite files (hypothesis).

(a) split-invariance: one pass over a stream and many smaller passes (caller-side chunks, or a
    small ``max_episodes``) give the same facts — tested for ``dedup_against_facts`` only.
    ``default`` and ``frequency_promotion`` are not split-invariant by design (README,
    "Shipped packs"): ``default`` dedups within one pass, and ``frequency_promotion`` counts
    sessions within one pass, so splitting a stream legitimately changes their facts.
(b) re-running a consolidation right after a pass changes nothing (no audit rows, same file).
(c) determinism: two fresh databases, same input, same pass time ⇒ the same fact ids,
    lineage and audit delta ids.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from e2e_helpers import DEDUP, DEFAULT, NOW, Outcome, dump_tables, episode, outcome
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES
from stargraph_mem.stores.models import Episode

SETTINGS = settings(max_examples=25, deadline=None)

Item = tuple[str, str, str, str]
"""(user, subject, predicate, object) of one observation."""

items = st.tuples(
    st.sampled_from(["u1", "u2"]),
    st.sampled_from(["ann", "bo", "cy"]),
    st.sampled_from(["likes", "is"]),
    st.sampled_from(["x", "y", "z"]),
)
streams = st.lists(items, min_size=1, max_size=40)


def observations(stream: Sequence[Item], start: int = 0) -> list[Episode]:
    """One episode per item, ids ``e<n>`` in stream order."""
    return [
        episode(
            f"e{n}",
            n,
            user=user,
            session=f"s{n % 3}",
            subject=s,
            predicate=p,
            object=o,
        )
        for n, (user, s, p, o) in enumerate(stream, start=start)
    ]


def chunks(episodes: list[Episode], cuts: Sequence[int]) -> list[list[Episode]]:
    """``episodes`` split at the given positions (duplicates and out-of-range ignored)."""
    bounds = sorted({c for c in cuts if 0 < c < len(episodes)})
    edges = [0, *bounds, len(episodes)]
    return [episodes[a:b] for a, b in itertools.pairwise(edges)]


async def consolidate_in_chunks(
    db: Path,
    pack: Path,
    parts: Sequence[Sequence[Episode]],
    *,
    step: timedelta = timedelta(0),
    max_episodes: int | None = None,
) -> None:
    """Put each chunk then consolidate, pass time ``NOW + k * step`` for chunk ``k``."""
    limit = DEFAULT_MAX_EPISODES if max_episodes is None else max_episodes
    async with Consolidator.open(db, [pack], max_episodes=limit) as c:
        for k, part in enumerate(parts):
            await c.memory.put_many(part)
            await c.consolidate(now=NOW + k * step)


def run_chunks(
    pack: Path,
    parts: Sequence[Sequence[Episode]],
    *,
    step: timedelta = timedelta(0),
    max_episodes: int | None = None,
) -> Outcome:
    """Consolidate in a fresh database and return its outcome."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        asyncio.run(consolidate_in_chunks(db, pack, parts, step=step, max_episodes=max_episodes))
        return outcome(db)


def current_spoc(result: Outcome) -> Counter[tuple[object, ...]]:
    """The multiset of current (subject, predicate, object, confidence)."""
    return Counter(row[3:7] for row in result.current)


# --- (a) split-invariance: dedup_against_facts -------------------------------------------


@SETTINGS
@given(stream=streams, cuts=st.lists(st.integers(1, 39), max_size=6))
def test_dedup_one_pass_equals_caller_side_chunks(stream: list[Item], cuts: list[int]) -> None:
    episodes = observations(stream)
    whole = run_chunks(DEDUP, [episodes])
    split = run_chunks(DEDUP, chunks(episodes, cuts))
    assert current_spoc(split) == current_spoc(whole)
    # Same pass time: even ids, lineage and the audit trail agree.
    assert split == whole
    later = run_chunks(DEDUP, chunks(episodes, cuts), step=timedelta(hours=1))
    assert current_spoc(later) == current_spoc(whole)


@SETTINGS
@given(stream=streams, size=st.integers(1, 6))
def test_dedup_small_pass_size_equals_one_pass(stream: list[Item], size: int) -> None:
    episodes = observations(stream)
    whole = run_chunks(DEDUP, [episodes])
    small = run_chunks(DEDUP, [episodes], max_episodes=size)
    assert current_spoc(small) == current_spoc(whole)
    assert small == whole


# --- default pack streams (intents, replaces naming stored facts) --------------------------

default_items = st.tuples(
    items,
    st.sampled_from([None, "add", "noop", "delete", "update", "update"]),
    st.lists(st.integers(0, 7), max_size=2),
)
DefaultItem = tuple[Item, str | None, list[int]]


def with_intents(
    stream: Sequence[DefaultItem], facts: dict[str, list[str]], start: int
) -> list[Episode]:
    """Episodes whose ``replaces`` pick (by index) among the user's current fact ids."""
    out: list[Episode] = []
    for n, ((user, s, p, o), intent, picks) in enumerate(stream, start=start):
        metadata: dict[str, JsonValue] = {"subject": s, "predicate": p, "object": o}
        if intent is not None:
            metadata["intent"] = intent
        known = facts.get(user, [])
        if picks and intent in ("delete", "update"):
            chosen = [known[i % len(known)] if known else "fmissing" for i in picks]
            metadata["replaces"] = list(dict.fromkeys(chosen))
        out.append(episode(f"e{n}", n, user=user, session=f"s{n % 2}", meta=metadata))
    return out


async def default_run(db: Path, first: Sequence[Item], second: Sequence[DefaultItem]) -> None:
    """Phase 1 plain observations; phase 2 intents whose replaces name phase-1 facts."""
    async with Consolidator.open(db, [DEFAULT]) as c:
        await c.memory.put_many(observations(first))
        await c.consolidate(now=NOW)
        facts: dict[str, list[str]] = {}
        for fact in await c.facts():
            facts.setdefault(fact.user, []).append(fact.id)
        await c.memory.put_many(with_intents(second, facts, start=len(first)))
        await c.consolidate(now=NOW + timedelta(hours=1))


# --- (b) re-running is a no-op ---------------------------------------------------------


async def rerun_changes_nothing(db: Path, pack: Path) -> None:
    before = dump_tables(db)
    async with Consolidator.open(db, [pack]) as c:
        audit = len(await c.fact_store.audit_rows())
        reports = (await c.consolidate(now=NOW + timedelta(hours=1))).passes
        assert all(r.episodes == 0 and r.deltas == [] and r.rejected == [] for r in reports)
        assert len(await c.fact_store.audit_rows()) == audit
    assert dump_tables(db) == before


@SETTINGS
@given(stream=streams)
def test_dedup_rerun_is_a_noop(stream: list[Item]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        asyncio.run(consolidate_in_chunks(db, DEDUP, [observations(stream)]))
        asyncio.run(rerun_changes_nothing(db, DEDUP))


@SETTINGS
@given(first=streams, second=st.lists(default_items, max_size=20))
def test_default_rerun_is_a_noop(first: list[Item], second: list[DefaultItem]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        asyncio.run(default_run(db, first, second))
        asyncio.run(rerun_changes_nothing(db, DEFAULT))


# --- (c) determinism -----------------------------------------------------------------


@SETTINGS
@given(stream=streams)
def test_dedup_is_deterministic(stream: list[Item]) -> None:
    episodes = observations(stream)
    one = run_chunks(DEDUP, [episodes])
    two = run_chunks(DEDUP, [episodes])
    assert one == two
    assert len(one.lineage) == len(one.current) + len(one.history)


@SETTINGS
@given(first=streams, second=st.lists(default_items, max_size=20))
def test_default_is_deterministic(first: list[Item], second: list[DefaultItem]) -> None:
    results: list[tuple[Outcome, dict[str, list[tuple[object, ...]]]]] = []
    for _ in range(2):
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "m.db"
            asyncio.run(default_run(db, first, second))
            results.append((outcome(db), dump_tables(db, skip_wall_clock=True)))
    (one, dump_one), (two, dump_two) = results
    assert one == two
    assert dump_one == dump_two
    assert len(one.audit_ids) == len(set(one.audit_ids))
