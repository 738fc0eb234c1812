"""Replay: rebuild the semantic store from the episode log under other packs, and diff.

The real database is only ever read: a SQLite file is opened read-only (the stores'
read-only open: ``immutable=1`` when no ``-wal`` file exists, so not even side files
appear; ``mode=ro`` when a writer has one open); a PostgreSQL memory is first copied
whole into a temporary SQLite file (:func:`~stargraph_mem.stores.copy.copy_database`,
which only reads the server). Its episodes are copied as stored, through the episode
repositories of the two databases and in one read snapshot together with its current
facts and pass times, into a scratch database; the engine consolidates the scratch copy
with the given packs; the scratch facts are then compared with the real ones, keyed by
``(user, agent, subject, predicate)``.

When the passes run (:class:`ReplayTimes`): by default at the pass times the real
database recorded (``pass_times``: every applied pass writes its time and how far it had
read), partition by partition, each pass seeing only the episodes the real pass had been
stored to see; a pack whose name has no recorded times in a partition uses the times of
every pack there. A database that recorded no pass time (consolidated before pass times
were recorded, or never) is replayed in one pass at ``now``. ``now`` given explicitly
means one pass at that time; ``cadence`` (a cron expression, or ``nightly``) means one pass
per fire time from the first episode's timestamp to ``now``. Every pass consumes only
episodes stamped at or before its time, as real passes do.

Episode rows that cannot be used are skipped and listed in the result (``quarantined``):
rows the scratch schema refuses (a NULL where a value is required) are left out of the
copy, and rows that do not decode are quarantined by the scratch store as it reads them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from stargraph_mem.compiler.cadence import next_fire
from stargraph_mem.compiler.pack import CompiledPack
from stargraph_mem.engine.api import Consolidator, runtime_for
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.engine.passes.runner import PassRunner
from stargraph_mem.errors import ScheduleError, StoreError
from stargraph_mem.model.cadence import Cadence
from stargraph_mem.model.facts import Fact, FactPattern
from stargraph_mem.model.time import from_us, to_us, to_utc, utc_now
from stargraph_mem.stores.copy import COPIED_TABLES, copy_database
from stargraph_mem.stores.database import SQLiteDatabase, parse_database_url
from stargraph_mem.stores.memory import QuarantinedRow
from stargraph_mem.stores.repositories.episode_rows import partition_of
from stargraph_mem.stores.repositories.episodes import STORED_COLUMNS
from stargraph_mem.stores.scope import Partition

__all__ = [
    "COPY_CHUNK",
    "MAX_CADENCE_TIMES",
    "NIGHTLY",
    "FactChange",
    "FactState",
    "Progress",
    "ReplayResult",
    "ReplayTimes",
    "diff_facts",
    "readonly_uri",
    "replay",
]

COPY_CHUNK = 50_000
"""Episodes (by ``seq`` range) copied per statement; the progress callback runs per chunk."""
NIGHTLY = "0 3 * * *"
"""What ``cadence="nightly"`` means: 03:00 UTC every day (the default sleep cycle)."""
MAX_CADENCE_TIMES = 10_000
"""The most fire times a ``cadence`` may give between the first episode and ``now``."""

TimesMode = Literal["recorded", "now", "cadence"]
Recorded = dict[str, list[tuple[str, int, int]]]
"""Partition key → recorded passes ``(pack, pass time µs, highest seq read)``."""


@dataclass(frozen=True)
class ReplayTimes:
    """When the replay's passes run.

    ``mode`` is ``recorded`` (the real database's pass times, ``recorded``), ``now`` (one
    pass at ``now``) or ``cadence`` (one pass per time in ``fires``, the fire times of
    ``cadence``).
    """

    mode: TimesMode
    now: datetime
    recorded: Recorded = field(default_factory=dict)
    cadence: str | None = None
    fires: tuple[datetime, ...] = ()

    def events(
        self, partition: Partition, packs: Sequence[str]
    ) -> list[tuple[datetime, int | None, int]]:
        """The passes over ``partition``, in order: ``(pass time, highest seq the pass may
        read or None for all, index of the pack in packs)``."""
        if self.mode == "now":
            return [(self.now, None, index) for index in range(len(packs))]
        if self.mode == "cadence":
            return [(at, None, index) for at in self.fires for index in range(len(packs))]
        rows = self.recorded.get(partition.key, [])
        anyone: dict[int, int] = {}
        for _, at_us, upto in rows:
            anyone[at_us] = max(anyone.get(at_us, 0), upto)
        found: list[tuple[int, int, int]] = []
        for index, name in enumerate(packs):
            own = [(at_us, upto) for pack, at_us, upto in rows if pack == name]
            found += [(at_us, upto, index) for at_us, upto in (own or sorted(anyone.items()))]
        found.sort()
        return [(from_us(at_us), upto, index) for at_us, upto, index in found]

    def count(self) -> int:
        """How many distinct pass times the replay runs at (over every partition)."""
        if self.mode == "now":
            return 1
        if self.mode == "cadence":
            return len(self.fires)
        return len({at_us for rows in self.recorded.values() for _, at_us, _ in rows})

    def document(self) -> dict[str, Any]:
        return {"mode": self.mode, "cadence": self.cadence, "pass_times": self.count()}


def cadence_fires(cadence: str, start: datetime, end: datetime) -> tuple[datetime, ...]:
    """The fire times of ``cadence`` (a cron expression in UTC, or ``nightly``) after
    ``start`` and up to ``end``; too many is a :class:`ScheduleError`."""
    expression = NIGHTLY if cadence.strip().lower() == "nightly" else cadence
    try:
        parsed = Cadence(cron=expression)
    except ValueError as exc:
        raise ScheduleError(
            f"--cadence {cadence!r}: not a cron expression or 'nightly' ({exc})"
        ) from exc
    fires: list[datetime] = []
    at = next_fire(parsed, start, "replay")
    while at <= end:
        fires.append(at)
        if len(fires) > MAX_CADENCE_TIMES:
            raise ScheduleError(
                f"--cadence {cadence!r} fires more than {MAX_CADENCE_TIMES} times between "
                f"{start.isoformat()} and {end.isoformat()}: choose a coarser cadence or an "
                "earlier --now/--as-of"
            )
        at = next_fire(parsed, at, "replay")
    return tuple(fires)


Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)`` with phase ``copy`` or ``consolidate`` (episodes)."""

ChangeKind = Literal["appear", "disappear", "change"]
Key = tuple[str, str, str, str]
"""``(user, agent, subject, predicate)``."""


@dataclass(frozen=True)
class FactState:
    """One side of a difference: what the fact says and the rule that produced it."""

    object: str
    confidence: float
    rule_id: str
    fact_id: str


@dataclass(frozen=True)
class FactChange:
    """A fact that would appear, disappear, or change object / confidence."""

    change: ChangeKind
    user: str
    agent: str
    subject: str
    predicate: str
    before: FactState | None
    after: FactState | None

    @property
    def rule(self) -> str:
        """The rule that causes the difference: the replayed fact's, else the real one's."""
        side = self.after or self.before
        assert side is not None
        return side.rule_id

    def sort_key(self) -> tuple[str, ...]:
        side = self.after or self.before
        assert side is not None
        old = self.before.object if self.before else ""
        return (self.user, self.agent, self.subject, self.predicate, old, side.object)


@dataclass
class ReplayResult:
    """What a replay compared: inputs, counts, the differences (sorted) and timings."""

    db: Path | str
    """The database replayed: a SQLite file, or a server URL (without its password)."""
    packs: list[CompiledPack]
    now: datetime
    as_of: datetime | None
    user: str | None
    agent: str | None
    episodes: int
    partitions: int
    changes: list[FactChange]
    unchanged: int
    timings: dict[str, float] = field(default_factory=dict)
    times: ReplayTimes | None = None
    """When the passes ran (``None``: one pass at ``now``)."""
    quarantined: list[QuarantinedRow] = field(default_factory=list)
    """Episode rows of the selection that were skipped (not copied, or not decodable), in
    ``seq`` order; ``recorded`` is False: the real database is never written."""

    def counts(self) -> dict[str, int]:
        out = {"appear": 0, "disappear": 0, "change": 0}
        for c in self.changes:
            out[c.change] += 1
        return {**out, "unchanged": self.unchanged}

    def document(self) -> dict[str, Any]:
        """A stable JSON-ready document (no timings; ``before.fact_id`` is a real fact).

        ``quarantined`` (seq, episode_id, partition_key, reason) appears only when rows
        were skipped.
        """
        document = {
            "db": str(self.db),
            "packs": [
                {"pack": p.name, "version": p.pack.version, "sha256": p.sha256} for p in self.packs
            ],
            "now": self.now.isoformat(),
            "as_of": None if self.as_of is None else self.as_of.isoformat(),
            "user": self.user,
            "agent": self.agent,
            "episodes": self.episodes,
            "partitions": self.partitions,
            "times": (self.times or ReplayTimes("now", self.now)).document(),
            "summary": self.counts(),
            "changes": [_change_document(c) for c in self.changes],
        }
        if self.quarantined:
            document["quarantined"] = [
                {
                    "seq": q.seq,
                    "episode_id": q.episode_id,
                    "partition_key": q.partition_key,
                    "reason": q.reason,
                }
                for q in self.quarantined
            ]
        return document


def _side(state: FactState | None, *, with_id: bool) -> dict[str, Any] | None:
    if state is None:
        return None
    out: dict[str, Any] = {
        "object": state.object,
        "confidence": state.confidence,
        "rule": state.rule_id,
    }
    if with_id:
        out["fact_id"] = state.fact_id
    return out


def _change_document(change: FactChange) -> dict[str, Any]:
    return {
        "change": change.change,
        "user": change.user,
        "agent": change.agent,
        "subject": change.subject,
        "predicate": change.predicate,
        "rule": change.rule,
        "before": _side(change.before, with_id=True),
        "after": _side(change.after, with_id=False),
    }


# --- reading the real database --------------------------------------------------------


def readonly_uri(path: Path) -> str:
    """A URI that opens ``path`` without writing to it or creating files beside it.

    ``mode=ro`` on a WAL database with no ``-wal`` file would create ``-wal``/``-shm``
    and leave them behind; ``immutable=1`` reads the file alone. When a ``-wal`` exists
    (a writer has the database open), or a rollback ``-journal``, ``mode=ro`` reads
    through it.
    """
    uri = path.resolve().as_uri()
    live = any(path.with_name(path.name + s).exists() for s in ("-wal", "-journal"))
    return f"{uri}?mode=ro" if live else f"{uri}?immutable=1"


_REQUIRED: Final = (
    "id",
    "scope_key",
    "partition_key",
    "user",
    "session",
    "agent",
    "ts_us",
    "tz_offset_s",
    "content",
    "metadata",
    "access_count",
)
"""The episodes columns a stored row must have a value in (the scratch table's NOT NULL)."""
_AT: Final = {name: at for at, name in enumerate(STORED_COLUMNS.replace('"', "").split(", "))}


def _text_or_none(value: object) -> str | None:
    """A stored value as text, or ``None`` when it is not UTF-8 text."""
    return value if type(value) is str else None


def _missing(error: StoreError, table: str) -> bool:
    """Whether ``error`` is a read-only file's refusal because it lacks ``table``."""
    return table in error.context.get("missing", ())


async def _facts(source: SQLiteDatabase, pattern: FactPattern, as_of_us: int | None) -> list[Fact]:
    """Current facts matching ``pattern`` (or those current at ``as_of_us``); none when
    the file has no fact store."""
    try:
        if as_of_us is None:
            return await source.facts.query(pattern)
        return await source.facts.as_of(from_us(as_of_us), pattern)
    except StoreError as exc:
        if _missing(exc, "facts"):
            return []
        raise


async def _recorded(source: SQLiteDatabase, pattern: FactPattern, as_of_us: int | None) -> Recorded:
    """The selected partitions' recorded pass times (up to ``as_of_us``)."""
    found: Recorded = {}
    try:
        async for rows in source.source().rows(_PASS_TIMES, COPY_CHUNK):
            for pack, key, at_us, upto in rows:
                partition = partition_of(key)
                if partition is None or (as_of_us is not None and at_us > as_of_us):
                    continue
                if pattern.user is not None and partition.user != pattern.user:
                    continue
                if pattern.agent is not None and partition.agent != pattern.agent:
                    continue
                found.setdefault(str(key), []).append((str(pack), int(at_us), int(upto)))
    except sqlite3.OperationalError as exc:  # a file from before pass times were recorded
        if "no such table" not in str(exc):
            raise
        return {}
    for rows in found.values():
        rows.sort(key=lambda row: (row[1], row[0]))
    return found


_PASS_TIMES: Final = next(table for table in COPIED_TABLES if table.name == "pass_times")


def _left_out(row: Sequence[Any], reason: str, at: datetime) -> QuarantinedRow:
    partition = row[_AT["partition_key"]]
    return QuarantinedRow(
        int(row[0]), _text_or_none(row[_AT["id"]]), _text_or_none(partition), reason, at, False
    )


def _unusable(row: Sequence[Any]) -> str | None:
    """Why the scratch table cannot hold ``row`` (a required column is NULL)."""
    for column in _REQUIRED:
        if row[_AT[column]] is None:
            return f"{column}: expected a value, got NULL"
    return None


async def _copy_episodes(
    source: SQLiteDatabase,
    target: SQLiteDatabase,
    pattern: FactPattern,
    as_of_us: int | None,
    progress: Progress | None,
) -> tuple[int, list[QuarantinedRow], int | None]:
    """Copy the selected episodes through the two episode repositories; how many were
    copied, the rows left out and the first selected episode's timestamp."""
    user, agent = pattern.user, pattern.agent
    total, first_us = await source.memory.stored_span(user=user, agent=agent, until_us=as_of_us)
    if progress is not None:
        progress("copy", 0, total)
    at = utc_now()
    copied, after = 0, 0
    left_out: list[QuarantinedRow] = []
    while rows := await source.memory.stored_rows(
        after, COPY_CHUNK, user=user, agent=agent, until_us=as_of_us
    ):
        after = int(rows[-1][0])
        usable = []
        for row in rows:
            reason = _unusable(row)
            if reason is None:
                usable.append(row)
            else:
                left_out.append(_left_out(row, reason, at))
        refused = set(await target.memory.load_rows(usable))
        repeated = "id: the same id as an earlier row (not copied)"
        left_out += [_left_out(row, repeated, at) for row in usable if row[0] in refused]
        copied += len(usable) - len(refused)
        if progress is not None:
            progress("copy", copied, total)
    left_out.sort(key=lambda q: q.seq)
    return copied, left_out, first_us


async def _copy(
    real: Path,
    scratch: Path,
    pattern: FactPattern,
    as_of_us: int | None,
    progress: Progress | None,
) -> tuple[list[Fact], int, list[QuarantinedRow], Recorded, int | None]:
    """Copy the selected episodes into ``scratch``; return the real facts of the same
    snapshot, how many episodes were copied, the rows left out, the recorded pass times
    and the first selected episode's timestamp. The real file is opened read-only."""
    source = SQLiteDatabase(real, read_only=True)
    target = SQLiteDatabase(scratch)
    try:
        async with source.snapshot():
            try:
                await source.memory.bootstrap()  # read-only: checks its tables are there
            except StoreError as exc:
                if _missing(exc, "episodes"):
                    raise StoreError(
                        f"{real}: no episodes table (not a stargraph_mem database)"
                    ) from exc
                raise
            facts = await _facts(source, pattern, as_of_us)
            recorded = await _recorded(source, pattern, as_of_us)
            copied, left_out, first_us = await _copy_episodes(
                source, target, pattern, as_of_us, progress
            )
        return facts, copied, left_out, recorded, first_us
    finally:
        await target.close()
        await source.close()


async def _scratch_facts(path: Path) -> list[Fact]:
    async with SQLiteDatabase(path) as scratch:
        return await scratch.facts.query(FactPattern())


# --- diff -----------------------------------------------------------------------------


def _state(fact: Fact) -> FactState:
    return FactState(fact.object, fact.confidence, fact.rule_id, fact.id)


def _same_confidence(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def _group(facts: Sequence[Fact]) -> dict[Key, list[Fact]]:
    out: dict[Key, list[Fact]] = defaultdict(list)
    for fact in facts:
        out[(fact.user, fact.agent, fact.subject, fact.predicate)].append(fact)
    return out


def _diff_group(key: Key, real: list[Fact], new: list[Fact]) -> tuple[list[FactChange], int]:
    """Pair equal objects first, then the leftovers in object order; the rest appear/disappear."""
    changes: list[FactChange] = []
    unchanged = 0
    by_object: dict[str, list[Fact]] = defaultdict(list)
    for fact in sorted(real, key=lambda f: (f.object, f.confidence, f.id)):
        by_object[fact.object].append(fact)
    left: list[Fact] = []
    for fact in sorted(new, key=lambda f: (f.object, f.confidence, f.id)):
        olds = by_object.get(fact.object)
        if not olds:
            left.append(fact)
            continue
        old = olds.pop(0)
        if _same_confidence(old.confidence, fact.confidence):
            unchanged += 1
        else:
            changes.append(FactChange("change", *key, _state(old), _state(fact)))
    gone = [f for olds in by_object.values() for f in olds]
    for i in range(max(len(left), len(gone))):
        before = _state(gone[i]) if i < len(gone) else None
        after = _state(left[i]) if i < len(left) else None
        kind: ChangeKind = "change" if before and after else "appear" if after else "disappear"
        changes.append(FactChange(kind, *key, before, after))
    return changes, unchanged


def diff_facts(real: Sequence[Fact], new: Sequence[Fact]) -> tuple[list[FactChange], int]:
    """Differences from ``real`` to ``new`` (sorted) and how many facts are unchanged."""
    old_groups, new_groups = _group(real), _group(new)
    changes: list[FactChange] = []
    unchanged = 0
    for key in sorted(set(old_groups) | set(new_groups)):
        found, same = _diff_group(key, old_groups.get(key, []), new_groups.get(key, []))
        changes += found
        unchanged += same
    changes.sort(key=FactChange.sort_key)
    return changes, unchanged


# --- replay ---------------------------------------------------------------------------


async def _consolidate(
    path: Path,
    packs: Sequence[CompiledPack],
    times: ReplayTimes,
    max_episodes: int,
    total: int,
    progress: Progress | None,
) -> tuple[int, list[QuarantinedRow]]:
    """Consolidate every partition of the scratch copy at the pass times of ``times`` (the
    packs of one pass time in turn, as ``Consolidator.consolidate`` does); return how many
    partitions there are and the rows the scratch store quarantined."""
    async with Consolidator(path, packs, max_episodes=max_episodes) as mem:
        runs = [
            PassRunner(
                runtime_for(p),
                mem.memory,
                mem.fact_store,
                max_episodes=max_episodes,
                keep_deltas=False,
                worker="never",
                embedder=mem.embedder,
            )
            for p in packs
        ]
        names = [p.name for p in packs]
        partitions = await mem.memory.partitions()
        done = 0
        if progress is not None:
            progress("consolidate", 0, total)
        passes = len(runs)

        def on_pass(report: PassReport) -> None:
            # every pack reads the partition's episodes once: count them once per pack set
            nonlocal done
            done += report.episodes
            if progress is not None:
                progress("consolidate", min(done // passes, total), total)

        for partition in partitions:
            for when, upto, index in times.events(partition, names):
                runs[index].horizon = upto
                await runs[index].run(partition, now=when, on_pass=on_pass)
        quarantined = await mem.memory.quarantined()
    return len(partitions), [replace(q, recorded=False) for q in quarantined]


async def _bootstrap(path: Path, packs: Sequence[CompiledPack]) -> None:
    async with Consolidator(path, packs):
        pass


async def replay(
    db: str | Path,
    packs: Sequence[CompiledPack],
    *,
    now: datetime | None = None,
    as_of: datetime | None = None,
    user: str | None = None,
    agent: str | None = None,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    scratch: str | Path | None = None,
    progress: Progress | None = None,
    cadence: str | None = None,
) -> ReplayResult:
    """Rebuild facts from ``db``'s episodes under ``packs`` in a scratch database; diff them.

    ``as_of`` replays only episodes with ``timestamp <= as_of`` and compares with the facts
    current at ``as_of``. When the passes run (see :class:`ReplayTimes` and the module):
    without ``now`` and ``cadence``, at the pass times the real database recorded (up to
    ``as_of``), or, when it recorded none, in one pass at ``as_of`` (else the wall clock);
    with ``now`` only, in one pass at ``now``; with ``cadence`` (a cron expression in UTC,
    or ``nightly``), at its fire times after the first episode and up to ``now`` (default:
    ``as_of``, else the wall clock).
    ``scratch`` keeps the rebuilt database at that path (which must not exist); otherwise
    it lives in a temporary directory that is removed afterwards.
    """
    location = parse_database_url(db)
    real = location.path if location.path is not None else Path()
    if location.path is not None and not real.is_file():
        raise StoreError(f"{real}: database file does not exist")
    when = to_utc(now or as_of or utc_now())
    if cadence is not None and not cadence.strip():
        raise ScheduleError("--cadence: empty (give a cron expression or 'nightly')")
    as_of_us = None if as_of is None else to_us(as_of, "as_of time")
    if scratch is not None and Path(scratch).exists():
        raise StoreError(f"{scratch}: scratch database already exists")
    with tempfile.TemporaryDirectory(prefix="stargraph-replay-") as tmp:
        if location.path is None:  # a server: read through a copy (the server is only read)
            real = Path(tmp) / "source.db"
            await copy_database(location.url, real)
        path = Path(scratch) if scratch is not None else Path(tmp) / "replay.db"
        clock = asyncio.get_running_loop().time
        t0 = clock()
        await _bootstrap(path, packs)
        pattern = FactPattern(user=user, agent=agent)
        real_facts, copied, left_out, recorded, first_us = await _copy(
            real, path, pattern, as_of_us, progress
        )
        if cadence is not None:
            start = when if first_us is None else from_us(first_us - 1)
            fires = cadence_fires(cadence, start, when)
            times = ReplayTimes("cadence", when, cadence=cadence, fires=fires)
        elif now is None and recorded:
            times = ReplayTimes("recorded", when, recorded)
        else:
            times = ReplayTimes("now", when)
        t1 = clock()
        partitions, unreadable = await _consolidate(
            path, packs, times, max_episodes, copied, progress
        )
        t2 = clock()
        new_facts = await _scratch_facts(path)
        changes, unchanged = diff_facts(real_facts, new_facts)
        t3 = clock()
    return ReplayResult(
        db=location.path if location.path is not None else str(location),
        packs=list(packs),
        now=when,
        as_of=as_of,
        user=user,
        agent=agent,
        episodes=copied,
        partitions=partitions,
        changes=changes,
        unchanged=unchanged,
        timings={"copy": t1 - t0, "consolidate": t2 - t1, "diff": t3 - t2, "total": t3 - t0},
        times=times,
        quarantined=sorted([*left_out, *unreadable], key=lambda q: q.seq),
    )
