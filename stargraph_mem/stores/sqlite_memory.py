"""Episodic memory over SQLite (aiosqlite): scoped writes, widening reads, incremental reads.

One ``episodes`` table ordered by an insertion ``seq``; scope keys come from
:mod:`stargraph_mem.stores.scope`, so every read is an index lookup or range scan, never
``LIKE``. Writes take ``BEGIN IMMEDIATE`` so several processes can share one file (WAL).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import lru_cache
from typing import Any, Final
from urllib.parse import unquote

import aiosqlite
import orjson

from stargraph_mem.errors import (
    ConsolidationRuleError,
    CorruptRowError,
    DuplicateEpisodeError,
    MemoryScopeError,
    MigrationNotSupported,
    StoreError,
)
from stargraph_mem.stores.memory import EpisodeRecord, consolidation_hook
from stargraph_mem.stores.models import (
    ConsolidationRule,
    Episode,
    MemoryDelta,
    MigrationOp,
    MigrationPlan,
    canonical_json,
)
from stargraph_mem.stores.scope import (
    Partition,
    escape_component,
    partition_key,
    prefix_upper_bound,
    scope_key,
    user_prefix,
)
from stargraph_mem.stores.sqlite_base import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS  # re-export
from stargraph_mem.stores.sqlite_base import (
    EPOCH,
    ONE_US,
    SQLiteStoreBase,
    fetch,
    from_us,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite_base import to_us as to_us  # re-export

__all__ = ["BASELINE_MIGRATION", "SCHEMA_VERSION", "SQLiteMemoryStore"]

SCHEMA_VERSION: Final = 1
"""Version of the schema :meth:`SQLiteMemoryStore.bootstrap` creates; migrations bump it."""
BASELINE_MIGRATION: Final = "0001_episodes"
TABLE: Final = "episodes"

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS episodes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT UNIQUE NOT NULL,
        scope_key TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        user TEXT NOT NULL,
        session TEXT NOT NULL,
        agent TEXT NOT NULL,
        ts_us INTEGER NOT NULL,
        tz_offset_s INTEGER NOT NULL,
        content TEXT NOT NULL,
        source_node TEXT,
        metadata BLOB NOT NULL,
        last_accessed_us INTEGER NULL,
        access_count INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS episodes_scope_ts ON episodes (scope_key, ts_us, seq)",
    "CREATE INDEX IF NOT EXISTS episodes_partition_seq ON episodes (partition_key, seq)",
    "CREATE INDEX IF NOT EXISTS episodes_partition_ts ON episodes (partition_key, ts_us, seq)",
    """CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT UNIQUE NOT NULL,
        applied_at_us INTEGER NOT NULL,
        plan BLOB NOT NULL
    )""",
)
_BASELINE_SQL: Final = (
    "INSERT OR IGNORE INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES (?, ?, ?, ?)"
)

_WRITE_COLUMNS: Final = (
    "id, scope_key, partition_key, user, session, agent, ts_us, tz_offset_s, content, "
    "source_node, metadata"
)
_PROGRESS_STEP: Final = 10_000
"""Rows per ``executemany`` in ``put_many`` (one transaction; progress is told per step)."""
_INSERT_SQL: Final = (
    f"INSERT INTO episodes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
_STORED_SQL: Final = (
    f"SELECT {_WRITE_COLUMNS} FROM episodes WHERE id IN (SELECT value FROM json_each(?))"
)
_READ_COLUMNS: Final = (
    "seq, id, content, ts_us, tz_offset_s, source_node, user, session, agent, metadata, "
    "last_accessed_us, access_count"
)
_SINCE_SQL: Final = (
    f"SELECT {_READ_COLUMNS} FROM episodes WHERE partition_key = ? AND seq > ? ORDER BY seq LIMIT ?"
)
_BY_IDS_SQL: Final = (
    f"SELECT {_READ_COLUMNS} FROM episodes WHERE id IN (SELECT value FROM json_each(?)) "
    "ORDER BY seq"
)
_TOUCH_SQL: Final = (
    "UPDATE episodes SET last_accessed_us = ?, access_count = access_count + 1 WHERE seq = ?"
)
_PARTITIONS_SQL: Final = """
    WITH RECURSIVE keys(k) AS (
        SELECT min(partition_key) FROM episodes
        UNION ALL
        SELECT (SELECT min(partition_key) FROM episodes WHERE partition_key > keys.k)
        FROM keys WHERE keys.k IS NOT NULL
    )
    SELECT k FROM keys WHERE k IS NOT NULL"""

_ROW_FIELDS: Final = (
    "id",
    "scope_key",
    "partition_key",
    "user",
    "session",
    "agent",
    "timestamp",
    "timestamp offset",
    "content",
    "source_node",
    "metadata",
)
_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_COLUMN_TYPES: Final = frozenset({"TEXT", "INTEGER", "REAL", "BLOB", "NUMERIC"})
_ONE_S: Final = timedelta(seconds=1)

Row = tuple[str, str, str, str, str, str, int, int, str, str | None, bytes]
"""One ``episodes`` row in ``_WRITE_COLUMNS`` order, precomputed in Python for executemany."""


# --- conversions ----------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _keys(user: str, session: str, agent: str) -> tuple[str, str]:
    """Scope and partition keys for one scope (cached: batches repeat a few scopes)."""
    return scope_key(user, session, agent), partition_key(user, agent)


def episode_row(episode: Episode) -> Row:
    """The row ``episode`` is stored as; raises on naive timestamps or unstorable metadata."""
    ts = episode.timestamp
    offset = ts.utcoffset()
    if offset is None:
        raise ValueError(f"episode {episode.id!r}: timestamp is a naive datetime")
    scope, partition = _keys(episode.user, episode.session, episode.agent)
    try:
        metadata = orjson.dumps(episode.metadata)
    except orjson.JSONEncodeError as exc:
        raise StoreError(
            f"episode {episode.id!r}: metadata cannot be stored: {exc}", episode_id=episode.id
        ) from exc
    return (
        episode.id,
        scope,
        partition,
        episode.user,
        episode.session,
        episode.agent,
        (ts - EPOCH) // ONE_US,
        offset // _ONE_S,
        episode.content,
        episode.source_node,
        metadata,
    )


def _canonical_metadata(raw: bytes) -> bytes:
    """Key-order-independent bytes for comparing metadata (undecodable bytes compare as-is)."""
    try:
        return orjson.dumps(orjson.loads(raw), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        return bytes(raw)


def row_differences(old: Sequence[Any], new: Row) -> list[str]:
    """Names of the fields in which two rows for the same id differ (metadata key order aside)."""
    fields = [
        name
        for name, a, b in zip(_ROW_FIELDS[:-1], old, new, strict=False)
        if a != b and not name.endswith("_key")
    ]
    if old[-1] != new[-1] and _canonical_metadata(old[-1]) != _canonical_metadata(new[-1]):
        fields.append("metadata")
    return fields


def _duplicate(episode_id: str, fields: list[str], where: str) -> DuplicateEpisodeError:
    """The error for an id reused with different fields, naming the id and the fields."""
    return DuplicateEpisodeError(
        f"episode id {episode_id!r} {where} with different {', '.join(fields)}",
        episode_id=episode_id,
        fields=fields,
    )


def dedupe_batch(rows: list[Row]) -> list[Row]:
    """Collapse identical repeats of one id inside a batch; a differing repeat raises."""
    unique = {row[0]: row for row in rows}
    if len(unique) == len(rows):
        return rows
    first: dict[str, Row] = {}
    for row in rows:
        prior = first.setdefault(row[0], row)
        fields = row_differences(prior, row)
        if fields:
            raise _duplicate(row[0], fields, "appears twice in the batch")
    return list(first.values())


def _corrupt(seq: object, exc: Exception) -> CorruptRowError:
    """The error for an undecodable row, naming the table and the row's seq."""
    return CorruptRowError(f"{TABLE} row seq={seq} is corrupt: {exc}", table=TABLE, seq=seq)


def _metadata(raw: bytes) -> dict[str, Any]:
    """Decode a stored metadata blob, which must be a JSON object."""
    value = orjson.loads(raw)
    if type(value) is not dict:
        raise ValueError(f"metadata is {type(value).__name__}, expected an object")
    return value


def row_record(row: Sequence[Any]) -> EpisodeRecord:
    """Build an :class:`EpisodeRecord` from a ``_READ_COLUMNS`` row without pydantic."""
    try:
        accessed = row[10]
        return EpisodeRecord(
            row[0],
            row[1],
            row[2],
            from_us(row[3], row[4]),
            row[5],
            row[6],
            row[7],
            row[8],
            _metadata(row[9]),
            None if accessed is None else from_us(accessed),
            row[11],
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise _corrupt(row[0], exc) from exc


def row_episode(row: Sequence[Any]) -> Episode:
    """Build a validated :class:`Episode` from a ``_READ_COLUMNS`` row."""
    try:
        return Episode(
            id=row[1],
            content=row[2],
            timestamp=from_us(row[3], row[4]),
            source_node=row[5],
            user=row[6],
            session=row[7],
            agent=row[8],
            metadata=_metadata(row[9]),
        )
    except (ValueError, TypeError, OverflowError) as exc:  # ValidationError is a ValueError
        raise _corrupt(row[0], exc) from exc


def scope_filter(user: str, session: str | None, agent: str | None) -> tuple[str, tuple[str, ...]]:
    """SQL condition and parameters for one widening read (equality or half-open range)."""
    if session is not None and agent is not None:
        return "scope_key = ?", (scope_key(user, session, agent),)
    if agent is not None:
        return "partition_key = ?", (partition_key(user, agent),)
    prefix = user_prefix(user)
    if session is not None:
        prefix += f"session/{escape_component(session, 'session')}/"
    return "scope_key >= ? AND scope_key < ?", (prefix, prefix_upper_bound(prefix))


def recent_query(
    user: str, session: str | None, agent: str | None, limit: int
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and parameters ``recent()`` runs (public so tests can EXPLAIN the real query)."""
    _check_limit(limit)
    where, params = scope_filter(user, session, agent)
    sql = (
        f"SELECT {_READ_COLUMNS} FROM episodes WHERE {where} ORDER BY ts_us DESC, seq DESC LIMIT ?"
    )
    return sql, (*params, limit)


def _check_scope(episode: Episode, user: str, session: str, agent: str) -> None:
    """The scope passed to ``put`` must be the episode's own; name the part that differs."""
    for part, given, own in (
        ("user", user, episode.user),
        ("session", session, episode.session),
        ("agent", agent, episode.agent),
    ):
        escape_component(given, part)
        if given != own:
            raise MemoryScopeError(
                f"scope mismatch on {part}: put() got {given!r} but episode "
                f"{episode.id!r} has {own!r}",
                part=part,
                episode_id=episode.id,
            )


def _check_limit(limit: int | None, *, optional: bool = False) -> None:
    """A limit is an int >= 1 (``None`` allowed where ``optional``: no limit)."""
    if limit is None and optional:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1 (got {limit!r})")


def parse_partition_key(key: str) -> Partition:
    """Inverse of :func:`~stargraph_mem.stores.scope.partition_key` (components are quoted)."""
    _, _, user, _, agent, _ = key.split("/")
    return Partition(unquote(user, errors="strict"), unquote(agent, errors="strict"))


# --- migrations -----------------------------------------------------------------------


def _check_operation(index: int, op: MigrationOp) -> None:
    """Only nullable ``add_column`` with safe names and a plain column type is supported."""
    where = f"operations[{index}]"
    if op.op != "add_column":
        raise MigrationNotSupported(f"{where}: operation {op.op!r} is not supported", op=op.op)
    if not op.nullable:
        raise MigrationNotSupported(f"{where}: only nullable columns can be added", op=op.op)
    for what, name in (("table", op.table), ("column", op.column)):
        if not _IDENTIFIER.match(name) or name.lower().startswith("sqlite_"):
            raise MigrationNotSupported(f"{where}: invalid {what} name {name!r}", op=op.op)
    if op.type.upper() not in _COLUMN_TYPES:
        allowed = ", ".join(sorted(_COLUMN_TYPES))
        raise MigrationNotSupported(
            f"{where}: column type {op.type!r} is not one of {allowed}", op=op.op
        )


async def _columns(db: aiosqlite.Connection, table: str) -> set[str] | None:
    """Column names of ``table`` (lower-cased), or ``None`` when the table does not exist."""
    rows = await fetch(
        db,
        "SELECT name FROM pragma_table_info(?) WHERE ? IN "
        "(SELECT name FROM sqlite_master WHERE type = 'table')",
        (table, table),
    )
    names = {str(row[0]).lower() for row in rows}
    return names or None


async def _check_targets(db: aiosqlite.Connection, plan: MigrationPlan) -> None:
    """Every target table exists and no column is added twice or already present."""
    added: set[tuple[str, str]] = set()
    for index, op in enumerate(plan.operations):
        columns = await _columns(db, op.table)
        if columns is None:
            raise MigrationNotSupported(
                f"operations[{index}]: table {op.table!r} does not exist", op=op.op
            )
        key = (op.table.lower(), op.column.lower())
        if key[1] in columns or key in added:
            raise MigrationNotSupported(
                f"operations[{index}]: column {op.table}.{op.column} already exists", op=op.op
            )
        added.add(key)


# --- the store ------------------------------------------------------------------------


class SQLiteMemoryStore(SQLiteStoreBase):
    """The episodic :class:`~stargraph_mem.stores.memory.MemoryStore` over one SQLite file.

    Use ``async with SQLiteMemoryStore(path=...) as store``; any first call also opens and
    bootstraps. ``clock`` (tz-aware) stamps accesses and migrations, so tests can pin it.
    """

    _tables = (TABLE, "schema_migrations")

    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        """Create the schema and record the baseline migration (IF NOT EXISTS: idempotent)."""
        baseline = (SCHEMA_VERSION, BASELINE_MIGRATION, self._now_us(), b'{"baseline":true}')
        async with transaction(db):
            for statement in _SCHEMA:
                await db.execute(statement)
            await db.execute(_BASELINE_SQL, baseline)

    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        count = await scalar(db, "SELECT count(*) FROM episodes")
        version = await scalar(db, "SELECT max(version) FROM schema_migrations")
        return {"schema_version": version, "episode_count": count}

    # --- lifecycle ----------------------------------------------------------------------

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations in one transaction and record the plan.

        Re-applying a recorded plan is a no-op; anything else raises
        :class:`MigrationNotSupported` with nothing changed.
        """
        for index, op in enumerate(plan.operations):
            _check_operation(index, op)
        body = canonical_json(plan.model_dump(mode="json"))
        now_us = self._now_us()
        async with self._write() as db:
            applied = await scalar(
                db, "SELECT plan FROM schema_migrations WHERE name = ?", (plan.name,)
            )
            if applied is not None:
                if bytes(applied) == body:
                    return
                raise MigrationNotSupported(
                    f"migration {plan.name!r} was already applied with different operations"
                )
            await _check_targets(db, plan)
            for op in plan.operations:
                await db.execute(
                    f'ALTER TABLE "{op.table}" ADD COLUMN "{op.column}" {op.type.upper()}'
                )
            await db.execute(
                "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
                "VALUES ((SELECT max(version) + 1 FROM schema_migrations), ?, ?, ?)",
                (plan.name, now_us, body),
            )

    async def schema_version(self) -> int:
        """The highest applied migration version."""
        async with self._read() as db:
            return int(await scalar(db, "SELECT max(version) FROM schema_migrations"))

    # --- writes -------------------------------------------------------------------------

    async def put(self, episode: Episode, *, user: str, session: str, agent: str) -> None:
        """Store one episode under its own scope (which the caller must restate)."""
        _check_scope(episode, user, session, agent)
        await self.put_many([episode])

    async def put_many(
        self, episodes: Sequence[Episode], *, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Store a batch in one transaction; return how many rows were new.

        Identical re-puts are no-ops; an id repeated with different fields (in the store or
        within the batch) raises :class:`DuplicateEpisodeError` and nothing is written.
        ``progress(done, total)`` is called as rows are written (still one transaction).
        """
        rows = dedupe_batch([episode_row(episode) for episode in episodes])
        if not rows:
            return 0
        async with self._write() as db:
            before = db.total_changes
            for start in range(0, len(rows), _PROGRESS_STEP):
                await db.executemany(_INSERT_SQL, rows[start : start + _PROGRESS_STEP])
                if progress is not None:
                    progress(min(start + _PROGRESS_STEP, len(rows)), len(rows))
            inserted = db.total_changes - before
            if inserted != len(rows):
                await self._check_conflicts(db, rows)
        return inserted

    @staticmethod
    async def _check_conflicts(db: aiosqlite.Connection, rows: list[Row]) -> None:
        """Some ids already existed: fine if identical, else raise (the caller rolls back)."""
        by_id = {row[0]: row for row in rows}
        stored = await fetch(db, _STORED_SQL, (orjson.dumps(list(by_id)),))
        for old in stored:
            fields = row_differences(old, by_id[old[0]])
            if fields:
                raise _duplicate(old[0], fields, "already exists")

    # --- reads --------------------------------------------------------------------------

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]:
        """Newest first (by UTC time, then insertion); widens as session/agent are omitted.

        The rows returned get ``last_accessed`` = now and ``access_count`` + 1.
        """
        sql, params = recent_query(user, session, agent, limit)
        now_us = self._now_us()
        async with self._write() as db:
            rows = await fetch(db, sql, params)
            episodes = [row_episode(row) for row in rows]
            await db.executemany(_TOUCH_SQL, [(now_us, row[0]) for row in rows])
        return episodes

    async def since(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]:
        """Episodes of one partition with ``seq > after_seq``, in ``seq`` order (read-only)."""
        _check_limit(limit, optional=True)
        params = (partition.key, after_seq, -1 if limit is None else limit)
        async with self._read() as db:
            rows = await fetch(db, _SINCE_SQL, params)
        return [row_record(row) for row in rows]

    async def by_ids(self, ids: Sequence[str]) -> list[EpisodeRecord]:
        """The stored episodes among ``ids``, in ``seq`` order; unknown ids are left out."""
        async with self._read() as db:
            rows = await fetch(db, _BY_IDS_SQL, (orjson.dumps(list(ids)),))
        return [row_record(row) for row in rows]

    async def max_seq(self, partition: Partition) -> int:
        """The partition's highest ``seq`` (0 when it has no episodes)."""
        async with self._read() as db:
            seq = await scalar(
                db,
                "SELECT seq FROM episodes WHERE partition_key = ? ORDER BY seq DESC LIMIT 1",
                (partition.key,),
            )
        return 0 if seq is None else int(seq)

    async def count_since(self, partition: Partition, after_seq: int) -> int:
        """How many episodes of the partition have ``seq > after_seq``."""
        async with self._read() as db:
            count = await scalar(
                db,
                "SELECT count(*) FROM episodes WHERE partition_key = ? AND seq > ?",
                (partition.key, after_seq),
            )
        return int(count)

    async def partitions(self) -> list[Partition]:
        """Every distinct ``(user, agent)`` pair with episodes, sorted by (user, agent)."""
        async with self._read() as db:
            rows = await fetch(db, _PARTITIONS_SQL)
        return sorted(
            (parse_partition_key(row[0]) for row in rows), key=lambda p: (p.user, p.agent)
        )

    # --- consolidation: wired by the consolidation runtime (stargraph_mem.engine) --------

    async def consolidate(self, rule: ConsolidationRule) -> list[MemoryDelta]:
        """Run ``rule`` (default classification table, incrementally) and apply its deltas.

        The consolidation runtime registers itself when ``stargraph_mem`` is imported.
        """
        hook = consolidation_hook()
        if hook is None:
            raise ConsolidationRuleError(
                "no consolidation runtime registered (import stargraph_mem.engine.legacy)",
                rule_id=rule.id,
            )
        return await hook(self, rule)
