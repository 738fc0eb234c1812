"""Episodic memory over SQLite (aiosqlite): scoped writes, widening reads, incremental reads.

One ``episodes`` table ordered by an insertion ``seq``; scope keys come from
:mod:`stargraph_mem.stores.scope`, so every read is an index lookup or range scan, never
``LIKE``. Writes take ``BEGIN IMMEDIATE`` so several processes can share one file (WAL).

A row that cannot be decoded (written by an older version or by hand) never blocks a read:
reads skip it, note it once in the ``quarantine`` table and report it
(:class:`~stargraph_mem.stores.memory.QuarantinedRow`); the row itself is left as it is.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from array import array
from bisect import bisect_left
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from functools import lru_cache
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import aiosqlite
import orjson

from stargraph_mem.errors import (
    CorruptRowError,
    DuplicateEpisodeError,
    MemoryScopeError,
    StoreError,
)
from stargraph_mem.model.base import ID_PATTERN, unicode_problem
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.time import TimestampRangeError
from stargraph_mem.stores.memory import (
    CheckedRead,
    EpisodeRecord,
    QuarantinedRow,
    consolidation_hook,
)
from stargraph_mem.stores.models import ConsolidationRule, MigrationPlan
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
    SQLiteStoreBase,
    fetch,
    from_us,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite_base import to_us as to_us  # re-export
from stargraph_mem.stores.sqlite_migration import Ledger, apply_plan, check_plan

__all__ = ["BASELINE_MIGRATION", "SCHEMA_VERSION", "EpisodeWriter", "SQLiteMemoryStore"]

logger = logging.getLogger(__name__)

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
    # episodes rows reads could not decode; created on open, so older files gain it too
    """CREATE TABLE IF NOT EXISTS quarantine (
        seq INTEGER PRIMARY KEY,
        episode_id TEXT,
        partition_key TEXT,
        reason TEXT NOT NULL,
        at_us INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS quarantine_partition_seq ON quarantine (partition_key, seq)",
)
_LEDGER: Final = Ledger(
    "schema_migrations",
    "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES ((SELECT max(version) + 1 FROM schema_migrations), ?, ?, ?)",
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
_STORED_SEQ_SQL: Final = (
    f"SELECT seq, {_WRITE_COLUMNS} FROM episodes WHERE id IN (SELECT value FROM json_each(?))"
)
_NEW_SEQS_SQL: Final = "SELECT seq FROM episodes WHERE seq > ? ORDER BY seq"
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
_NOTE_SQL: Final = (
    "INSERT OR IGNORE INTO quarantine (seq, episode_id, partition_key, reason, at_us) "
    "VALUES (?, ?, ?, ?, ?)"
)
_QUARANTINE_COLUMNS: Final = "seq, episode_id, partition_key, reason, at_us"
_NOTED_SQL: Final = (
    f"SELECT {_QUARANTINE_COLUMNS} FROM quarantine "
    "WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq"
)
_ROW_KEYS_SQL: Final = (
    "SELECT seq, partition_key FROM episodes WHERE seq IN (SELECT value FROM json_each(?))"
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
_EPISODE_ID: Final = re.compile(ID_PATTERN)
_SCOPE_MAX: Final = 256
"""Longest ``user``/``session``/``agent`` an :class:`Episode` accepts (characters)."""
_DAY_S: Final = 86_400
_ONE_S: Final = timedelta(seconds=1)

Row = tuple[str, str, str, str, str, str, int, int, str, str | None, bytes]
"""One ``episodes`` row in ``_WRITE_COLUMNS`` order, precomputed in Python for executemany."""
T = TypeVar("T")


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
    try:
        ts_us = to_us(ts)
    except TimestampRangeError as error:  # models built without validation
        raise StoreError(f"episode {episode.id!r}: {error}", episode_id=episode.id) from error
    return (
        episode.id,
        scope,
        partition,
        episode.user,
        episode.session,
        episode.agent,
        ts_us,
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


def _corrupt(seq: object, reason: str) -> CorruptRowError:
    """The error for an undecodable row, naming the table, the row's seq and the reason."""
    return CorruptRowError(
        f"{TABLE} row seq={seq} is corrupt: {reason}", table=TABLE, seq=seq, reason=reason
    )


def _metadata(raw: bytes) -> dict[str, Any]:
    """Decode a stored metadata blob, which must be a JSON object."""
    value = orjson.loads(raw)
    if type(value) is not dict:
        raise ValueError(f"metadata is {type(value).__name__}, expected an object")
    return value


class _NotUtf8(bytes):
    """The bytes of a TEXT value that is not valid UTF-8 (see :func:`_lenient_text`)."""


def _lenient_text(data: bytes) -> str:
    """Text factory for re-reading rows whose TEXT is not UTF-8: such values come back as
    :class:`_NotUtf8` (not a ``str``), so the row checks refuse them by type."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return _NotUtf8(data)  # type: ignore[return-value]


def _kind(value: object) -> str:
    """How a stored value reads, for reasons: ``NULL``, ``a BLOB``, …"""
    if isinstance(value, _NotUtf8):
        return "TEXT that is not valid UTF-8"
    if value is None:
        return "NULL"
    names = {int: "an INTEGER", float: "a REAL", str: "TEXT", bytes: "a BLOB"}
    return names.get(type(value), type(value).__name__)


def _expected(name: str, what: str, value: object) -> str:
    """``"name: expected what, got …"``, or ``"name: TEXT that is not valid UTF-8"``."""
    if isinstance(value, _NotUtf8):
        return f"{name}: {_kind(value)} ({bytes(value)[:32]!r})"
    return f"{name}: expected {what}, got {_kind(value)}"


_TEXT_COLUMNS: Final = (
    (2, "content"),
    (5, "source_node"),
    (6, "user"),
    (7, "session"),
    (8, "agent"),
)


def _text_problem(index: int, name: str, value: object) -> str | None:
    if value is None and name == "source_node":
        return None
    if type(value) is not str:
        return _expected(name, "TEXT", value)
    if "\x00" in value:
        return f"{name}: contains a NUL character"
    if index >= 6 and not 0 < len(value) <= _SCOPE_MAX:
        return f"{name}: must be 1 to {_SCOPE_MAX} characters long (got {len(value)})"
    return None


def _time_problem(name: str, ts_us: object, offset_s: object = 0) -> str | None:
    if type(ts_us) is not int:
        return f"{name}: expected an INTEGER, got {_kind(ts_us)}"
    try:
        from_us(ts_us, offset_s)  # type: ignore[arg-type]
    except (ValueError, TypeError, OverflowError) as exc:
        return f"{name}: {exc}"
    return None


_JSON_KINDS: Final = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _metadata_problem(raw: object) -> str | None:
    if isinstance(raw, _NotUtf8) or type(raw) not in (bytes, str):
        return _expected("metadata", "a JSON object", raw)
    try:
        value = orjson.loads(raw)  # type: ignore[arg-type]
    except orjson.JSONDecodeError as exc:
        return f"metadata: not valid JSON ({exc})"
    if type(value) is not dict:
        return f"metadata: a JSON {_JSON_KINDS.get(type(value), 'null')}, expected an object"
    return None


def row_problem(row: Sequence[Any]) -> str:
    """Why a ``_READ_COLUMNS`` row does not decode to a valid episode: the first bad
    column, as ``"column: problem"``."""
    eid = row[1]
    if type(eid) is not str:
        return _expected("id", "TEXT", eid)
    if _EPISODE_ID.fullmatch(eid) is None:
        return f"id: {eid!r} does not match the id pattern {ID_PATTERN}"
    for index, name in _TEXT_COLUMNS:
        problem = _text_problem(index, name, row[index])
        if problem is not None:
            return problem
    offset = row[4]
    if type(offset) is not int:
        return f"tz_offset_s: expected an INTEGER, got {_kind(offset)}"
    if not -_DAY_S < offset < _DAY_S:
        return f"tz_offset_s: {offset} is not a UTC offset (less than a day either way)"
    problem = _time_problem("ts_us", row[3], offset) or _metadata_problem(row[9])
    if problem is None and row[10] is not None:
        problem = _time_problem("last_accessed_us", row[10])
    if problem is None and type(row[11]) is not int:
        problem = f"access_count: expected an INTEGER, got {_kind(row[11])}"
    return problem or "the row does not decode to a valid episode"


_ID_MATCH: Final = _EPISODE_ID.fullmatch


def row_record(row: Sequence[Any]) -> EpisodeRecord:
    """Build an :class:`EpisodeRecord` from a ``_READ_COLUMNS`` row without pydantic.

    A row that does not decode (a column of the wrong type or not UTF-8, an id off the
    pattern, NUL in text, a scope part empty or too long, a time no datetime has, metadata
    that is not a JSON object) raises :class:`CorruptRowError`, whose
    ``context["reason"]`` names the column. Metadata the :class:`Episode` model would
    refuse (``intent: merge``) decodes: the runtime rejects such an episode itself.
    """
    try:
        seq, eid, content, ts_us, offset_s, source, user, session, agent, raw, seen, count = row
        # the checks decoding does not make by itself; row_problem says which one failed
        if (
            type(eid) is str
            and type(content) is str
            and type(user) is str
            and type(session) is str
            and type(agent) is str
            and (source is None or type(source) is str)
            and type(ts_us) is int
            and type(count) is int
            and _ID_MATCH(eid) is not None
            and 0 < len(user) <= _SCOPE_MAX
            and 0 < len(session) <= _SCOPE_MAX
            and 0 < len(agent) <= _SCOPE_MAX
            and "\x00" not in content
            and "\x00" not in user
            and "\x00" not in session
            and "\x00" not in agent
            and (source is None or "\x00" not in source)
        ):
            return EpisodeRecord(
                seq,
                eid,
                content,
                from_us(ts_us, offset_s),
                source,
                user,
                session,
                agent,
                _metadata(raw),
                None if seen is None else from_us(seen),
                count,
            )
    except (ValueError, TypeError, OverflowError):
        pass
    raise _corrupt(row[0], row_problem(row))


def row_episode(row: Sequence[Any]) -> Episode:
    """Build an :class:`Episode` from a ``_READ_COLUMNS`` row; raises as :func:`row_record`.

    The model validates it, except a decodable row whose metadata the model refuses
    (``intent: merge``, written without validation): that one is shown as stored.
    """
    record = row_record(row)
    try:
        return record.to_episode()
    except ValueError:  # ValidationError is a ValueError
        return record.to_episode(validate=False)


def _split(rows: list[Any], decode: Callable[[Any], T]) -> tuple[list[T], list[tuple[Any, str]]]:
    """Decode ``rows`` in order: the good ones, and ``(row, reason)`` for the others."""
    try:
        return [decode(row) for row in rows], []
    except CorruptRowError:
        pass
    good: list[T] = []
    bad: list[tuple[Any, str]] = []
    for row in rows:
        try:
            good.append(decode(row))
        except CorruptRowError as exc:
            bad.append((row, exc.context["reason"]))
    return good, bad


async def _all(db: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Every row of one statement; when reading fails part way the cursor is closed (an
    unfinished statement would keep a read snapshot open on the connection, and a later
    ``BEGIN IMMEDIATE`` on it would fail as busy)."""
    cursor = await db.execute(sql, params)
    try:
        return list(await cursor.fetchall())
    except BaseException:
        await cursor.close()
        raise


async def _rows(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """All rows of one statement, but a TEXT value that is not UTF-8 does not fail the
    read: the statement is run again with such values read as :class:`_NotUtf8`."""
    try:
        return await _all(db, sql, params)
    except sqlite3.OperationalError as exc:
        if not str(exc).startswith("Could not decode to UTF-8"):
            raise
    factory = db.text_factory
    db.text_factory = _lenient_text
    try:
        return await _all(db, sql, params)
    finally:
        db.text_factory = factory


def _seq_episode(row: Sequence[Any]) -> tuple[int, Episode]:
    return row[0], row_episode(row)


def _not_utf8(rows: list[Row]) -> StoreError:
    """The error for a batch holding text UTF-8 cannot encode (a lone surrogate)."""
    for row in rows:
        for name, value in zip(_ROW_FIELDS, row, strict=False):
            problem = unicode_problem(value) if isinstance(value, str) else None
            if problem is not None:
                return StoreError(
                    f"episode {row[0]!r}: {name} {problem}", episode_id=row[0], field=name
                )
    return StoreError("an episode holds text that cannot be stored as UTF-8")


async def _note(db: aiosqlite.Connection, entries: list[QuarantinedRow], at_us: int) -> bool:
    """Insert quarantine entries (existing seqs are kept); False when the table cannot be
    written (a read-only file, a lock held too long, …). Inside a transaction a savepoint
    keeps a failure from undoing the rest of it."""
    params = [(e.seq, e.episode_id, e.partition_key, e.reason, at_us) for e in entries]
    try:
        if db.in_transaction:
            await db.execute("SAVEPOINT quarantine")
            try:
                await db.executemany(_NOTE_SQL, params)
            except sqlite3.Error:
                await db.execute("ROLLBACK TO quarantine")
                raise
            finally:
                await db.execute("RELEASE quarantine")
        else:
            async with transaction(db):
                await db.executemany(_NOTE_SQL, params)
    except (sqlite3.Error, StoreError) as exc:
        logger.warning("could not record %d quarantined episodes row(s): %s", len(params), exc)
        return False
    return True


def _quarantined_row(row: Sequence[Any]) -> QuarantinedRow:
    """A :class:`QuarantinedRow` from a ``quarantine`` table row."""
    return QuarantinedRow(int(row[0]), row[1], row[2], str(row[3]), from_us(row[4]))


def _warn(rows: Sequence[QuarantinedRow]) -> None:
    """One warning per skipped row (with no logging set up, Python prints it on stderr)."""
    for row in rows:
        logger.warning("skipped quarantined %s", row.describe())


def _check_text_part(value: object, part: str) -> None:
    """A scope component must be text UTF-8 can hold (no lone surrogate)."""
    problem = unicode_problem(value) if isinstance(value, str) else None
    if problem is not None:
        raise MemoryScopeError(f"scope component '{part}' {problem}", part=part)


def _key_of(partition: Partition) -> str:
    """The partition's key; a component UTF-8 cannot hold raises :class:`MemoryScopeError`."""
    _check_text_part(partition.user, "user")
    _check_text_part(partition.agent, "agent")
    return partition.key


def scope_filter(user: str, session: str | None, agent: str | None) -> tuple[str, tuple[str, ...]]:
    """SQL condition and parameters for one widening read (equality or half-open range)."""
    for part, value in (("user", user), ("session", session), ("agent", agent)):
        _check_text_part(value, part)
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
        _check_text_part(given, part)
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


def _partition_of(key: object) -> Partition | None:
    """The partition a stored key names, or ``None`` when the key is not one
    :func:`~stargraph_mem.stores.scope.partition_key` makes (a hand-edited row)."""
    if type(key) is not str:
        return None
    try:
        partition = parse_partition_key(key)
        return partition if partition.key == key else None
    except (ValueError, MemoryScopeError):
        return None


# --- streaming writes -----------------------------------------------------------------


class _Discarded(Exception):
    """Raised inside :meth:`SQLiteMemoryStore.writing` to roll its transaction back."""


class EpisodeWriter:
    """Writes chunks of episodes inside one open write transaction (see
    :meth:`SQLiteMemoryStore.writing`); memory stays bounded by the chunk, not the stream.

    Every chunk is inserted with one ``executemany``; the ``episodes`` table's unique id
    index finds repeats, in the store and earlier in the stream alike, so the stream keeps
    no set of ids. For each episode written it keeps its ``seq`` and the caller's tag (16
    bytes), to name where a conflicting id first appeared.
    """

    def __init__(self, db: aiosqlite.Connection, start_seq: int) -> None:
        self._db = db
        self._start = start_seq
        """The highest ``seq`` before the stream: rows above it were written by this stream."""
        self._last = start_seq
        self._seqs = array("q")
        self._tags = array("q")
        self._given = 0
        self.written = 0
        """How many new rows the stream has written so far."""
        self.discarded = False

    def discard(self) -> None:
        """Roll the whole stream back when the ``writing`` block ends (nothing is stored)."""
        self.discarded = True

    async def write(
        self, episodes: Sequence[Episode], tags: Sequence[int] | None = None
    ) -> list[DuplicateEpisodeError]:
        """Insert one chunk; return the episodes whose id is taken by a different episode.

        ``tags`` (one int per episode, e.g. line numbers; default: the position in the
        stream, from 1) name the episodes in the conflicts: ``context["tag"]`` is the
        conflicting episode's, ``context["first_tag"]`` the first one's with that id when
        it came earlier in this stream (``None`` when it was stored before). As in
        :meth:`SQLiteMemoryStore.put_many`, an identical repeat is no conflict and is
        stored once. Conflicting episodes are not written; the caller decides whether to
        :meth:`discard` the stream. Returned in the chunk's order of first detection:
        repeats inside the chunk, then ids stored before it.
        """
        if tags is None:
            tags = range(self._given + 1, self._given + 1 + len(episodes))
        elif len(tags) != len(episodes):
            raise ValueError(f"{len(tags)} tags for {len(episodes)} episodes")
        self._given += len(episodes)
        conflicts: list[DuplicateEpisodeError] = []
        index: dict[str, int] = {}
        rows: list[Row] = []
        row_tags: list[int] = []
        for episode, tag in zip(episodes, tags, strict=True):
            row = episode_row(episode)
            at = index.get(row[0])
            if at is None:
                index[row[0]] = len(rows)
                rows.append(row)
                row_tags.append(tag)
                continue
            fields = row_differences(rows[at], row)
            if fields:
                conflicts.append(_stream_duplicate(row[0], fields, tag, row_tags[at], earlier=True))
        if not rows:
            return conflicts
        db = self._db
        before = db.total_changes
        try:
            await db.executemany(_INSERT_SQL, rows)
        except UnicodeEncodeError as exc:  # models built without validation
            raise _not_utf8(rows) from exc
        inserted = db.total_changes - before
        if inserted == len(rows):
            # every row is new; seqs grow with each insert, so the n-th row has the n-th seq
            seqs = [row[0] for row in await fetch(db, _NEW_SEQS_SQL, (self._last,))]
            pairs = list(zip(seqs, row_tags, strict=True))
        else:
            pairs = []
            stored = await _rows(db, _STORED_SEQ_SQL, (orjson.dumps(list(index)),))
            for seq, *old in stored:
                at = index[old[0]]
                if seq > self._last:  # written by this chunk
                    pairs.append((seq, row_tags[at]))
                    continue
                fields = row_differences(old, rows[at])
                if fields:
                    earlier = seq > self._start
                    first = self._tag_of(seq) if earlier else None
                    conflicts.append(
                        _stream_duplicate(old[0], fields, row_tags[at], first, earlier=earlier)
                    )
            pairs.sort()
        for seq, tag in pairs:
            self._seqs.append(seq)
            self._tags.append(tag)
        if pairs:
            self._last = pairs[-1][0]
        self.written += inserted
        return conflicts

    def _tag_of(self, seq: int) -> int | None:
        """The tag of the row this stream wrote as ``seq``."""
        at = bisect_left(self._seqs, seq)
        return self._tags[at] if at < len(self._seqs) and self._seqs[at] == seq else None


def _stream_duplicate(
    episode_id: str, fields: list[str], tag: int, first_tag: int | None, *, earlier: bool
) -> DuplicateEpisodeError:
    """A conflict of :meth:`EpisodeWriter.write`, with the tags in its context."""
    where = "appears twice in the batch" if earlier else "already exists"
    error = _duplicate(episode_id, fields, where)
    error.context.update(tag=tag, first_tag=first_tag)
    return error


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
        return {"schema_version": version, "episode_count": count, "fragment_count": count}

    # --- lifecycle ----------------------------------------------------------------------

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations in one transaction and record the plan.

        Re-applying a recorded plan is a no-op; anything else raises
        :class:`MigrationNotSupported` (naming store, plan and operation), nothing changed.
        """
        check_plan(plan, store="memory")
        now_us = self._now_us()
        async with self._write() as db:
            await apply_plan(db, plan, store="memory", ledger=_LEDGER, now_us=now_us)

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
                try:
                    await db.executemany(_INSERT_SQL, rows[start : start + _PROGRESS_STEP])
                except UnicodeEncodeError as exc:  # models built without validation
                    raise _not_utf8(rows[start : start + _PROGRESS_STEP]) from exc
                if progress is not None:
                    progress(min(start + _PROGRESS_STEP, len(rows)), len(rows))
            inserted = db.total_changes - before
            if inserted != len(rows):
                await self._check_conflicts(db, rows)
        return inserted

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[EpisodeWriter]:
        """One write transaction for a stream of chunks: ``await writer.write(chunk)`` as
        often as needed; the block's end commits everything, or nothing when the block
        raises or called :meth:`EpisodeWriter.discard`.

        For inputs too large to hold at once (``stargraph-mem ingest``): duplicate ids are
        handled as :meth:`put_many` handles them within one batch, across the whole
        stream, but are returned by ``write`` instead of raised, so every one can be
        reported. The transaction holds the write lock until the block ends.
        """
        try:
            async with self._write() as db:
                start = await scalar(db, "SELECT coalesce(max(seq), 0) FROM episodes")
                writer = EpisodeWriter(db, int(start))
                yield writer
                if writer.discarded:
                    raise _Discarded
        except _Discarded:
            pass

    @staticmethod
    async def _check_conflicts(db: aiosqlite.Connection, rows: list[Row]) -> None:
        """Some ids already existed: fine if identical, else raise (the caller rolls back)."""
        by_id = {row[0]: row for row in rows}
        stored = await _rows(db, _STORED_SQL, (orjson.dumps(list(by_id)),))
        for old in stored:
            fields = row_differences(old, by_id[old[0]])
            if fields:
                raise _duplicate(old[0], fields, "already exists")

    # --- reads --------------------------------------------------------------------------

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]:
        """Newest first (by UTC time, then insertion); widens as session/agent are omitted.

        The rows returned get ``last_accessed`` = now and ``access_count`` + 1. Rows that
        cannot be decoded are skipped (up to ``limit`` good ones are still returned),
        quarantined, and logged as one warning each (:meth:`recent_checked` returns them).
        """
        episodes, quarantined = await self.recent_checked(user, session, agent, limit=limit)
        _warn(quarantined)
        return episodes

    async def recent_checked(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> tuple[list[Episode], list[QuarantinedRow]]:
        """:meth:`recent`, and the undecodable rows met on the way, newest first (not logged).

        The good episodes are the newest ``limit`` decodable ones of the scope; the
        quarantined rows are those ranked among them that were skipped.
        """
        sql, params = recent_query(user, session, agent, limit)
        now_us = self._now_us()
        async with self._write() as db:
            rows = await _rows(db, sql, params)
            found, bad = _split(rows, _seq_episode)
            offset, wanted = len(rows), limit
            while len(rows) == wanted and len(found) < limit:  # bad rows took places: refill
                wanted = limit - len(found)
                rows = await _rows(db, f"{sql} OFFSET ?", (*params[:-1], wanted, offset))
                good, worse = _split(rows, _seq_episode)
                found += good
                bad += worse
                offset += len(rows)
            await db.executemany(_TOUCH_SQL, [(now_us, seq) for seq, _ in found])
            quarantined = await self._quarantine(db, bad)
        return [episode for _, episode in found], quarantined

    async def since(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]:
        """Episodes of one partition with ``seq > after_seq``, in ``seq`` order (read-only).

        Rows that cannot be decoded are skipped: the result is the first ``limit``
        decodable episodes after ``after_seq`` (fewer only when there are no more). Skipped
        rows are quarantined and logged as one warning each; a consumer that keeps a
        watermark should use :meth:`since_checked`, which also returns them.
        """
        _check_limit(limit, optional=True)
        records: list[EpisodeRecord] = []
        after = after_seq
        while True:
            want = None if limit is None else limit - len(records)
            read = await self.since_checked(partition, after, limit=want)
            records += read.records
            _warn(read.quarantined)
            if not read.quarantined or want is None or read.scanned < want:
                return records
            after = read.last_seq(after)

    async def since_checked(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead:
        """The rows of one partition with ``seq > after_seq``, in ``seq`` order, decoded.

        Reads the first ``limit`` rows (all when ``None``) with ``seq > after_seq``, good or
        not, and returns ``CheckedRead(records, quarantined)`` (a named 2-tuple): the rows
        that decode, as :class:`EpisodeRecord`, and those that do not, as
        :class:`QuarantinedRow` (each noted once in the ``quarantine`` table; nothing is
        logged). Both lists are in ``seq`` order and together are every row scanned, so:

        - ``read.scanned`` (``len(records) + len(quarantined)``) ``<= limit``, and
          ``read.scanned < limit`` means the partition has no rows after those scanned;
        - ``read.last_seq(after_seq)`` is the highest ``seq`` scanned (``after_seq`` when
          none was): the watermark that consumes every scanned row, bad ones included, so
          the next call starts after them.

        When the quarantine table cannot be written (a read-only file, a lock held too
        long), the bad rows are still skipped and returned, with ``recorded=False``.
        Raises ``ValueError`` for a limit < 1.
        """
        _check_limit(limit, optional=True)
        params = (_key_of(partition), after_seq, -1 if limit is None else limit)
        async with self._read() as db:
            rows = await _rows(db, _SINCE_SQL, params)
            records, bad = _split(rows, row_record)
            quarantined = await self._quarantine(db, bad) if bad else []
        return CheckedRead(records, quarantined)

    async def by_ids(self, ids: Sequence[str]) -> list[EpisodeRecord]:
        """The stored episodes among ``ids``, in ``seq`` order; unknown ids are left out, and
        rows that cannot be decoded are skipped, quarantined and logged."""
        async with self._read() as db:
            rows = await _rows(db, _BY_IDS_SQL, (orjson.dumps(list(ids)),))
            records, bad = _split(rows, row_record)
            quarantined = await self._quarantine(db, bad) if bad else []
        _warn(quarantined)
        return records

    async def quarantined(self, partition: Partition | None = None) -> list[QuarantinedRow]:
        """The rows reads have quarantined (of one partition, or all), in ``seq`` order."""
        sql = f"SELECT {_QUARANTINE_COLUMNS} FROM quarantine"
        params: tuple[str, ...] = ()
        if partition is not None:
            sql += " WHERE partition_key = ?"
            params = (_key_of(partition),)
        async with self._read() as db:
            try:
                rows = await fetch(db, sql + " ORDER BY seq", params)
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                return []  # an older file opened read-only: nothing was ever noted
        return [_quarantined_row(row) for row in rows]

    async def _quarantine(
        self, db: aiosqlite.Connection, bad: list[tuple[Any, str]]
    ) -> list[QuarantinedRow]:
        """Note undecodable rows in the ``quarantine`` table (once per seq) and return their
        entries in the order given; never raises for a table it cannot read or write."""
        if not bad:
            return []
        seqs = orjson.dumps([row[0] for row, _ in bad])
        try:
            noted = {
                entry.seq: entry
                for entry in map(_quarantined_row, await fetch(db, _NOTED_SQL, (seqs,)))
            }
        except sqlite3.Error:
            noted = {}
        keys = {row[0]: row[1] for row in await _rows(db, _ROW_KEYS_SQL, (seqs,))}
        at_us = self._now_us()
        at = from_us(at_us)
        fresh = [
            QuarantinedRow(
                row[0],
                row[1] if type(row[1]) is str else None,
                key if type(key := keys.get(row[0])) is str else None,
                reason,
                at,
            )
            for row, reason in bad
            if row[0] not in noted
        ]
        if fresh and not await _note(db, fresh, at_us):
            fresh = [replace(entry, recorded=False) for entry in fresh]
        noted.update((entry.seq, entry) for entry in fresh)
        return [noted[row[0]] for row, _ in bad]

    async def max_seq(self, partition: Partition) -> int:
        """The partition's highest ``seq`` (0 when it has no episodes)."""
        async with self._read() as db:
            seq = await scalar(
                db,
                "SELECT seq FROM episodes WHERE partition_key = ? ORDER BY seq DESC LIMIT 1",
                (_key_of(partition),),
            )
        return 0 if seq is None else int(seq)

    async def count_since(self, partition: Partition, after_seq: int) -> int:
        """How many rows of the partition have ``seq > after_seq`` (quarantined ones too)."""
        async with self._read() as db:
            count = await scalar(
                db,
                "SELECT count(*) FROM episodes WHERE partition_key = ? AND seq > ?",
                (_key_of(partition), after_seq),
            )
        return int(count)

    async def partitions(self) -> list[Partition]:
        """Every distinct ``(user, agent)`` pair with episodes, sorted by (user, agent).

        A stored key that is not a well-formed partition key (a hand-edited row) is left
        out with a warning: no partition read could reach its rows.
        """
        async with self._read() as db:
            rows = await _rows(db, _PARTITIONS_SQL)
        found: list[Partition] = []
        for (key,) in rows:
            partition = _partition_of(key)
            if partition is None:
                logger.warning("skipped malformed episodes partition key %r", key)
            else:
                found.append(partition)
        return sorted(found, key=lambda p: (p.user, p.agent))

    # --- consolidation: run by the consolidation runtime (stargraph_mem.engine) ----------

    async def consolidate(self, rule: ConsolidationRule) -> list[MemoryDelta]:
        """Run ``rule`` (default classification table, incrementally) and apply its deltas.

        The runtime is looked up when this runs (``stores.memory.consolidation_hook``), so
        importing the store loads neither the engine nor CLIPS.
        """
        return await consolidation_hook()(self, rule)

    # --- many partitions at once (batched passes) ----------------------------------------

    async def since_checked_of(
        self, reads: Sequence[tuple[Partition, int]], *, limit: int | None = None
    ) -> list[CheckedRead]:
        """:meth:`since_checked` of many ``(partition, after_seq)`` pairs (results in the
        order given), in one statement; ``limit`` applies to each partition."""
        _check_limit(limit, optional=True)
        wanted = orjson.dumps([[_key_of(p), after] for p, after in reads])
        found: list[list[Any]] = [[] for _ in reads]
        async with self._read() as db:
            rows = await _rows(db, _SINCE_OF_SQL, (wanted, -1 if limit is None else limit))
            for row in rows:
                found[row[0]].append(row[1:])
            split = [_split(part, row_record) for part in found]
            bad = [entry for _, worse in split for entry in worse]
            noted = iter(await self._quarantine(db, bad) if bad else [])
        return [CheckedRead(good, [next(noted) for _ in worse]) for good, worse in split]

    async def count_since_of(self, reads: Sequence[tuple[Partition, int]]) -> list[int]:
        """:meth:`count_since` of many ``(partition, after_seq)`` pairs, in one statement."""
        wanted = orjson.dumps([[_key_of(p), after] for p, after in reads])
        async with self._read() as db:
            rows = await fetch(db, _COUNT_OF_SQL, (wanted,))
        return [int(count) for _, count in sorted(rows)]


_SINCE_OF_SQL: Final = f"""
    SELECT j.key, {", ".join("e." + c.strip() for c in _READ_COLUMNS.split(","))}
    FROM json_each(?1) j JOIN episodes e ON e.seq IN (
        SELECT seq FROM episodes WHERE partition_key = j.value ->> 0 AND seq > j.value ->> 1
        ORDER BY seq LIMIT ?2)
    ORDER BY j.key, e.seq"""
_COUNT_OF_SQL: Final = """
    SELECT j.key, (SELECT count(*) FROM episodes e
        WHERE e.partition_key = j.value ->> 0 AND e.seq > j.value ->> 1)
    FROM json_each(?) j"""
