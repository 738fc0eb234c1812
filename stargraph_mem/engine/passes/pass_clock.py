"""The pass time rule: a pass at time T consumes only episodes stamped at or before T.

A pass reads the episodes after its watermarks as before. Those stamped after its time
stay pending: the pass records them as deferred (per watermark key) and its watermarks
move past them all the same, so an episode from the future never holds back episodes
stored after it. A later pass whose time reaches a deferred episode consumes it: it is
read again by id, joins that pass's episodes (every pass takes its episodes in timestamp
order) and its deferral is deleted in the same transaction as that pass's deltas (see
:mod:`~stargraph_mem.stores.repositories.pass_time`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from stargraph_mem.model.time import to_us
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord
from stargraph_mem.stores.protocols import EpisodeRepository
from stargraph_mem.stores.repositories.pass_time import Deferral, PassTime

__all__ = ["TimedRead", "due", "resumed_records", "timed"]


@dataclass
class TimedRead:
    """A pass's read split by its time."""

    records: list[EpisodeRecord]
    """What the pass consumes: read episodes stamped at or before its time, and the
    deferred ones now due (``seq`` order)."""
    time: PassTime
    """What the apply writes about time (see :class:`PassTime`)."""
    resumed: dict[str, set[int]] = field(default_factory=dict)
    """Watermark key → seqs of deferred episodes the pass consumes under it."""


def due(deferred: Iterable[Deferral], keys: Sequence[str], now_us: int) -> list[Deferral]:
    """The deferrals under ``keys`` whose episodes are stamped at or before ``now_us``."""
    wanted = set(keys)
    return [d for d in deferred if d.rule_id in wanted and d.ts_us <= now_us]


async def resumed_records(
    memory: EpisodeRepository, deferrals: Iterable[Deferral]
) -> dict[str, EpisodeRecord]:
    """The stored episodes of ``deferrals`` by id (no read when there are none)."""
    ids = sorted({d.episode_id for d in deferrals})
    if not ids:
        return {}
    return {record.id: record for record in await memory.by_ids(ids)}


def timed(
    read: CheckedRead,
    after: int,
    now: datetime,
    keys: Sequence[str],
    marks: dict[str, int],
    resuming: Sequence[Deferral],
    found: dict[str, EpisodeRecord],
) -> TimedRead:
    """Split ``read`` (the episodes after ``after``) at ``now``.

    ``keys`` are the pass's watermark keys and ``marks`` their stored watermarks: an
    episode stamped after ``now`` is deferred under each key whose watermark it is past.
    ``resuming`` are due deferrals and ``found`` their episodes by id (a deferral whose
    episode cannot be read any more is dropped all the same).
    """
    now_us = to_us(now)
    records = read.records
    later: list[EpisodeRecord] = []
    if any(record.timestamp > now for record in records):
        later = [record for record in records if record.timestamp > now]
        records = [record for record in records if record.timestamp <= now]
    deferred = tuple(
        Deferral(key, record.seq, record.id, to_us(record.timestamp))
        for record in later
        for key in keys
        if record.seq > marks.get(key, 0)
    )
    resumed: dict[str, set[int]] = {}
    if resuming:
        have = {record.seq for record in records}
        extra: dict[int, EpisodeRecord] = {}
        for deferral in resuming:
            record = found.get(deferral.episode_id)
            if record is None:
                continue
            resumed.setdefault(deferral.rule_id, set()).add(record.seq)
            if record.seq not in have:
                extra[record.seq] = record
        if extra:
            records = sorted([*records, *extra.values()], key=lambda r: r.seq)
    upto = read.last_seq(after)
    return TimedRead(records, PassTime(now_us, upto, deferred, tuple(resuming)), resumed)


def after_pass(stored: Sequence[Deferral], time: PassTime | None) -> list[Deferral]:
    """The deferrals stored once a pass with ``time`` is applied."""
    if time is None:
        return list(stored)
    gone = {(d.rule_id, d.seq) for d in time.resumed}
    kept = [d for d in stored if (d.rule_id, d.seq) not in gone]
    known = {(d.rule_id, d.seq) for d in kept}
    kept += [d for d in time.deferred if (d.rule_id, d.seq) not in known]
    return sorted(kept, key=lambda d: (d.seq, d.rule_id))


def not_yet_due(stored: Sequence[Deferral], now_us: int) -> frozenset[int]:
    """The seqs of the distinct episodes among ``stored`` stamped after ``now_us``."""
    return frozenset(d.seq for d in stored if d.ts_us > now_us)
