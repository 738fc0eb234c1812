"""History counts computed incrementally agree with counting from scratch.

A windowed count moves its window along a per-key log instead of scanning the window for
each episode, and the episodes a count counted are listed only when a rule cites them.
Both are checked here against a plain recount of the stored rows for every episode, over
random streams cut into passes (so later passes bring late episodes and far-behind rows).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.compiler.program import HistoryRelation
from stargraph_mem.engine.passes.aggregates import (
    MOST,
    HistoryInput,
    HistoryRead,
    compute,
    window_of,
)
from stargraph_mem.ir.models import FieldType
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.repositories.aggregates import (
    MARKER,
    AggregateRow,
    AggregateWindow,
    AggregateWrite,
    overlay,
    relation_ref,
)
from stargraph_mem.stores.scope import Partition

PARTITION = Partition("ann", "bot")
T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = 3_600_000_000
WIDTH = 10 * HOUR
TYPES: tuple[tuple[str, FieldType], ...] = (("object", "string"), ("session", "string"))


def relation(index: int, distinct: str | None, within: int | None) -> HistoryRelation:
    return HistoryRelation(
        index, "count", index, f"r{index}", ("object",), (), TYPES, distinct, within
    )


RELATIONS = [
    relation(0, "session", WIDTH),  # the shipped packs' kind: distinct values in a window
    relation(1, None, WIDTH),  # every episode in a window
    relation(2, "session", None),  # distinct values over all history
    relation(3, None, None),  # a plain tally
]


@dataclass
class _Row:
    n: int
    last_us: int
    last_id: str
    first: int


class Recount:
    """One relation's count, worked out from its rows for every episode (no log)."""

    def __init__(self, rel: HistoryRelation, rows: list[AggregateRow]) -> None:
        self.rel = rel
        self.rows: dict[str, dict[str, _Row]] = {}
        self.most: dict[str, int] = {}
        self.in_pass: dict[str, list[tuple[int, str]]] = {}
        for row in rows:
            if row.value == MOST:
                self.most[row.ref] = row.n
            elif row.value != MARKER:
                first = int(row.data) if row.data else row.last_us
                self.rows.setdefault(row.ref, {})[row.value] = _Row(
                    row.n, row.last_us, row.last_id, first
                )

    def feed(self, ref: str, record: EpisodeRecord) -> tuple[int, bool, int, list[str]]:
        rel = self.rel
        at = to_us(record.timestamp)
        value = record.id if rel.within_us else ""
        if rel.distinct:
            value = f'"{record.session}"'
        rows = self.rows.setdefault(ref, {})
        old = rows.get(value)
        if old is None:
            rows[value] = _Row(1, at, record.id, at)
        else:
            newer = at >= old.last_us
            rows[value] = _Row(
                old.n + 1,
                at if newer else old.last_us,
                record.id if newer else old.last_id,
                min(old.first, at),
            )
        if rel.within_us is None and rel.distinct is None:
            seen = self.in_pass.setdefault(ref, [])
            seen.append((at, record.id))
            return rows[value].n, True, max(t for t, _ in seen), [i for _, i in seen]
        if rel.within_us is None:
            best = list(rows.values())
            count, grew = len(best), old is None
        else:
            best = self.window(rows, at, rel.within_us)
            most = self.most.get(ref, 0)
            grew = len(best) > most
            count = self.most[ref] = max(most, len(best))
        ordered = sorted((r.last_us, r.last_id) for r in best)
        return count, grew, ordered[-1][0], [i for _, i in ordered]

    @staticmethod
    def window(rows: dict[str, _Row], at: int, width: int) -> list[_Row]:
        """The fullest window holding ``at``: the one ending at ``at`` when nothing newer
        was seen, else the first fullest of those ending at ``at`` or a later sighting."""
        if at >= max(r.last_us for r in rows.values()):
            return [r for r in rows.values() if r.last_us >= at - width]
        ends = {at} | {
            t for r in rows.values() for t in (r.first, r.last_us) if at < t <= at + width
        }
        best: list[_Row] = []
        for end in sorted(ends):
            inside = [r for r in rows.values() if r.first <= end and r.last_us >= end - width]
            if len(inside) > len(best):
                best = inside
        return best


def record(n: int, obj: int, session: int, hours: float) -> EpisodeRecord:
    return EpisodeRecord(
        seq=n + 1,
        id=f"e{n:03d}",
        content="",
        timestamp=T0 + timedelta(hours=hours),
        source_node=None,
        user=PARTITION.user,
        session=f"s{session}",
        agent=PARTITION.agent,
        metadata={"object": f"o{obj}"},
    )


def ref_of(rel: HistoryRelation, episode: EpisodeRecord) -> str:
    obj = episode.metadata["object"]
    return relation_ref(PARTITION, rel.rule_id, rel.name, f'["{obj}"]')


sightings = st.lists(
    st.tuples(
        st.integers(0, 2),  # object
        st.integers(0, 6),  # session
        st.integers(0, 120).map(lambda h: h / 2),  # hours: equal times happen
        st.integers(0, 3),  # the pass that consumes it
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(drawn=sightings)
def test_incremental_counts_agree_with_a_recount_for_every_episode(
    drawn: list[tuple[int, int, float, int]],
) -> None:
    """Count, whether it grew, the newest time counted, and the episodes cited (and their
    times), for every episode of every pass, are those of a recount from the rows."""
    episodes = [record(n, *d[:3]) for n, d in enumerate(drawn)]
    writes: list[AggregateWrite] = []
    for _, group in itertools.groupby(
        sorted(zip(drawn, episodes, strict=True), key=lambda p: p[0][3]), key=lambda p: p[0][3]
    ):
        passed = sorted((e for _, e in group), key=lambda e: (e.timestamp, e.seq))
        rows = overlay([], writes)
        recounts = [Recount(rel, rows) for rel in RELATIONS]
        now = to_us(T0 + timedelta(days=30))
        out = compute(RELATIONS, "p", PARTITION, now, passed, HistoryInput(rows=rows))
        for ordinal, episode in enumerate(passed, start=1):
            got = {rel.index: (c, g, t) for rel, c, g, t in out.counts[ordinal]}
            for rel, recount in zip(RELATIONS, recounts, strict=True):
                count, grew, newest, ids = recount.feed(ref_of(rel, episode), episode)
                assert got[rel.index] == (count, grew, newest), (rel.index, ordinal)
                assert out.counted(rel.index, ordinal) == ids, (rel.index, ordinal)
        times = {e.id: to_us(e.timestamp) for e in episodes}
        assert all(times[eid] == at for eid, at in out.times.items())
        assert out.write is not None
        writes.append(out.write)


def load(rows: list[AggregateRow], carried: HistoryInput, want: set[str]) -> HistoryInput:
    """What :func:`load_history` hands a run's next pass: the stored rows of the refs the
    previous pass did not hold, with the states it left."""
    fresh = [row for row in rows if row.ref not in carried.refs and row.ref in want]
    return HistoryInput(
        rows=fresh, live=carried.live, kept=carried.kept, refs=frozenset(want), marks={}
    )


TWINS = [relation(0, "session", WIDTH), relation(1, "session", WIDTH)]
"""Two rules counting alike (as the shipped packs' rules do): they may share rows."""


def wanted(rels: list[HistoryRelation], episodes: list[EpisodeRecord]) -> set[str]:
    markers = {f'["ann","bot","{rel.rule_id}","{rel.name}"]' for rel in rels}
    return {ref_of(rel, e) for rel in rels for e in episodes} | markers


def rows_of(write: AggregateWrite) -> set[tuple[str, str, int, int, str, str]]:
    return {(r.ref, r.value, r.n, r.last_us, r.last_id, r.data) for r in write.upserts}


@settings(max_examples=150, deadline=None)
@given(
    drawn=sightings,
    marks=st.lists(st.integers(0, 60), min_size=4, max_size=4),
    rules=st.lists(st.integers(0, 4), min_size=4, max_size=4),
)
def test_a_run_carries_its_states_and_alike_counts_share_them(
    drawn: list[tuple[int, int, float, int]], marks: list[int], rules: list[int]
) -> None:
    """Passes handed the states the previous pass left (rules counting alike sharing their
    rows, until one is fed what the other is not, or runs without the other) count and
    write what passes reading every relation's rows separately do."""
    episodes = [record(n, *d[:3]) for n, d in enumerate(drawn)]
    alone: list[list[AggregateWrite]] = [[], []]
    carried: HistoryInput | None = None
    together: list[AggregateWrite] = []
    now = to_us(T0 + timedelta(days=30))
    for pass_no, group in itertools.groupby(
        sorted(zip(drawn, episodes, strict=True), key=lambda p: p[0][3]), key=lambda p: p[0][3]
    ):
        passed = sorted((e for _, e in group), key=lambda e: (e.timestamp, e.seq))
        pass_marks = {"r1": marks[pass_no]}  # r1 has consumed some of these already
        present = [rel for i, rel in enumerate(TWINS) if rules[pass_no] != 3 + i]
        rows = overlay([], together)
        want = wanted(present, passed)
        if carried is None:
            given_in = HistoryInput(rows=rows, refs=frozenset(want))
        else:
            given_in = load(rows, carried, want)
        given_in.marks = pass_marks
        given_in.rule_ids = frozenset(rel.rule_id for rel in present)
        both = compute(TWINS, "p", PARTITION, now, passed, given_in)
        assert both.write is not None
        together.append(both.write)
        carried = given_in.after(both.write)
        for i, rel in enumerate(TWINS):
            mine = {r for r in rows_of(both.write) if f'"{rel.rule_id}"' in r[0]}
            if rel not in present:
                assert mine == set()
                continue
            single = HistoryInput(rows=overlay([], alone[i]), marks=pass_marks)
            out = compute([rel], "p", PARTITION, now, passed, single)
            assert out.write is not None
            alone[i].append(out.write)
            assert mine == rows_of(out.write)
            gone = {d for d in both.write.deletes if f'"{rel.rule_id}"' in d[0]}
            assert gone == set(out.write.deletes)
            for ordinal in range(1, len(passed) + 1):
                got = [c[1:] for c in both.counts.get(ordinal, []) if c[0] is rel]
                assert got == [c[1:] for c in out.counts.get(ordinal, [])]
                if got:
                    assert both.counted(rel.index, ordinal) == out.counted(rel.index, ordinal)
        assert sorted(overlay([], together), key=lambda r: (r.ref, r.value)) == sorted(
            [*overlay([], alone[0]), *overlay([], alone[1])], key=lambda r: (r.ref, r.value)
        )


def in_window(rows: list[AggregateRow], window: AggregateWindow) -> list[AggregateRow]:
    """``rows`` as the stores' windowed read gives them: the window's refs keep only the
    rows it asks for (other refs keep all theirs)."""
    refs = set(window.refs)
    top: dict[str, int] = {}
    for row in rows:
        if row.ref in refs:
            top[row.ref] = max(top.get(row.ref, row.last_us), row.last_us)
    return [
        row
        for row in rows
        if row.ref not in refs
        or row.last_us >= window.low
        or row.last_us < max(window.newest, top[row.ref]) - window.keep
        or row.value in window.values
    ]


@settings(max_examples=150, deadline=None)
@given(drawn=sightings)
def test_a_pass_reading_only_what_its_windows_need_counts_as_with_every_row(
    drawn: list[tuple[int, int, float, int]],
) -> None:
    """A run's first pass reads, of windowed counts' keys, only the rows inside a window
    before its episodes, those it drops and those of its own values: every count, every
    episode cited and every row written or dropped are those of a pass given every row
    (late episodes and rows far behind included). Passes follow time, each holding the
    next 15 hours, but one episode in four comes a pass late."""
    drawn = [(o, s, h, min(3, int(h // 15) + (late == 3))) for o, s, h, late in drawn]
    episodes = [record(n, *d[:3]) for n, d in enumerate(drawn)]
    writes: list[AggregateWrite] = []
    now = to_us(T0 + timedelta(days=30))
    for _, group in itertools.groupby(
        sorted(zip(drawn, episodes, strict=True), key=lambda p: p[0][3]), key=lambda p: p[0][3]
    ):
        passed = sorted((e for _, e in group), key=lambda e: (e.timestamp, e.seq))
        rows = overlay([], writes)
        windowed = {ref_of(rel, e) for rel in RELATIONS if rel.within_us for e in passed}
        window = window_of(RELATIONS, [HistoryRead(PARTITION, passed, {})], windowed)
        assert window is not None
        every = compute(RELATIONS, "p", PARTITION, now, passed, HistoryInput(rows=rows))
        some = HistoryInput(rows=in_window(rows, window), partial=True)
        needed = compute(RELATIONS, "p", PARTITION, now, passed, some)
        assert every.counts == needed.counts
        for rel_index, ordinal in every.sources:
            assert every.counted(rel_index, ordinal) == needed.counted(rel_index, ordinal)
        assert every.write is not None and needed.write is not None
        assert rows_of(every.write) == rows_of(needed.write)
        assert sorted(every.write.deletes) == sorted(needed.write.deletes)
        writes.append(every.write)
