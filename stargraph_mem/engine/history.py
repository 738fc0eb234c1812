"""``over: history`` patterns: evidence that spans passes, from durable aggregates.

For each such pattern (a :class:`~stargraph_mem.compiler.generator.HistoryRelation`) the
runtime walks the pass's episodes in pass order and, for each episode the owning rule has
not consumed yet, works out what the pattern sees *before and including* it:

* ``count``: the tally for the episode's key over everything consumed so far (distinct
  values with ``distinct``; with ``within``, only what was stamped at most that long
  before this episode), and whether this episode raised it;
* ``earlier``: the latest episode consumed before this one with the same key (from this
  pass, or from an earlier pass through the stored row, given a negative ordinal).

The result enters CLIPS as one ``sm-hist-<i>`` fact per episode, an equality join on the
episode's ordinal; the changed rows go back to the store in the pass's transaction
(:mod:`stargraph_mem.stores.aggregates`). Cost: O(episodes of the pass + keys they touch);
an in-order episode moves its key's window along in constant work, and the episodes a
count counted are listed only when a rule cites them (:meth:`HistoryFacts.counted`).

Sequential semantics: consuming episodes one pass at a time gives the same tallies as one
pass over all of them, since the stored rows carry exactly what a longer pass would have
kept in memory. Time conditions inside the pattern (``newer_than``…) are relative to the
time of the pass that consumed the episode; ``within`` is relative to the episode itself,
so no cut of the stream into passes changes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson

from stargraph_mem.compiler.generator import HistoryRelation
from stargraph_mem.ir.models import EPISODE_BUILTINS, Condition, FieldType
from stargraph_mem.ir.reference import ILL_TYPED, MISSING, evaluate, raw_value, read_value
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.aggregates import (
    MARKER,
    AggregateRow,
    AggregateWrite,
    marker_ref,
    overlay,
    relation_ref,
)
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord
from stargraph_mem.stores.scope import Partition


class AggregateSource(Protocol):
    async def aggregates_of(self, pack: str, refs: Sequence[str]) -> list[AggregateRow]: ...


class EpisodeSource(Protocol):
    async def since_checked(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead: ...


BUILTINS = frozenset(EPISODE_BUILTINS)


def _typed(record: EpisodeRecord, name: str, ftype: FieldType) -> Any:
    value = read_value(ftype, raw_value(record, name))
    return None if value is MISSING or value is ILL_TYPED else value


@dataclass
class HistoryInput:
    """A partition's stored aggregates for one pass, and the rule watermarks they follow."""

    rows: list[AggregateRow] = field(default_factory=list)
    marks: Mapping[str, int] = field(default_factory=dict)
    """Per rule id, the last seq its relations already hold: later episodes are fed."""
    backfill: Mapping[str, Sequence[EpisodeRecord]] = field(default_factory=dict)
    """Per relation name, consumed episodes to fold in first (state not kept yet)."""
    rule_ids: frozenset[str] | None = None
    """The rules of the pass (None: all): another rule's relations wait for its passes."""
    resumed: Mapping[str, set[int]] = field(default_factory=dict)
    """Per rule id, seqs at or below its watermark it consumes in this pass."""
    refs: frozenset[str] = frozenset()
    """The refs these rows answer for (every row of each is here)."""

    def after(self, write: AggregateWrite | None) -> HistoryInput:
        """These rows once ``write`` is applied: what the next pass of a run reads."""
        rows = overlay(self.rows, [write]) if write else self.rows
        refs = self.refs | {row.ref for row in write.upserts} if write else self.refs
        return HistoryInput(rows=list(rows), refs=frozenset(refs))


class _Relation:
    """One relation's state for one partition during a pass."""

    def __init__(self, rel: HistoryRelation, partition: Partition, now_us: int) -> None:
        self.rel = rel
        self.partition = partition
        self.now_us = now_us
        self.types = rel.type_of
        self.filter = [
            (name, Condition.model_validate_json(text), self.types[name])
            for name, text in rel.filter
        ]
        self.rows: dict[str, dict[str, AggregateRow]] = {}
        self.touched: set[str] = set()
        self.dirty: set[tuple[str, str]] = set()
        """``(ref, value)`` of the rows this pass changed: only those are written back."""
        self.gone: set[tuple[str, str]] = set()
        self.in_pass: dict[str, list[tuple[int, str]]] = {}

    def key(self, record: EpisodeRecord) -> str | None:
        """The episode's key text, or None when the relation does not track it."""
        values = []
        for name in self.rel.keys:
            value = _typed(record, name, self.types[name])
            if value is None:
                return None
            values.append(value)
        for name, cond, ftype in self.filter:
            if not evaluate(cond, ftype, raw_value(record, name), now_us=self.now_us):
                return None
        return orjson.dumps(values).decode()

    def ref(self, key: str) -> str:
        return relation_ref(self.partition, self.rel.rule_id, self.rel.name, key)

    def load(self, row: AggregateRow) -> None:
        self.rows.setdefault(row.ref, {})[row.value] = row

    def writes(self) -> tuple[list[AggregateRow], list[tuple[str, str]]]:
        upserts = [
            self.rows[ref][value]
            for ref, value in sorted(self.dirty - self.gone)
            if value in self.rows.get(ref, {})
        ]
        return upserts, sorted(self.gone)


MOST: Final = "#most"
"""The ``value`` of a windowed count's row holding the most it has counted in one window."""
KEPT_WINDOWS: Final = 4
"""A windowed count keeps the rows seen within this many windows of its key's newest one,
so an episode arriving up to three windows late is still counted with what it saw."""


def _first(row: AggregateRow) -> int:
    """When a counted value was first seen (kept in ``data``; rows of a plain count: one
    episode, seen once)."""
    return int(row.data) if row.data else row.last_us


class Counted:
    """The values a count counted for one episode, worked out only when a rule cites them:
    the latest sighting of each value among ``entries[start:end]`` (time, episode id,
    value), the later one on equal times."""

    __slots__ = ("end", "entries", "start")

    def __init__(self, entries: list[tuple[int, str, str]], start: int, end: int) -> None:
        self.entries = entries
        self.start = start
        self.end = end

    def seen(self) -> list[tuple[int, str]]:
        """(time, episode id) of each counted value, oldest first."""
        latest: dict[str, tuple[int, str]] = {}
        for at, eid, value in self.entries[self.start : self.end]:
            before = latest.get(value)
            if before is None or at >= before[0]:
                latest[value] = (at, eid)
        return sorted(latest.values())


class Listed(Counted):
    """Counted episodes listed as they are: ``items[:end]`` (time, episode id)."""

    __slots__ = ("items",)

    def __init__(self, items: list[tuple[int, str]], end: int) -> None:
        super().__init__([], 0, end)
        self.items = items

    def seen(self) -> list[tuple[int, str]]:
        return self.items[: self.end]


class _Log:
    """One key's sightings during a pass, after its stored rows (by latest sighting), for
    in-order windows: entries before ``start`` fell out of the window, ``inside`` values
    are in it, ``at[value]`` is the entry of a value's latest sighting."""

    __slots__ = ("at", "entries", "inside", "start")

    def __init__(self, entries: list[tuple[int, str, str]]) -> None:
        self.entries = entries
        self.at = {value: i for i, (_, _, value) in enumerate(entries)}
        self.inside = len(self.at)
        self.start = 0

    @classmethod
    def of(cls, rows: Mapping[str, AggregateRow]) -> _Log:
        return cls(sorted((r.last_us, r.last_id, value) for value, r in rows.items()))

    def add(self, at: int, eid: str, value: str) -> None:
        """A sighting no older than any before it."""
        seen = self.at.get(value)
        if seen is None or seen < self.start:
            self.inside += 1
        self.at[value] = len(self.entries)
        self.entries.append((at, eid, value))

    def advance(self, low: int) -> int:
        """Drop the values last seen before ``low``; how many values remain."""
        entries, at, start = self.entries, self.at, self.start
        while start < len(entries) and entries[start][0] < low:
            if at[entries[start][2]] == start:
                self.inside -= 1
            start += 1
        self.start = start
        return self.inside


class _Count(_Relation):
    def __init__(self, rel: HistoryRelation, partition: Partition, now_us: int) -> None:
        super().__init__(rel, partition, now_us)
        self.most: dict[str, int] = {}
        self.raised: set[str] = set()
        """Keys whose most-in-one-window this pass raised."""
        self.newest: dict[str, int] = {}
        """Per key, the latest sighting folded in so far (windowed counts)."""
        self.logs: dict[str, _Log] = {}
        """Per key, its sightings in this pass after its stored rows (see :class:`_Log`)."""
        self.latest: dict[str, int] = {}
        """Per key, the newest time counted so far (counts without a window)."""

    def load(self, row: AggregateRow) -> None:
        if row.value == MOST:
            self.most[row.ref] = row.n
        else:
            super().load(row)

    def feed(self, record: EpisodeRecord) -> tuple[int, bool, int, Counted] | None:
        """Fold ``record`` in: (count, grew, time of the newest value counted, the values
        counted), or None if not counted."""
        key = self.key(record)
        if key is None:
            return None
        rel = self.rel
        if rel.distinct is not None:
            distinct = _typed(record, rel.distinct, self.types[rel.distinct])
            if distinct is None:
                return None
            value = orjson.dumps(distinct).decode()
        else:
            value = record.id if rel.within_us is not None else ""
        ref = self.ref(key)
        self.touched.add(ref)
        rows = self.rows.setdefault(ref, {})
        at = to_us(record.timestamp)
        before = rows.get(value)
        newer = before is None or at >= before.last_us
        first = at if before is None else min(_first(before), at)
        if at < self.newest.get(ref, at):
            del self.newest[ref]  # a late sighting: the window's log is built again
            del self.logs[ref]
        rows[value] = row = AggregateRow(
            ref,
            value,
            (before.n if before else 0) + 1,
            at if newer else before.last_us,  # type: ignore[union-attr]
            record.id if newer else before.last_id,  # type: ignore[union-attr]
            str(first) if rel.within_us is not None and rel.distinct is not None else "",
        )
        self.gone.discard((ref, value))
        self.dirty.add((ref, value))
        if rel.within_us is not None:
            return self.windowed(ref, rows, value, at, record.id, rel.within_us)
        newest = max(at, self.latest.get(ref, at))
        if rel.distinct is None:
            sources = self.in_pass.setdefault(ref, [])
            sources.append((at, record.id))
            self.latest[ref] = newest
            return row.n, True, newest, Listed(sources, len(sources))
        log = self.logs.get(ref)
        if log is None:
            self.logs[ref] = log = _Log.of(rows)
            newest = max(newest, log.entries[-1][0])
        else:
            log.entries.append((at, record.id, value))
        self.latest[ref] = newest
        return len(rows), before is None, newest, Counted(log.entries, 0, len(log.entries))

    def windowed(
        self, ref: str, rows: dict[str, AggregateRow], value: str, at: int, eid: str, width: int
    ) -> tuple[int, bool, int, Counted]:
        """The most values seen within one window of ``width`` so far, whether this episode
        (at ``at``, counting ``value``) raised it, the newest time in the best window it
        lies in, and that window's values.

        A value counts in the window ``[x - width, x]`` when it was seen in it: its first
        and latest sightings span it (sessions are short against a window). Windows that
        contain ``at`` end at ``at`` or at a later sighting: a late episode can complete a
        window that ends after it, just as it would have had it arrived in time. An
        in-order episode's window is the tail of the key's log, moved along as episodes
        come: constant work per episode, whatever the window holds."""
        log = self.logs.get(ref)
        if log is None:  # first sighting of the key in this pass (or after a late one)
            self.logs[ref] = log = _Log.of(rows)
            newest = log.entries[-1][0]
        else:
            newest = self.newest[ref]
            if at >= newest:
                log.add(at, eid, value)
        self.newest[ref] = max(newest, at)
        counted: Counted
        if at >= newest:  # in order: the one window ending here
            count = log.advance(at - width)
            counted = Counted(log.entries, log.start, len(log.entries))
            last = at
        else:  # a late episode: windows ending after it may gain it
            best = self.late(rows, at, width)
            count = len(best)
            counted = Listed(sorted((r.last_us, r.last_id) for r in best), len(best))
            last = max(r.last_us for r in best)
        most = self.most.get(ref, 0)
        grew = count > most
        if grew:
            self.most[ref] = most = count
            self.raised.add(ref)
        return most, grew, last, counted

    @staticmethod
    def late(rows: dict[str, AggregateRow], at: int, width: int) -> list[AggregateRow]:
        """The values of the fullest window (of ``width``) containing ``at``, a time before
        the key's newest sighting."""
        ends = {at} | {
            t for r in rows.values() for t in (_first(r), r.last_us) if at < t <= at + width
        }
        best: list[AggregateRow] = []
        for end in sorted(ends):
            inside = [r for r in rows.values() if _first(r) <= end and r.last_us >= end - width]
            if len(inside) > len(best):
                best = inside
        return best

    def writes(self) -> tuple[list[AggregateRow], list[tuple[str, str]]]:
        width = self.rel.within_us
        extra: list[AggregateRow] = []
        if width is not None:  # rows far behind the newest are dropped: state stays bounded
            for ref in self.touched:
                rows = self.rows.get(ref, {})
                if rows:
                    low = max(r.last_us for r in rows.values()) - KEPT_WINDOWS * width
                    for value in [v for v, r in rows.items() if r.last_us < low]:
                        del rows[value]
                        self.gone.add((ref, value))
            extra = [AggregateRow(ref, MOST, self.most[ref], 0, "") for ref in sorted(self.raised)]
        upserts, gone = super().writes()
        return upserts + extra, gone


class _Earlier(_Relation):
    def __init__(
        self,
        rel: HistoryRelation,
        partition: Partition,
        now_us: int,
        seeds: dict[int, EpisodeRecord],
    ) -> None:
        super().__init__(rel, partition, now_us)
        self.seeds = seeds
        """Shared by a pass's relations: negative ordinal → episode of an earlier pass."""
        self.latest: dict[str, tuple[int, EpisodeRecord]] = {}

    def feed(self, record: EpisodeRecord, ordinal: int | None) -> tuple[int, EpisodeRecord] | None:
        """Fold ``record`` (pass ordinal ``ordinal``; None while backfilling) in: the ordinal
        and record of the latest earlier episode with its key, or None when there is none."""
        key = self.key(record)
        if key is None:
            return None
        ref = self.ref(key)
        self.touched.add(ref)
        rows = self.rows.setdefault(ref, {})
        found = self.latest.get(ref)
        if found is None and "" in rows and ordinal is not None:
            seed = -(len(self.seeds) + 1)
            self.seeds[seed] = self.record_of(rows[""])
            found = (seed, self.seeds[seed])
        carried = {name: raw_value(record, name) for name in self.rel.carried}
        data = orjson.dumps(carried, option=orjson.OPT_SORT_KEYS).decode()
        before = rows.get("")
        rows[""] = AggregateRow(
            ref, "", (before.n if before else 0) + 1, to_us(record.timestamp), record.id, data
        )
        self.dirty.add((ref, ""))
        if ordinal is not None:
            self.latest[ref] = (ordinal, record)
        return found

    def record_of(self, row: AggregateRow) -> EpisodeRecord:
        """A stand-in for an episode of an earlier pass: its id, time and carried fields."""
        carried = orjson.loads(row.data) if row.data else {}
        return EpisodeRecord(
            seq=0,
            id=row.last_id,
            content=carried.get("content") or "",
            timestamp=from_us(row.last_us),
            source_node=carried.get("source_node"),
            user=self.partition.user,
            session=carried.get("session") or "",
            agent=self.partition.agent,
            metadata={k: v for k, v in carried.items() if k not in BUILTINS},
        )


@dataclass
class HistoryFacts:
    """What a pass's history patterns contribute, per episode ordinal."""

    counts: dict[int, list[tuple[HistoryRelation, int, bool, int]]] = field(default_factory=dict)
    """Per ordinal: (relation, count, grew, time of the newest episode counted)."""
    earlier: dict[int, list[tuple[HistoryRelation, int, EpisodeRecord]]] = field(
        default_factory=dict
    )
    sources: dict[tuple[int, int], Counted] = field(default_factory=dict)
    """``(relation index, ordinal)`` → what a count counted (see :meth:`counted`)."""
    times: dict[str, int] = field(default_factory=dict)
    """Episode id → its time (µs), for the episodes :meth:`counted` has cited."""
    seeds: dict[int, EpisodeRecord] = field(default_factory=dict)
    """Negative ordinals → episodes of earlier passes found by ``earlier``."""
    write: AggregateWrite | None = None

    def counted(self, rel: int, ordinal: int) -> list[str]:
        """The ids of the episodes the count of relation ``rel`` counted at ``ordinal``
        (oldest first); their times join :attr:`times`."""
        seen = self.sources[(rel, ordinal)].seen()
        self.times.update((eid, at) for at, eid in seen)
        return [eid for _, eid in seen]


def compute(
    relations: Sequence[HistoryRelation],
    pack: str,
    partition: Partition,
    now_us: int,
    episodes: Sequence[EpisodeRecord],
    given: HistoryInput | None,
) -> HistoryFacts:
    """Walk ``episodes`` (pass order) through every history relation (see the module)."""
    given = given or HistoryInput()
    out = HistoryFacts(write=AggregateWrite(pack, partition))
    states: list[_Count | _Earlier] = [
        _Count(rel, partition, now_us)
        if rel.kind == "count"
        else _Earlier(rel, partition, now_us, out.seeds)
        for rel in relations
        if given.rule_ids is None or rel.rule_id in given.rule_ids
    ]
    markers = {marker_ref(partition, s.rel.rule_id, s.rel.name): s for s in states}
    prefixes = [(ref[:-1] + ",", state) for ref, state in markers.items()]
    kept: set[tuple[str, str]] = set()
    for row in given.rows:
        if row.value == MARKER:
            if row.ref in markers:
                kept.add((markers[row.ref].rel.rule_id, markers[row.ref].rel.name))
            continue
        for prefix, state in prefixes:  # a key's ref is its relation's marker ref, extended
            if row.ref.startswith(prefix):
                state.load(row)
                break
    for state in states:
        for record in given.backfill.get(state.rel.name, ()):
            if isinstance(state, _Count):
                state.feed(record)
            else:
                state.feed(record, None)
        if isinstance(state, _Count):
            state.in_pass = {}
    for ordinal, record in enumerate(episodes, start=1):
        for state in states:
            rel = state.rel
            if record.seq <= given.marks.get(rel.rule_id, 0) and record.seq not in (
                given.resumed.get(rel.rule_id, ())
            ):
                continue  # folded in by the pass that consumed it
            if isinstance(state, _Count):
                counted = state.feed(record)
                if counted is not None:
                    count, grew, newest, seen = counted
                    out.counts.setdefault(ordinal, []).append((rel, count, grew, newest))
                    out.sources[(rel.index, ordinal)] = seen
            else:
                found = state.feed(record, ordinal)
                if found is not None:
                    out.earlier.setdefault(ordinal, []).append((rel, *found))
    write = out.write
    assert write is not None
    for state in states:
        upserts, gone = state.writes()
        write.upserts += upserts
        write.deletes += gone
        if (state.rel.rule_id, state.rel.name) not in kept:
            marker = marker_ref(partition, state.rel.rule_id, state.rel.name)
            write.upserts.append(AggregateRow(marker, MARKER, 0, 0, ""))
    return out


def wanted_refs(
    relations: Sequence[HistoryRelation],
    partition: Partition,
    now_us: int,
    episodes: Iterable[EpisodeRecord],
) -> list[str]:
    """The aggregate rows a pass over ``episodes`` reads: the markers of its relations and
    the rows of every key the episodes touch."""
    refs: set[str] = set()
    records = list(episodes)
    for rel in relations:
        refs.add(marker_ref(partition, rel.rule_id, rel.name))
        state = _Relation(rel, partition, now_us)
        for record in records:
            key = state.key(record)
            if key is not None:
                refs.add(state.ref(key))
    return sorted(refs)


def missing_markers(
    relations: Sequence[HistoryRelation], partition: Partition, rows: Sequence[AggregateRow]
) -> list[HistoryRelation]:
    """The relations whose state is not kept for ``partition`` yet."""
    kept = {row.ref for row in rows if row.value == MARKER}
    return [r for r in relations if marker_ref(partition, r.rule_id, r.name) not in kept]


@dataclass(frozen=True)
class HistoryRead:
    """One partition's part of :func:`load_history`."""

    partition: Partition
    episodes: Sequence[EpisodeRecord]
    marks: Mapping[str, int]
    """Each rule's watermark as the pass read it."""
    overlay: Sequence[AggregateWrite] = ()
    """Writes of passes not committed yet (a run's previous pass)."""
    resumed: Mapping[str, set[int]] = field(default_factory=dict)
    """Per rule id, seqs at or below its watermark it consumes now (deferred before)."""
    deferred: Mapping[str, set[int]] = field(default_factory=dict)
    """Per rule id, seqs at or below its watermark it has not consumed (deferred)."""
    carried: HistoryInput | None = None
    """The previous pass of the same run: the rows it read, its writes on top, stand in
    for a read of the refs it read."""


async def load_history(
    relations: Sequence[HistoryRelation],
    rule_ids: Iterable[str],
    pack: str,
    facts: AggregateSource,
    memory: EpisodeSource,
    now_us: int,
    reads: Sequence[HistoryRead],
) -> list[HistoryInput]:
    """The stored aggregates each pass of ``reads`` needs, in one statement; a partition
    whose relation is not kept yet gets the episodes its rule already consumed, to fold in
    first (read once per partition, only then)."""
    wanted = frozenset(rule_ids)
    mine = [rel for rel in relations if rel.rule_id in wanted]
    if not mine:
        return [HistoryInput(marks=r.marks, rule_ids=wanted, resumed=r.resumed) for r in reads]
    wanted_by = [set(wanted_refs(mine, r.partition, now_us, r.episodes)) for r in reads]
    known = [r.carried.refs if r.carried is not None else frozenset() for r in reads]
    refs = sorted({ref for w, k in zip(wanted_by, known, strict=True) for ref in w - k})
    stored = await facts.aggregates_of(pack, refs)
    by_partition: dict[tuple[str, str], list[AggregateRow]] = {}
    for row in stored:
        user, agent = orjson.loads(row.ref)[:2]
        by_partition.setdefault((user, agent), []).append(row)
    out: list[HistoryInput] = []
    for r, want in zip(reads, wanted_by, strict=True):
        rows = by_partition.get((r.partition.user, r.partition.agent), [])
        if r.overlay:
            rows = overlay(rows, r.overlay)
        if r.carried is not None:
            rows = [*rows, *(row for row in r.carried.rows if row.ref in want)]
        backfill: dict[str, list[EpisodeRecord]] = {}
        consumed: list[EpisodeRecord] | None = None
        for rel in missing_markers(mine, r.partition, rows):
            mark = r.marks.get(rel.rule_id, 0)
            if mark <= 0:
                continue
            if consumed is None:
                read = await memory.since_checked(r.partition, 0)
                consumed = sorted(read.records, key=lambda e: (e.timestamp, e.seq))
            pending = r.deferred.get(rel.rule_id, set())
            backfill[rel.name] = [e for e in consumed if e.seq <= mark and e.seq not in pending]
        out.append(
            HistoryInput(
                rows=rows,
                marks=r.marks,
                backfill=backfill,
                rule_ids=wanted,
                resumed=r.resumed,
                refs=frozenset(want),
            )
        )
    return out
