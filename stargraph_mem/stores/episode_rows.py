"""Episode rows, backend-neutral: encoding, decoding and checking rows, scope filters, streams.

Both backends store the same ``episodes`` columns (times as UTC microseconds, metadata as
JSON bytes), so a row from SQLite or PostgreSQL decodes here the same way, and a row that
does not decode is named by the same reason. Backends hand their SQL in an
:class:`EpisodeStatements`.
"""

from __future__ import annotations

import logging
import re
from array import array
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import lru_cache
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import orjson

from stargraph_mem.errors import (
    CorruptRowError,
    DuplicateEpisodeError,
    MemoryScopeError,
    StoreError,
)
from stargraph_mem.model.base import ID_PATTERN, unicode_problem
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.time import TimestampRangeError, from_us, to_us
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord, QuarantinedRow
from stargraph_mem.stores.scope import (
    Partition,
    escape_component,
    partition_key,
    prefix_upper_bound,
    scope_key,
    user_prefix,
)
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "TABLE",
    "Discarded",
    "EpisodeStatements",
    "EpisodeWriter",
    "NotUtf8",
    "Row",
    "check_limit",
    "check_scope",
    "checked_reads",
    "dedupe_batch",
    "duplicate_error",
    "episode_row",
    "group_reads",
    "insert_rows",
    "key_of_partition",
    "not_utf8_error",
    "parse_partition_key",
    "partition_of",
    "put_rows",
    "quarantine",
    "quarantined_row",
    "read_recent",
    "read_since",
    "row_differences",
    "row_episode",
    "row_problem",
    "row_record",
    "scope_filter",
    "seq_episode",
    "split_rows",
    "stream_duplicate",
    "warn_quarantined",
]

logger = logging.getLogger("stargraph_mem.stores.sqlite_memory")
"""Quarantine warnings keep the logger name they always had."""

TABLE: Final = "episodes"


@dataclass(frozen=True, slots=True)
class EpisodeStatements:
    """One backend's SQL for the shared episode code (``?`` or ``%s`` placeholders)."""

    ids: Callable[[Sequence[Any]], Any]
    """Encodes a list of ids or seqs as the one parameter the ``*_in`` statements take."""
    insert: str
    """Insert one ``Row`` unless its id is stored (``ON CONFLICT (id) DO NOTHING``)."""
    new_seqs: str
    """Seqs above a given one, in order."""
    stored_seq_in: str
    """``seq`` and the ``Row`` columns of the stored episodes among the given ids."""
    noted_in: str
    """``quarantine`` rows of the given seqs."""
    row_keys_in: str
    """``seq, partition_key`` of the ``episodes`` rows of the given seqs."""


PROGRESS_STEP: Final = 10_000
"""Rows per ``executemany`` in ``put_many`` (one transaction; progress is told per step)."""


async def put_rows(
    db: Conn,
    sql: EpisodeStatements,
    rows: Sequence[Row],
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Insert ``rows`` step by step inside the caller's transaction; how many were new."""
    inserted = 0
    for start in range(0, len(rows), PROGRESS_STEP):
        inserted += await insert_rows(db, sql, rows[start : start + PROGRESS_STEP])
        if progress is not None:
            progress(min(start + PROGRESS_STEP, len(rows)), len(rows))
    return inserted


async def insert_rows(db: Conn, sql: EpisodeStatements, rows: Sequence[Row]) -> int:
    """Insert ``rows`` (ids already stored are left alone); how many were new."""
    try:
        return await db.executemany(sql.insert, rows)
    except UnicodeEncodeError as exc:  # models built without validation
        raise not_utf8_error(rows) from exc


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


def duplicate_error(episode_id: str, fields: list[str], where: str) -> DuplicateEpisodeError:
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
            raise duplicate_error(row[0], fields, "appears twice in the batch")
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


class NotUtf8(bytes):
    """The bytes of a TEXT value that is not valid UTF-8 (a backend reads such values as
    this type, not ``str``, so the row checks refuse them by type)."""


def _kind(value: object) -> str:
    """How a stored value reads, for reasons: ``NULL``, ``a BLOB``, …"""
    if isinstance(value, NotUtf8):
        return "TEXT that is not valid UTF-8"
    if value is None:
        return "NULL"
    names = {int: "an INTEGER", float: "a REAL", str: "TEXT", bytes: "a BLOB"}
    return names.get(type(value), type(value).__name__)


def _expected(name: str, what: str, value: object) -> str:
    """``"name: expected what, got …"``, or ``"name: TEXT that is not valid UTF-8"``."""
    if isinstance(value, NotUtf8):
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
    if isinstance(raw, NotUtf8) or type(raw) not in (bytes, str):
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


def split_rows(
    rows: list[Any], decode: Callable[[Any], T]
) -> tuple[list[T], list[tuple[Any, str]]]:
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


def seq_episode(row: Sequence[Any]) -> tuple[int, Episode]:
    return row[0], row_episode(row)


def not_utf8_error(rows: Sequence[Row]) -> StoreError:
    """The error for a batch holding text UTF-8 cannot encode (a lone surrogate)."""
    for row in rows:
        for name, value in zip(_ROW_FIELDS, row, strict=False):
            problem = unicode_problem(value) if isinstance(value, str) else None
            if problem is not None:
                return StoreError(
                    f"episode {row[0]!r}: {name} {problem}", episode_id=row[0], field=name
                )
    return StoreError("an episode holds text that cannot be stored as UTF-8")


def quarantined_row(row: Sequence[Any]) -> QuarantinedRow:
    """A :class:`QuarantinedRow` from a ``quarantine`` table row."""
    return QuarantinedRow(int(row[0]), row[1], row[2], str(row[3]), from_us(row[4]))


def warn_quarantined(rows: Sequence[QuarantinedRow]) -> None:
    """One warning per skipped row (with no logging set up, Python prints it on stderr)."""
    for row in rows:
        logger.warning("skipped quarantined %s", row.describe())


def _check_text_part(value: object, part: str) -> None:
    """A scope component must be text UTF-8 can hold (no lone surrogate)."""
    problem = unicode_problem(value) if isinstance(value, str) else None
    if problem is not None:
        raise MemoryScopeError(f"scope component '{part}' {problem}", part=part)


def key_of_partition(partition: Partition) -> str:
    """The partition's key; a component UTF-8 cannot hold raises :class:`MemoryScopeError`."""
    _check_text_part(partition.user, "user")
    _check_text_part(partition.agent, "agent")
    return partition.key


def scope_filter(
    user: str, session: str | None, agent: str | None, mark: str = "?"
) -> tuple[str, tuple[str, ...]]:
    """SQL condition and parameters for one widening read (equality or half-open range);
    ``mark`` is the backend's parameter placeholder."""
    for part, value in (("user", user), ("session", session), ("agent", agent)):
        _check_text_part(value, part)
    if session is not None and agent is not None:
        return f"scope_key = {mark}", (scope_key(user, session, agent),)
    if agent is not None:
        return f"partition_key = {mark}", (partition_key(user, agent),)
    prefix = user_prefix(user)
    if session is not None:
        prefix += f"session/{escape_component(session, 'session')}/"
    condition = f"scope_key >= {mark} AND scope_key < {mark}"
    return condition, (prefix, prefix_upper_bound(prefix))


def check_scope(episode: Episode, user: str, session: str, agent: str) -> None:
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


def check_limit(limit: int | None, *, optional: bool = False) -> None:
    """A limit is an int >= 1 (``None`` allowed where ``optional``: no limit)."""
    if limit is None and optional:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1 (got {limit!r})")


def parse_partition_key(key: str) -> Partition:
    """Inverse of :func:`~stargraph_mem.stores.scope.partition_key` (components are quoted)."""
    _, _, user, _, agent, _ = key.split("/")
    return Partition(unquote(user, errors="strict"), unquote(agent, errors="strict"))


def partition_of(key: object) -> Partition | None:
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


class Discarded(Exception):
    """Raised inside :meth:`SQLiteMemoryStore.writing` to roll its transaction back."""


class EpisodeWriter:
    """Writes chunks of episodes inside one open write transaction (see
    :meth:`SQLiteMemoryStore.writing`); memory stays bounded by the chunk, not the stream.

    Every chunk is inserted with one ``executemany``; the ``episodes`` table's unique id
    index finds repeats, in the store and earlier in the stream alike, so the stream keeps
    no set of ids. For each episode written it keeps its ``seq`` and the caller's tag (16
    bytes), to name where a conflicting id first appeared.
    """

    def __init__(self, db: Conn, sql: EpisodeStatements, start_seq: int) -> None:
        self._db = db
        self._sql = sql
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
                conflicts.append(stream_duplicate(row[0], fields, tag, row_tags[at], earlier=True))
        if not rows:
            return conflicts
        db, sql = self._db, self._sql
        inserted = await insert_rows(db, sql, rows)
        if inserted == len(rows):
            # every row is new; seqs grow with each insert, so the n-th row has the n-th seq
            seqs = [row[0] for row in await db.fetch(sql.new_seqs, (self._last,))]
            pairs = list(zip(seqs, row_tags, strict=True))
        else:
            pairs = []
            stored = await db.fetch(sql.stored_seq_in, (sql.ids(list(index)),))
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
                        stream_duplicate(old[0], fields, row_tags[at], first, earlier=earlier)
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


def stream_duplicate(
    episode_id: str, fields: list[str], tag: int, first_tag: int | None, *, earlier: bool
) -> DuplicateEpisodeError:
    """A conflict of :meth:`EpisodeWriter.write`, with the tags in its context."""
    where = "appears twice in the batch" if earlier else "already exists"
    error = duplicate_error(episode_id, fields, where)
    error.context.update(tag=tag, first_tag=first_tag)
    return error


async def quarantine(
    db: Conn,
    sql: EpisodeStatements,
    bad: list[tuple[Any, str]],
    at_us: int,
    note: Callable[[list[QuarantinedRow], int], Awaitable[bool]],
    unreadable: type[Exception],
) -> list[QuarantinedRow]:
    """The quarantine entries of undecodable rows ``(row, reason)``, in the order given:
    those noted before as they were, the others noted now at ``at_us`` through ``note``
    (``recorded=False`` when it could not write them). A quarantine table that cannot be
    read (``unreadable``, the backend's error) counts as holding nothing."""
    if not bad:
        return []
    seqs = sql.ids([row[0] for row, _ in bad])
    try:
        noted = {
            entry.seq: entry
            for entry in map(quarantined_row, await db.fetch(sql.noted_in, (seqs,)))
        }
    except unreadable:
        noted = {}
    keys = {row[0]: row[1] for row in await db.fetch(sql.row_keys_in, (seqs,))}
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
    if fresh and not await note(fresh, at_us):
        fresh = [replace(entry, recorded=False) for entry in fresh]
    noted.update((entry.seq, entry) for entry in fresh)
    return [noted[row[0]] for row, _ in bad]


async def read_recent(
    db: Conn, sql: str, params: tuple[Any, ...], limit: int, mark: str
) -> tuple[list[tuple[int, Episode]], list[tuple[Any, str]]]:
    """Run a ``recent`` query (last parameter: its limit) and, while undecodable rows took
    places, read further (``OFFSET``) until ``limit`` good episodes or no more rows:
    ``(seq, episode)`` pairs and ``(row, reason)`` for the rows that do not decode."""
    rows = await db.fetch(sql, params)
    found, bad = split_rows(rows, seq_episode)
    offset, wanted = len(rows), limit
    while len(rows) == wanted and len(found) < limit:
        wanted = limit - len(found)
        rows = await db.fetch(f"{sql} OFFSET {mark}", (*params[:-1], wanted, offset))
        good, worse = split_rows(rows, seq_episode)
        found += good
        bad += worse
        offset += len(rows)
    return found, bad


async def read_since(
    read: Callable[[int, int | None], Awaitable[CheckedRead]], after_seq: int, limit: int | None
) -> list[EpisodeRecord]:
    """The first ``limit`` decodable episodes after ``after_seq`` through ``read(after,
    limit)`` (a ``since_checked``), reading past quarantined rows and logging them."""
    check_limit(limit, optional=True)
    records: list[EpisodeRecord] = []
    after = after_seq
    while True:
        want = None if limit is None else limit - len(records)
        checked = await read(after, want)
        records += checked.records
        warn_quarantined(checked.quarantined)
        if not checked.quarantined or want is None or checked.scanned < want:
            return records
        after = checked.last_seq(after)


Split = list[tuple[list[EpisodeRecord], list[tuple[Any, str]]]]
"""Per read: the records that decode and ``(row, reason)`` for those that do not."""


def group_reads(rows: Sequence[Sequence[Any]], count: int) -> tuple[Split, list[tuple[Any, str]]]:
    """Rows of ``count`` reads (each row: the read's index, then the read columns) decoded
    per read, and every undecodable row in order (to quarantine at once)."""
    found: list[list[Any]] = [[] for _ in range(count)]
    for row in rows:
        found[row[0]].append(row[1:])
    split = [split_rows(part, row_record) for part in found]
    return split, [entry for _, worse in split for entry in worse]


def checked_reads(split: Split, noted: Sequence[QuarantinedRow]) -> list[CheckedRead]:
    """One :class:`CheckedRead` per read, its quarantine entries taken from ``noted`` (the
    entries of every read's bad rows, in order)."""
    entries = iter(noted)
    return [CheckedRead(good, [next(entries) for _ in worse]) for good, worse in split]
