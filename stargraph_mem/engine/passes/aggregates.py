"""``over: history`` patterns: evidence that spans passes, from durable aggregates.

For each such pattern (a :class:`~stargraph_mem.compiler.program.HistoryRelation`) the
runtime walks the pass's episodes in pass order and, for each episode the owning rule has
not consumed yet, works out what the pattern sees *before and including* it:

* ``count``: the tally for the episode's key over everything consumed so far (distinct
  values with ``distinct``; with ``within``, only what was stamped at most that long
  before this episode), and whether this episode raised it;
* ``earlier``: the latest episode consumed before this one with the same key (from this
  pass, or from an earlier pass through the stored row, given a negative ordinal).

The result enters CLIPS as one ``sm-hist-<i>`` fact per episode, an equality join on the
episode's ordinal; the changed rows go back to the store in the pass's transaction
(:mod:`stargraph_mem.stores.repositories.aggregates`). Cost: O(episodes of the pass + keys they
touch);
an in-order episode moves its key's window along in constant work, and the episodes a
count counted are listed only when a rule cites them (:meth:`HistoryFacts.counted`).

A run's first pass reads of a windowed count's keys only the rows its episodes can need
(:func:`window_of`); its later passes take over the relation states the previous pass
left (:attr:`HistoryInput.live`) instead of rows. Counts of two rules defined alike and
fed alike are worked out once (the later one *follows* the first, :func:`_pair`), each
rule still writing its own rows.

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

from stargraph_mem.compiler.program import HistoryRelation
from stargraph_mem.ir.models import EPISODE_BUILTINS, Condition, FieldType
from stargraph_mem.ir.reference import ILL_TYPED, MISSING, evaluate, raw_value, read_value
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord
from stargraph_mem.stores.repositories.aggregates import (
    MARKER,
    AggregateRow,
    AggregateWindow,
    AggregateWrite,
    counted_value,
    marker_ref,
    overlay,
    relation_ref,
)
from stargraph_mem.stores.scope import Partition


class AggregateSource(Protocol):
    async def aggregates_of(
        self, pack: str, refs: Sequence[str], window: AggregateWindow | None = None
    ) -> list[AggregateRow]: ...


class EpisodeSource(Protocol):
    async def since_checked(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead: ...


BUILTINS = frozenset(EPISODE_BUILTINS)


def _typed(record: EpisodeRecord, name: str, ftype: FieldType) -> Any:
    value = read_value(ftype, raw_value(record, name))
    return None if value is MISSING or value is ILL_TYPED else value


Signature = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]
"""What an episode's key depends on: a relation's ``keys`` and literal ``filter``."""


def _signature(rel: HistoryRelation) -> Signature:
    return rel.keys, rel.filter


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
    """The refs these rows answer for (every row of each is here, unless :attr:`partial`)."""
    partial: bool = False
    """Windowed counts' keys have only the rows this pass needs (see :func:`load_history`):
    a run's next pass reads its rows again."""
    live: Mapping[int, _Relation] = field(default_factory=dict)
    """Per relation index, the state a previous pass of the same run left: it holds the
    rows of its refs (in :attr:`refs`), which :attr:`rows` then leaves out."""
    kept: frozenset[tuple[str, str]] = frozenset()
    """``(rule id, relation name)`` whose marker a previous pass of the run read or wrote."""
    keys: dict[Signature, dict[int, str | None]] = field(default_factory=dict)
    """Per key signature, each episode's key (by seq), worked out once for the read."""
    left: dict[int, _Relation] = field(default_factory=dict)
    """Filled by :func:`compute`: the states the pass leaves, for :meth:`after`."""

    def after(self, write: AggregateWrite | None) -> HistoryInput:
        """These rows once ``write`` is applied: what the next pass of a run reads."""
        if self.partial:
            return HistoryInput()
        refs = self.refs | {row.ref for row in write.upserts} if write else self.refs
        if self.left:  # the states themselves, moved on by the pass: nothing to rebuild
            for state in self.left.values():
                state.keep_only(refs)
            kept = self.kept | {(s.rel.rule_id, s.rel.name) for s in self.left.values()}
            return HistoryInput(live=dict(self.left), kept=kept, refs=frozenset(refs))
        rows = overlay(self.rows, [write]) if write else self.rows
        return HistoryInput(rows=list(rows), refs=frozenset(refs))


class _KeyOf:
    """An episode's key text for one signature (None when the relation does not track
    it); string fields, the usual kind, are read without the generic conversion."""

    def __init__(self, rel: HistoryRelation, now_us: int) -> None:
        types = rel.type_of
        self.fields = [(name, types[name], name in BUILTINS) for name in rel.keys]
        self.filter = [
            (name, Condition.model_validate_json(text), types[name]) for name, text in rel.filter
        ]
        self.now_us = now_us

    def __call__(self, record: EpisodeRecord) -> str | None:
        values = []
        metadata = record.metadata
        for name, ftype, builtin in self.fields:
            raw = raw_value(record, name) if builtin else metadata.get(name)
            if ftype == "string":
                if not isinstance(raw, str) or "\x00" in raw:
                    return None
                values.append(raw)
                continue
            value = read_value(ftype, raw)
            if value is MISSING or value is ILL_TYPED:
                return None
            values.append(value)
        for name, cond, ftype in self.filter:
            if not evaluate(cond, ftype, raw_value(record, name), now_us=self.now_us):
                return None
        return orjson.dumps(values).decode()


class _Relation:
    """One relation's state for one partition: its rows, and what the pass changed. A run
    hands it from pass to pass (:attr:`HistoryInput.live`), so rows are read once."""

    def __init__(self, rel: HistoryRelation, partition: Partition, now_us: int) -> None:
        self.rel = rel
        self.partition = partition
        self.types = rel.type_of
        self.rows: dict[str, dict[str, AggregateRow]] = {}
        self.refs: dict[str, str] = {}
        """Key text → ref (built once per key)."""
        self.begin(now_us)

    def begin(self, now_us: int) -> None:
        """Start a pass at ``now_us``: what only one pass keeps starts empty."""
        self.now_us = now_us
        self.key_of = _KeyOf(self.rel, now_us)
        self.touched: set[str] = set()
        self.dirty: set[tuple[str, str]] = set()
        """``(ref, value)`` of the rows this pass changed: only those are written back."""
        self.gone: set[tuple[str, str]] = set()
        self.in_pass: dict[str, list[tuple[int, str]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["key_of"]  # rebuilt by begin (conditions need not travel)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.key_of = _KeyOf(self.rel, self.now_us)

    def key(self, record: EpisodeRecord) -> str | None:
        """The episode's key text, or None when the relation does not track it."""
        return self.key_of(record)

    def ref(self, key: str) -> str:
        ref = self.refs.get(key)
        if ref is None:
            ref = self.refs[key] = relation_ref(
                self.partition, self.rel.rule_id, self.rel.name, key
            )
        return ref

    def load(self, row: AggregateRow) -> None:
        self.rows.setdefault(row.ref, {})[row.value] = row

    def keep_only(self, refs: frozenset[str] | set[str]) -> None:
        """Forget the refs a run's next pass reads again (those outside ``refs``)."""
        for ref in [r for r in self.rows if r not in refs]:
            self.drop(ref)
        if len(self.refs) > len(self.rows):
            self.refs = {k: r for k, r in self.refs.items() if r in self.rows}

    def drop(self, ref: str) -> None:
        del self.rows[ref]

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
    """One key's sightings, after its stored rows (by latest sighting), for in-order
    windows: entries before ``start`` fell out of the window, ``inside`` values are in it,
    ``at[value]`` is the entry of a value's latest sighting. A windowed count keeps it from
    pass to pass of a run (:meth:`compact` drops what fell out)."""

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

    def compact(self) -> None:
        """Forget the entries that fell out of the window (in a new list: what a pass
        counted still reads the old one)."""
        entries = self.entries[self.start :]
        self.entries = entries
        self.at = {value: i for i, (_, _, value) in enumerate(entries)}
        self.start = 0


class _Count(_Relation):
    def __init__(self, rel: HistoryRelation, partition: Partition, now_us: int) -> None:
        self.most: dict[str, int] = {}
        self.newest: dict[str, int] = {}
        """Per key, the latest sighting folded in so far (windowed counts)."""
        self.logs: dict[str, _Log] = {}
        """Per key, its sightings after its stored rows (see :class:`_Log`)."""
        self.ordered: set[str] = set()
        """Keys whose rows (a windowed count's) are in the order of their latest sighting,
        so those that left the window are the first ones."""
        self.last: tuple[list[AggregateRow], list[tuple[str, str]]] = ([], [])
        """What :meth:`writes` gave last (a relation sharing the rows writes it too)."""
        self.lead: _Count | None = None
        """A relation of another rule defined alike, fed the same episodes from the same
        rows: this one keeps no rows of its own, and writes what the lead writes."""
        super().__init__(rel, partition, now_us)

    def begin(self, now_us: int) -> None:
        super().begin(now_us)
        self.raised: set[str] = set()
        """Keys whose most-in-one-window this pass raised."""
        self.latest: dict[str, int] = {}
        """Per key, the newest time counted so far (counts without a window)."""
        if self.rel.within_us is None:  # a log over all values lasts one pass
            self.logs = {}
            self.newest = {}

    def load(self, row: AggregateRow) -> None:
        if row.value == MOST:
            self.most[row.ref] = row.n
        else:
            super().load(row)

    def drop(self, ref: str) -> None:
        super().drop(ref)
        self.most.pop(ref, None)
        self.logs.pop(ref, None)
        self.newest.pop(ref, None)
        self.ordered.discard(ref)

    def same_rows(self, other: _Count, refs: Iterable[str]) -> bool:
        """Whether ``other`` holds, for the keys of ``refs`` (this one's), the rows this one
        holds (other refs aside)."""
        for ref in refs:
            key = orjson.loads(ref)[4]
            theirs = other.ref(key)
            mine = self.rows.get(ref, {})
            held = other.rows.get(theirs, {})
            if self.most.get(ref) != other.most.get(theirs) or len(mine) != len(held):
                return False
            for value, row in mine.items():
                twin = held.get(value)
                if twin is None or (row.n, row.last_us, row.last_id, row.data) != (
                    twin.n,
                    twin.last_us,
                    twin.last_id,
                    twin.data,
                ):
                    return False
        return True

    def adopt(self, lead: _Count, skip: set[str]) -> None:
        """Take ``lead``'s rows (those of keys whose refs are not in ``skip``) as this
        one's own: the two stop sharing."""
        for ref, rows in lead.rows.items():
            if ref in skip:
                continue
            mine = self.ref(orjson.loads(ref)[4])
            if mine in self.rows:
                continue
            self.rows[mine] = {
                value: AggregateRow(mine, value, r.n, r.last_us, r.last_id, r.data)
                for value, r in rows.items()
            }
            if ref in lead.most:
                self.most[mine] = lead.most[ref]
        self.lead = None

    def share(self, lead: _Count) -> None:
        """Share ``lead``'s rows from now on (the rows read for this one agree)."""
        self.lead = lead
        self.rows, self.most, self.logs, self.newest, self.ordered = {}, {}, {}, {}, set()

    def feed(self, record: EpisodeRecord, key: str) -> tuple[int, bool, int, Counted] | None:
        """Fold ``record`` (of key ``key``) in: (count, grew, time of the newest value
        counted, the values counted), or None if not counted."""
        rel = self.rel
        width = rel.within_us
        if rel.distinct is not None:
            distinct = _typed(record, rel.distinct, self.types[rel.distinct])
            if distinct is None:
                return None
            value = counted_value(distinct)
        else:
            value = record.id if width is not None else ""
        ref = self.ref(key)
        self.touched.add(ref)
        rows = self.rows.get(ref)
        if rows is None:
            rows = self.rows[ref] = {}
            self.ordered.add(ref)
        at = to_us(record.timestamp)
        before = rows.get(value)
        newer = before is None or at >= before.last_us
        if width is not None and at < self.newest.get(ref, at):
            del self.newest[ref]  # a late sighting: the window's log is built again
            del self.logs[ref]
        if before is None:
            row = AggregateRow(
                ref, value, 1, at, record.id, str(at) if width is not None and rel.distinct else ""
            )
        else:
            row = AggregateRow(
                ref,
                value,
                before.n + 1,
                at if newer else before.last_us,
                record.id if newer else before.last_id,
                str(min(_first(before), at)) if width is not None and rel.distinct else "",
            )
        if width is not None and newer:  # rows stay in the order of their latest sighting
            if ref in self.ordered and rows and at < next(reversed(rows.values())).last_us:
                self.ordered.discard(ref)
            if before is not None:
                del rows[value]
        rows[value] = row
        self.gone.discard((ref, value))
        self.dirty.add((ref, value))
        if width is not None:
            return self.windowed(ref, rows, value, at, record.id, width)
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
        if log is None:  # first sighting of the key in this run (or after a late one)
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
                self.trim(ref, width)
            extra = [AggregateRow(ref, MOST, self.most[ref], 0, "") for ref in sorted(self.raised)]
        upserts, gone = super().writes()
        self.last = (upserts + extra, gone)
        return self.last

    def trim(self, ref: str, width: int) -> None:
        """Drop ``ref``'s rows last seen more than :data:`KEPT_WINDOWS` windows before its
        newest one, and what its log no longer needs."""
        rows = self.rows.get(ref)
        if not rows:
            return
        if ref not in self.ordered:
            rows = self.rows[ref] = dict(sorted(rows.items(), key=lambda item: item[1].last_us))
            self.ordered.add(ref)
        low = next(reversed(rows.values())).last_us - KEPT_WINDOWS * width
        old = []
        for value, row in rows.items():
            if row.last_us >= low:
                break
            old.append(value)
        for value in old:
            del rows[value]
            self.gone.add((ref, value))
        log = self.logs.get(ref)
        if log is not None and log.start > len(log.entries) // 2:
            log.compact()

    def follow(self, lead: _Count) -> tuple[list[AggregateRow], list[tuple[str, str]]]:
        """What this relation writes when it shares ``lead``'s rows: the lead's writes
        (made already), under this relation's refs."""
        mine = {ref: self.ref(key) for key, ref in lead.refs.items() if ref in lead.touched}
        upserts, gone = lead.last
        return (
            [
                AggregateRow(mine[r.ref], r.value, r.n, r.last_us, r.last_id, r.data)
                for r in upserts
            ],
            [(mine[ref], value) for ref, value in gone],
        )


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

    def begin(self, now_us: int) -> None:
        super().begin(now_us)
        self.latest: dict[str, tuple[int, EpisodeRecord]] = {}

    def feed(
        self, record: EpisodeRecord, key: str, ordinal: int | None
    ) -> tuple[int, EpisodeRecord] | None:
        """Fold ``record`` (of key ``key``, pass ordinal ``ordinal``; None while
        backfilling) in: the ordinal and record of the latest earlier episode with its key,
        or None when there is none."""
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
    kept: set[int] = field(default_factory=set)
    """Ordinals of the pass's episodes folded into a durable aggregate: evidence a later
    pass still sees, so an episode no rule used yet is not lost."""
    write: AggregateWrite | None = None

    def counted(self, rel: int, ordinal: int) -> list[str]:
        """The ids of the episodes the count of relation ``rel`` counted at ``ordinal``
        (oldest first); their times join :attr:`times`."""
        seen = self.sources[(rel, ordinal)].seen()
        self.times.update((eid, at) for at, eid in seen)
        return [eid for _, eid in seen]


State = _Count | _Earlier


def _states(
    relations: Sequence[HistoryRelation],
    partition: Partition,
    now_us: int,
    given: HistoryInput,
    seeds: dict[int, EpisodeRecord],
) -> list[State]:
    """The pass's relation states: those a previous pass of the run left, else new."""
    states: list[State] = []
    for rel in relations:
        if given.rule_ids is not None and rel.rule_id not in given.rule_ids:
            continue
        state = given.live.get(rel.index)
        if isinstance(state, _Count | _Earlier) and state.partition == partition:
            state.begin(now_us)
        elif rel.kind == "count":
            state = _Count(rel, partition, now_us)
        else:
            state = _Earlier(rel, partition, now_us, seeds)
        if isinstance(state, _Earlier):
            state.seeds = seeds
        states.append(state)
    return states


def _load(
    states: Sequence[State], partition: Partition, given: HistoryInput
) -> tuple[set[tuple[str, str]], dict[int, set[str]]]:
    """Load ``given.rows`` into ``states`` (a ref a state holds already is left as it
    is); the ``(rule id, relation name)`` whose state is kept, and each state's loaded
    refs (by relation index)."""
    markers = {marker_ref(partition, s.rel.rule_id, s.rel.name): s for s in states}
    kept = set(given.kept)
    by_ref: dict[str, list[AggregateRow]] = {}
    for row in given.rows:
        if row.value == MARKER:
            if row.ref in markers:
                kept.add((markers[row.ref].rel.rule_id, markers[row.ref].rel.name))
        else:
            by_ref.setdefault(row.ref, []).append(row)
    prefixes = [(ref[:-1] + ",", state) for ref, state in markers.items()]
    loaded: dict[int, set[str]] = {s.rel.index: set() for s in states}
    for ref, rows in by_ref.items():
        for prefix, state in prefixes:  # a key's ref is its relation's marker ref, extended
            if ref.startswith(prefix):
                if ref not in state.rows:
                    for row in rows:
                        state.load(row)
                    loaded[state.rel.index].add(ref)
                break
    return kept, loaded


def _pair(
    states: Sequence[State],
    given: HistoryInput,
    kept: set[tuple[str, str]],
    loaded: dict[int, set[str]],
) -> None:
    """Let a count share the rows of an earlier one of another rule defined alike when
    both are fed the same episodes from the same stored rows (the shipped packs' rules
    count alike); a count that shared and may not any more takes its own copy."""
    leads: dict[str, _Count] = {}
    for state in states:
        if not isinstance(state, _Count):
            continue
        lead = leads.get(state.rel.name)
        was, state.lead = state.lead, None
        if was is not None:
            if was is lead and _agree(state, lead, given, kept, loaded):
                state.share(lead)
                continue
            state.adopt(was, loaded.get(was.rel.index, set()))
        if lead is None:
            leads[state.rel.name] = state
        elif (
            len(state.rows) == len(loaded[state.rel.index])
            and len(lead.rows) == len(loaded[lead.rel.index])
            and _agree(state, lead, given, kept, loaded)
        ):
            state.share(lead)


def _agree(
    state: _Count,
    lead: _Count,
    given: HistoryInput,
    kept: set[tuple[str, str]],
    loaded: dict[int, set[str]],
) -> bool:
    """Whether ``state`` and ``lead`` are fed the same episodes in this pass and the rows
    just read for them agree."""
    mine, theirs = state.rel, lead.rel
    if (
        given.marks.get(mine.rule_id, 0) != given.marks.get(theirs.rule_id, 0)
        or given.resumed.get(mine.rule_id, set()) != given.resumed.get(theirs.rule_id, set())
        or ((mine.rule_id, mine.name) in kept) != ((theirs.rule_id, theirs.name) in kept)
    ):
        return False
    refs = loaded[mine.index]
    same_keys = {lead.ref(orjson.loads(ref)[4]) for ref in refs} == loaded[theirs.index]
    return same_keys and state.same_rows(lead, refs)


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
    states = _states(relations, partition, now_us, given, out.seeds)
    kept, loaded = _load(states, partition, given)
    _pair(states, given, kept, loaded)
    memos: dict[Signature, dict[int, str | None]] = {}
    for state in states:
        sig = _signature(state.rel)
        if sig not in memos:
            memos[sig] = dict(given.keys.get(sig, {}))
    for state in states:
        if isinstance(state, _Count) and state.lead is not None:
            continue  # fed through its lead
        key_of = state.key_of
        for record in given.backfill.get(state.rel.name, ()):
            key = key_of(record)
            if key is None:
                continue
            if isinstance(state, _Count):
                state.feed(record, key)
            else:
                state.feed(record, key, None)
        if isinstance(state, _Count):
            state.in_pass = {}
    plan = [
        (
            state,
            state.rel,
            given.marks.get(state.rel.rule_id, 0),
            given.resumed.get(state.rel.rule_id, ()),
            memos[_signature(state.rel)],
        )
        for state in states
    ]
    for ordinal, record in enumerate(episodes, start=1):
        seq = record.seq
        shared: dict[int, tuple[int, bool, int, Counted] | None] = {}
        for state, rel, mark, resumed, memo in plan:
            if seq <= mark and seq not in resumed:
                continue  # folded in by the pass that consumed it
            if isinstance(state, _Count):
                if state.lead is not None:
                    counted = shared[state.lead.rel.index]
                else:
                    key = memo[seq] if seq in memo else memo.setdefault(seq, state.key_of(record))
                    counted = None if key is None else state.feed(record, key)
                    shared[rel.index] = counted
                if counted is not None:
                    count, grew, newest, seen = counted
                    out.kept.add(ordinal)
                    out.counts.setdefault(ordinal, []).append((rel, count, grew, newest))
                    out.sources[(rel.index, ordinal)] = seen
            else:
                key = memo[seq] if seq in memo else memo.setdefault(seq, state.key_of(record))
                found = None if key is None else state.feed(record, key, ordinal)
                if key is not None:
                    out.kept.add(ordinal)
                if found is not None:
                    out.earlier.setdefault(ordinal, []).append((rel, *found))
    write = out.write
    assert write is not None
    for state in states:
        if isinstance(state, _Count) and state.lead is not None:
            upserts, gone = state.follow(state.lead)
        else:
            upserts, gone = state.writes()
        write.upserts += upserts
        write.deletes += gone
        if (state.rel.rule_id, state.rel.name) not in kept:
            marker = marker_ref(partition, state.rel.rule_id, state.rel.name)
            write.upserts.append(AggregateRow(marker, MARKER, 0, 0, ""))
    given.left = {state.rel.index: state for state in states}
    return out


def episode_keys(
    relations: Sequence[HistoryRelation], now_us: int, episodes: Iterable[EpisodeRecord]
) -> dict[Signature, dict[int, str | None]]:
    """Each episode's key (by seq) for each key signature of ``relations``."""
    records = list(episodes)
    out: dict[Signature, dict[int, str | None]] = {}
    for rel in relations:
        sig = _signature(rel)
        if sig not in out:
            key_of = _KeyOf(rel, now_us)
            out[sig] = {record.seq: key_of(record) for record in records}
    return out


def wanted_refs(
    relations: Sequence[HistoryRelation],
    partition: Partition,
    keys: Mapping[Signature, Mapping[int, str | None]],
    windowed: set[str] | None = None,
) -> list[str]:
    """The aggregate rows a pass reads: the markers of its relations and the rows of
    every key its episodes touch (``keys``, from :func:`episode_keys`); the refs of
    windowed counts go to ``windowed`` when it is given."""
    refs: set[str] = set()
    for rel in relations:
        refs.add(marker_ref(partition, rel.rule_id, rel.name))
        into = windowed if windowed is not None and _is_windowed(rel) else refs
        for key in set(keys[_signature(rel)].values()):
            if key is not None:
                into.add(relation_ref(partition, rel.rule_id, rel.name, key))
    return sorted(refs)


def _is_windowed(rel: HistoryRelation) -> bool:
    return rel.kind == "count" and rel.within_us is not None


def window_of(
    relations: Sequence[HistoryRelation], reads: Sequence[HistoryRead], refs: set[str]
) -> AggregateWindow | None:
    """What windowed counts need of ``refs`` for passes over ``reads``' episodes: the rows
    inside the widest window before the earliest episode (no episode of the pass sees an
    older one), those more than :data:`KEPT_WINDOWS` of the narrowest windows behind the
    newest episode or their key's newest row (the pass drops them), and those of the
    episodes' own values (updated). The pass then counts, and writes, what it would with
    every row of the keys; only a later pass of the same run needs them all."""
    counts = [rel for rel in relations if _is_windowed(rel)]
    times = [to_us(e.timestamp) for r in reads for e in r.episodes]
    if not refs:
        return None
    widths = [rel.within_us for rel in counts if rel.within_us is not None]
    values = {MOST}
    for rel in counts:
        for r in reads:
            for record in r.episodes:
                if rel.distinct is None:
                    values.add(record.id)
                    continue
                value = _typed(record, rel.distinct, rel.type_of[rel.distinct])
                if value is not None:
                    values.add(counted_value(value))
    return AggregateWindow(  # refs imply counts and episodes
        refs=sorted(refs),
        low=min(times) - max(widths),
        newest=max(times),
        keep=KEPT_WINDOWS * min(widths),
        values=sorted(values),
    )


def missing_markers(
    relations: Sequence[HistoryRelation],
    partition: Partition,
    rows: Sequence[AggregateRow],
    kept: frozenset[tuple[str, str]] = frozenset(),
) -> list[HistoryRelation]:
    """The relations whose state is not kept for ``partition`` yet (``kept``: known to be
    kept already)."""
    markers = {row.ref for row in rows if row.value == MARKER}
    return [
        r
        for r in relations
        if (r.rule_id, r.name) not in kept
        and marker_ref(partition, r.rule_id, r.name) not in markers
    ]


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
    """The previous pass of the same run: the rows it read, its writes on top (or the
    states it left), stand in for a read of the refs it read."""


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
    keys_by = [episode_keys(mine, now_us, r.episodes) for r in reads]
    # a run's first pass reads only the rows its windows need (see window_of)
    windowed_by: list[set[str] | None] = [set() if r.carried is None else None for r in reads]
    wanted_by = [
        set(wanted_refs(mine, r.partition, keys, windowed))
        for r, keys, windowed in zip(reads, keys_by, windowed_by, strict=True)
    ]
    known = [r.carried.refs if r.carried is not None else frozenset() for r in reads]
    refs = sorted({ref for w, k in zip(wanted_by, known, strict=True) for ref in w - k})
    in_windows = {ref for w in windowed_by if w is not None for ref in w}
    window = window_of(mine, [r for r in reads if r.carried is None], in_windows)
    stored = await facts.aggregates_of(pack, refs, window) if refs or window else []
    for want, windowed in zip(wanted_by, windowed_by, strict=True):
        want |= windowed or set()
    by_partition: dict[tuple[str, str], list[AggregateRow]] = {}
    if len(reads) == 1:
        by_partition[(reads[0].partition.user, reads[0].partition.agent)] = stored
    else:
        scope: dict[str, tuple[str, str]] = {}
        for row in stored:
            owner = scope.get(row.ref)
            if owner is None:
                user, agent = orjson.loads(row.ref)[:2]
                owner = scope[row.ref] = (user, agent)
            by_partition.setdefault(owner, []).append(row)
    out: list[HistoryInput] = []
    for r, want, held, keys, windowed in zip(
        reads, wanted_by, known, keys_by, windowed_by, strict=True
    ):
        rows = by_partition.get((r.partition.user, r.partition.agent), [])
        if r.overlay:
            rows = overlay(rows, r.overlay)
        carried = r.carried
        live: Mapping[int, _Relation] = {}
        kept: frozenset[tuple[str, str]] = frozenset()
        if carried is not None and carried.live:
            rows = [row for row in rows if row.ref not in held]
            live, kept = carried.live, carried.kept
        elif carried is not None:
            rows = [*rows, *(row for row in carried.rows if row.ref in want)]
        backfill: dict[str, list[EpisodeRecord]] = {}
        consumed: list[EpisodeRecord] | None = None
        for rel in missing_markers(mine, r.partition, rows, kept):
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
                live=live,
                kept=kept,
                keys=keys,
                partial=bool(windowed),
            )
        )
    return out
