"""Episode rows, backend-neutral: encoding, decoding and checking rows, scope filters, streams.

Both backends store the same ``episodes`` columns (times as UTC microseconds, metadata as
JSON bytes), so a row from SQLite or PostgreSQL decodes here the same way, and a row that
does not decode is named by the same reason. Backends hand their SQL in an
:class:`EpisodeStatements`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import lru_cache
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import orjson

from stargraph_mem.errors import (
    CorruptRowError,
    DuplicateEpisodeError,
    LimitError,
    MemoryScopeError,
    StoreError,
)
from stargraph_mem.model.base import ID_PATTERN, unicode_problem
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.limits import DEFAULT_LIMITS, KEY_BYTES, Limits, over
from stargraph_mem.model.time import TimestampRangeError, from_us, to_us
from stargraph_mem.stores.memory import EpisodeRecord, QuarantinedRow
from stargraph_mem.stores.scope import (
    Partition,
    escape_component,
    partition_key,
    prefix_upper_bound,
    scope_key,
    user_prefix,
)

__all__ = [
    "TABLE",
    "NotUtf8",
    "Row",
    "check_limit",
    "check_scope",
    "check_size",
    "dedupe_batch",
    "duplicate_error",
    "episode_row",
    "key_of_partition",
    "limit_error",
    "not_utf8_error",
    "parse_partition_key",
    "partition_of",
    "quarantined_row",
    "row_differences",
    "row_episode",
    "row_problem",
    "row_record",
    "scope_filter",
    "seq_episode",
    "split_rows",
    "stored_row",
    "warn_quarantined",
]

logger = logging.getLogger("stargraph_mem.stores.sqlite_memory")
"""Quarantine warnings keep the logger name they always had."""

TABLE: Final = "episodes"


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


def episode_row(episode: Episode, limits: Limits = DEFAULT_LIMITS) -> Row:
    """The row ``episode`` is stored as; raises on naive timestamps, unstorable metadata,
    or content, metadata or a scope key over ``limits`` (:class:`LimitError`)."""
    ts = episode.timestamp
    offset = ts.utcoffset()
    if offset is None:
        raise ValueError(f"episode {episode.id!r}: timestamp is a naive datetime")
    check_size(episode.id, "content", episode.content, limits.content_bytes, "content_bytes")
    scope, partition = _keys(episode.user, episode.session, episode.agent)
    check_size(episode.id, "scope key", scope, KEY_BYTES, "KEY_BYTES")
    try:
        metadata = orjson.dumps(episode.metadata)
    except orjson.JSONEncodeError as exc:
        raise StoreError(
            f"episode {episode.id!r}: metadata cannot be stored: {exc}", episode_id=episode.id
        ) from exc
    if len(metadata) > limits.metadata_bytes:
        raise limit_error(
            episode.id, "metadata JSON", len(metadata), limits.metadata_bytes, "metadata_bytes"
        )
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


def stored_row(record: EpisodeRecord) -> tuple[Any, ...]:
    """The whole ``episodes`` row a record read from a store was stored as (``seq``, the
    written columns, ``last_accessed_us``, ``access_count``), without the checks of
    :func:`episode_row`: the store checked it when it was written."""
    ts = record.timestamp
    offset = ts.utcoffset()
    scope, partition = _keys(record.user, record.session, record.agent)
    accessed = record.last_accessed
    return (
        record.seq,
        record.id,
        scope,
        partition,
        record.user,
        record.session,
        record.agent,
        to_us(ts),
        0 if offset is None else offset // _ONE_S,
        record.content,
        record.source_node,
        orjson.dumps(record.metadata),
        None if accessed is None else to_us(accessed),
        record.access_count,
    )


def check_size(episode_id: str, what: str, text: str, maximum: int, limit: str) -> None:
    """Raise :class:`LimitError` when ``text`` is over ``maximum`` UTF-8 bytes."""
    size = over(text, maximum)
    if size is not None:
        raise limit_error(episode_id, what, size, maximum, limit)


def limit_error(episode_id: str, what: str, size: int, maximum: int, limit: str) -> LimitError:
    """``episode 'e1': content is 2,000,000 bytes (UTF-8), over the limit of 1,048,576
    (content_bytes)``."""
    return LimitError(
        f"episode {episode_id!r}: {what} is {size:,} bytes (UTF-8), over the limit of "
        f"{maximum:,} ({limit})",
        episode_id=episode_id,
        limit=limit,
        size=size,
        maximum=maximum,
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
