"""Pass times in the fact store: episodes a pass left for a later pass, and when passes ran.

A pass at time T consumes only the episodes stamped at or before T. The others it reads
(stamped after T) are *deferred*: one ``deferred_episodes`` row per (pack, watermark key,
partition, seq), written in the transaction that moves the watermarks past them, so the
partition is never blocked by an episode from the future. A later pass whose time reaches
such an episode takes it up again (*resumes* it) and deletes its row in its own apply
transaction; the apply first checks that every row it resumes is still there, so a
deferred episode is consumed exactly once even when runs race.

Every applied pass also records its time in ``pass_times`` (one row per pack, partition
and pass time, with the highest episode seq it had read), so a replay can run its passes
at the same times over the same episodes.

Both backends use the shared code here, its SQL written once and rendered by the
backend's :class:`~stargraph_mem.stores.dialect.Dialect` (:func:`statements_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final, NamedTuple, Protocol

from stargraph_mem.errors import StalePassError
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "POSTGRES_TABLES",
    "SQLITE_TABLES",
    "Deferral",
    "PassTime",
    "PassTimeStatements",
    "deferred_of",
    "resumed_present",
    "statements_for",
    "write_pass_time",
]


class Deferral(NamedTuple):
    """An episode a pass read but left for a later pass (stamped after the pass time)."""

    rule_id: str
    """The watermark key the episode was left under (a rule id, or a shared stamp id)."""
    seq: int
    episode_id: str
    ts_us: int
    """The episode's timestamp (UTC µs): the first pass time that consumes it."""


@dataclass(frozen=True, slots=True)
class PassTime:
    """What a pass writes about time with its apply: when it ran, how far it read, the
    episodes it leaves for later and the deferred ones it consumes."""

    now_us: int
    """The pass time (UTC µs)."""
    upto_seq: int
    """The highest episode seq the pass read (its watermark after the pass)."""
    deferred: tuple[Deferral, ...] = ()
    """Episodes read now but stamped after ``now_us``: recorded, consumed later."""
    resumed: tuple[Deferral, ...] = ()
    """Stored deferrals now due that the pass consumes (each must still be stored)."""


_SQLITE_DEFERRED: Final = """CREATE TABLE IF NOT EXISTS deferred_episodes (
        pack TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        episode_id TEXT NOT NULL,
        ts_us INTEGER NOT NULL,
        PRIMARY KEY (pack, partition_key, rule_id, seq)
    )"""
_SQLITE_PASS_TIMES: Final = """CREATE TABLE IF NOT EXISTS pass_times (
        pack TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        now_us INTEGER NOT NULL,
        upto_seq INTEGER NOT NULL,
        PRIMARY KEY (pack, partition_key, now_us)
    )"""
SQLITE_TABLES: Final = (_SQLITE_DEFERRED, _SQLITE_PASS_TIMES)
"""The SQLite tables (fact store schema version 4)."""
_K: Final = 'TEXT COLLATE "C"'
POSTGRES_TABLES: Final = (
    f"""CREATE TABLE deferred_episodes (
        pack {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        seq BIGINT NOT NULL,
        episode_id {_K} NOT NULL,
        ts_us BIGINT NOT NULL,
        PRIMARY KEY (pack, partition_key, rule_id, seq)
    )""",
    f"""CREATE TABLE pass_times (
        pack {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        now_us BIGINT NOT NULL,
        upto_seq BIGINT NOT NULL,
        PRIMARY KEY (pack, partition_key, now_us)
    )""",
)
"""The PostgreSQL tables (migration 2)."""


@dataclass(frozen=True, slots=True)
class PassTimeStatements:
    """One backend's SQL for the two tables."""

    deferred_of: str
    """``partition_key, rule_id, seq, episode_id, ts_us`` of a pack's deferrals in the
    given partitions (``(pack, keys)``)."""
    count_of: str
    """How many of the given ``'rule_id seq'`` deferrals of (pack, partition) are stored."""
    insert: str
    delete: str
    record: str
    """Record a pass time (``pack, partition_key, now_us, upto_seq``), keeping the highest
    ``upto_seq`` when the same pack ran over the same partition at the same time again."""


_COLUMNS: Final = "partition_key, rule_id, seq, episode_id, ts_us"


class Marked(Protocol):
    """What names a backend's SQL: the fact store's statements, by their dialect."""

    @property
    def dialect(self) -> Dialect: ...


@cache
def _rendered(dialect: Dialect) -> PassTimeStatements:
    """The statements, written once in the qmark style, as ``dialect`` takes them."""
    sql = dialect.sql
    return PassTimeStatements(
        deferred_of=sql(
            f"SELECT {_COLUMNS} FROM deferred_episodes WHERE pack = ? "
            f"AND partition_key {dialect.in_ids()} ORDER BY partition_key, seq, rule_id"
        ),
        count_of=sql(
            "SELECT count(*) FROM deferred_episodes WHERE pack = ? AND partition_key = ? "
            f"AND rule_id || ' ' || CAST(seq AS TEXT) {dialect.in_ids()}"
        ),
        insert=sql(
            "INSERT INTO deferred_episodes (pack, partition_key, rule_id, seq, episode_id, "
            "ts_us) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
        ),
        delete=sql(
            "DELETE FROM deferred_episodes WHERE pack = ? AND partition_key = ? "
            "AND rule_id = ? AND seq = ?"
        ),
        record=sql(
            "INSERT INTO pass_times (pack, partition_key, now_us, upto_seq) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (pack, partition_key, now_us) DO UPDATE SET "
            f"upto_seq = {dialect.greatest}(pass_times.upto_seq, excluded.upto_seq)"
        ),
    )


def statements_for(sql: Marked) -> PassTimeStatements:
    """The pass-time statements of the backend whose SQL ``sql`` names."""
    return _rendered(sql.dialect)


async def deferred_of(
    db: Conn, sql: Marked, pack: str, partitions: Sequence[Partition]
) -> list[list[Deferral]]:
    """Each partition's stored deferrals under ``pack`` (in ``seq`` order), in one read."""
    keys = [p.key for p in partitions]
    found: dict[str, list[Deferral]] = {key: [] for key in keys}
    rows = await db.fetch(statements_for(sql).deferred_of, (pack, sql.dialect.ids(keys)))
    for key, rule_id, seq, episode_id, ts_us in rows:
        found[str(key)].append(Deferral(str(rule_id), int(seq), str(episode_id), int(ts_us)))
    return [found[key] for key in keys]


async def resumed_present(
    db: Conn, sql: Marked, pack: str, partition: Partition, time: PassTime | None
) -> bool:
    """Whether every deferral ``time`` resumes is still stored (no other pass took it)."""
    if time is None or not time.resumed:
        return True
    wanted = sorted({f"{d.rule_id} {d.seq}" for d in time.resumed})
    params = (pack, partition.key, sql.dialect.ids(wanted))
    count = await db.scalar(statements_for(sql).count_of, params)
    return int(count or 0) == len(wanted)


async def write_pass_time(
    db: Conn, sql: Marked, pack: str, partition: Partition, time: PassTime | None
) -> None:
    """Inside the apply transaction: drop the resumed deferrals, store the new ones and
    record the pass time (call :func:`resumed_present` first)."""
    await write_pass_times(db, sql, [(pack, partition, time)])


async def write_pass_times(
    db: Conn, sql: Marked, passes: Sequence[tuple[str, Partition, PassTime | None]]
) -> None:
    """:func:`write_pass_time` for many passes (of distinct partitions) in one transaction:
    their new deferrals and pass times each in one statement for all of them."""
    statements = statements_for(sql)
    inserts: list[tuple[str, str, str, int, str, int]] = []
    records: list[tuple[str, str, int, int]] = []
    for pack, partition, time in passes:
        if time is None:
            continue
        key = partition.key
        if time.resumed:
            rows = sorted({(pack, key, d.rule_id, d.seq) for d in time.resumed})
            if await db.executemany(statements.delete, rows) != len(rows):  # taken meanwhile
                raise StalePassError(
                    f"pack '{pack}' at {key}: another pass consumed deferred episodes this "
                    "pass read",
                    pack=pack,
                    partition=key,
                )
        inserts += [(pack, key, d.rule_id, d.seq, d.episode_id, d.ts_us) for d in time.deferred]
        records.append((pack, key, time.now_us, time.upto_seq))
    if inserts:
        await db.executemany(statements.insert, inserts)
    if len(records) == 1:
        await db.execute(statements.record, records[0])
    elif records:
        await db.executemany(statements.record, records)
