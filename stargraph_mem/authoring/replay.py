"""Replay: rebuild the semantic store from the episode log under other packs, and diff.

The real database is only ever read, through a read-only SQLite URI (``immutable=1``
when no ``-wal`` file exists, so not even side files appear; ``mode=ro`` when a writer
has one open); a PostgreSQL memory is first copied whole into a temporary SQLite file
(:func:`~stargraph_mem.stores.copy.copy_database`, which only reads the server). Its
episodes are copied, in one read transaction together with its
current facts, into a scratch database; the engine consolidates the scratch copy with
the given packs; the scratch facts are then compared with the real ones, keyed by
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
from typing import Any, Literal

from stargraph_mem.compiler.cadence import next_fire
from stargraph_mem.compiler.pack import CompiledPack
from stargraph_mem.engine.api import Consolidator, runtime_for
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES
from stargraph_mem.engine.report import PassReport
from stargraph_mem.engine.runner import PassRunner
from stargraph_mem.errors import ScheduleError, StoreError
from stargraph_mem.model.cadence import Cadence
from stargraph_mem.model.facts import Fact, FactPattern
from stargraph_mem.model.time import from_us, to_us, to_utc, utc_now
from stargraph_mem.stores.copy import copy_database
from stargraph_mem.stores.database import parse_database_url
from stargraph_mem.stores.episode_rows import partition_of
from stargraph_mem.stores.memory import QuarantinedRow
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import fact_from_row, fact_query
from stargraph_mem.stores.sqlite_identity import identify
from stargraph_mem.stores.sqlite_memory import scope_filter

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


def _episode_filter(
    user: str | None, agent: str | None, as_of_us: int | None
) -> tuple[str, tuple[Any, ...]]:
    where: list[str] = []
    params: list[Any] = []
    if user is not None:
        sql, values = scope_filter(user, None, agent)
        where.append(sql)
        params += values
    elif agent is not None:
        where.append("agent = ?")
        params.append(agent)
    if as_of_us is not None:
        where.append("ts_us <= ?")
        params.append(as_of_us)
    return " AND ".join(where) or "1", tuple(params)


def _facts(db: sqlite3.Connection, pattern: FactPattern, as_of_us: int | None = None) -> list[Fact]:
    """Current facts matching ``pattern`` (or those current at ``as_of_us``)."""
    sql, params = fact_query(pattern, as_of_us=as_of_us)
    return [fact_from_row(row) for row in db.execute(sql, params)]


def _tables(db: sqlite3.Connection, schema: str) -> set[str]:
    rows = db.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")
    return {str(row[0]) for row in rows}


def _columns(db: sqlite3.Connection, schema: str) -> list[str]:
    return [str(row[1]) for row in db.execute(f"PRAGMA {schema}.table_info(episodes)")]


def _required(db: sqlite3.Connection, schema: str) -> list[str]:
    """The episodes columns ``schema`` declares NOT NULL (besides the ``seq`` key)."""
    rows = db.execute(f"PRAGMA {schema}.table_info(episodes)")
    return [str(row[1]) for row in rows if row[3] and not row[5]]


def _text_or_none(value: object) -> str | None:
    """A value read ``CAST(... AS BLOB)`` as text, or ``None`` when it is not UTF-8 text."""
    if not isinstance(value, bytes):
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _left_out(
    db: sqlite3.Connection, where: str, params: tuple[Any, ...], required: list[str]
) -> list[QuarantinedRow]:
    """The selected rows the copy skipped (a required column NULL, or a repeated id)."""
    nulls = "".join(f", {column} IS NULL" for column in required)
    rows = db.execute(
        "SELECT seq, CAST(id AS BLOB), CAST(partition_key AS BLOB)"
        f"{nulls} FROM main.episodes WHERE {where} "
        "AND seq NOT IN (SELECT seq FROM scratch.episodes) ORDER BY seq",
        params,
    )
    at = utc_now()
    out: list[QuarantinedRow] = []
    for row in rows:
        null = [column for column, flag in zip(required, row[3:], strict=True) if flag]
        reason = (
            f"{null[0]}: expected a value, got NULL"
            if null
            else "id: the same id as an earlier row (not copied)"
        )
        entry = QuarantinedRow(
            int(row[0]), _text_or_none(row[1]), _text_or_none(row[2]), reason, at, False
        )
        out.append(entry)
    return out


def _recorded(
    db: sqlite3.Connection, pattern: FactPattern, as_of_us: int | None
) -> tuple[Recorded, int | None]:
    """The selected partitions' recorded pass times (up to ``as_of_us``) and the first
    selected episode's timestamp (µs; None without episodes)."""
    where, params = _episode_filter(pattern.user, pattern.agent, as_of_us)
    first = db.execute(f"SELECT min(ts_us) FROM main.episodes WHERE {where}", params).fetchone()
    found: Recorded = {}
    if "pass_times" not in _tables(db, "main"):
        return found, first[0]
    rows = db.execute(
        "SELECT pack, partition_key, now_us, upto_seq FROM main.pass_times "
        "ORDER BY partition_key, now_us, pack"
    )
    for pack, key, at_us, upto in rows:
        partition = partition_of(key)
        if partition is None or (as_of_us is not None and at_us > as_of_us):
            continue
        if pattern.user is not None and partition.user != pattern.user:
            continue
        if pattern.agent is not None and partition.agent != pattern.agent:
            continue
        found.setdefault(str(key), []).append((str(pack), int(at_us), int(upto)))
    return found, first[0]


def _copy(
    real: Path,
    scratch: Path,
    pattern: FactPattern,
    as_of_us: int | None,
    progress: Progress | None,
) -> tuple[list[Fact], int, list[QuarantinedRow], Recorded, int | None]:
    """Copy the selected episodes into ``scratch``; return the real facts of the same
    snapshot, how many episodes were copied, the rows left out, the recorded pass times
    and the first selected episode's timestamp."""
    db = sqlite3.connect(readonly_uri(real), uri=True, isolation_level=None)
    try:
        identify(db, real)  # another program's file, or a newer one, is refused here
        db.execute("ATTACH DATABASE ? AS scratch", (str(scratch),))
        db.execute("PRAGMA scratch.synchronous=OFF")
        tables = _tables(db, "main")
        if "episodes" not in tables:
            raise StoreError(f"{real}: no episodes table (not a stargraph_mem database)")
        db.execute("BEGIN")
        facts = _facts(db, pattern, as_of_us) if "facts" in tables else []
        recorded, first_us = _recorded(db, pattern, as_of_us)
        wanted = set(_columns(db, "main"))
        cols = ", ".join(c for c in _columns(db, "scratch") if c in wanted)
        where, params = _episode_filter(pattern.user, pattern.agent, as_of_us)
        low, high, total = db.execute(
            f"SELECT min(seq), max(seq), count(*) FROM main.episodes WHERE {where}", params
        ).fetchone()
        copied = 0
        if progress is not None:
            progress("copy", 0, total)
        start = (low or 1) - 1
        while total and start < high:
            end = start + COPY_CHUNK
            # OR IGNORE: a row the scratch schema refuses is left out (and listed below)
            cursor = db.execute(
                f"INSERT OR IGNORE INTO scratch.episodes ({cols}) SELECT {cols} "
                f"FROM main.episodes WHERE seq > ? AND seq <= ? AND {where} ORDER BY seq",
                (start, end, *params),
            )
            copied += cursor.rowcount
            start = end
            if progress is not None:
                progress("copy", copied, total)
        left_out: list[QuarantinedRow] = []
        if copied < total:
            required = [c for c in _required(db, "scratch") if c in wanted]
            left_out = _left_out(db, where, params, required)
        db.execute("COMMIT")
        return facts, copied, left_out, recorded, first_us
    finally:
        db.close()


def _scratch_facts(path: Path) -> list[Fact]:
    db = sqlite3.connect(path)
    try:
        return _facts(db, FactPattern())
    finally:
        db.close()


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
        real_facts, copied, left_out, recorded, first_us = await asyncio.to_thread(
            _copy, real, path, pattern, as_of_us, progress
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
        new_facts = await asyncio.to_thread(_scratch_facts, path)
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
