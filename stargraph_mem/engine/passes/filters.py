"""Episode pre-filters run in SQLite: compiled ``select`` clauses and legacy ``when_filter``.

A compiled ``select`` is parameterised SQL from the compiler; it runs over a read-only
in-memory copy of the pass's episodes (:func:`episode_copy`, the same on every backend)
under an authorizer that allows reading the ``episodes`` table and calling a
short list of pure functions, and under a progress-handler time limit.

A legacy ``when_filter`` is raw SQL from a rule author, so it gets more than that:

- **Shape.** The text must be one SQL expression: no ``;``, no comments, no unterminated
  quotes, parentheses balanced and never closing one it did not open, at most
  :data:`MAX_FILTER_CHARS` characters. It is wrapped as ``SELECT seq FROM episodes WHERE
  (…)``, so it cannot turn into another statement or change what the query returns.
- **Isolation.** It runs in a private in-memory database holding only the window's rows,
  with ``query_only`` on and the authorizer above (other tables, ``PRAGMA``, ``ATTACH``,
  writes, recursive CTEs and every function off the list are refused).
- **Size.** ``sqlite3.Connection.setlimit`` caps every string or blob it may build
  (:data:`MAX_VALUE_BYTES`), the SQL length, expression depth, function arguments,
  compound ``SELECT`` terms, result columns, ``LIKE`` pattern length and the size of the
  compiled program, so no single value or statement can grow without bound.
- **Work.** A deterministic budget of :data:`WORK_BUDGET` steps: the progress handler
  counts SQLite VM instructions, and the functions whose cost grows with their arguments
  rather than with the instruction count (``replace``, ``instr``, two-argument ``trim``
  family, ``like``, ``glob``) are replaced by versions that charge their scanning work to
  the same budget before doing it (and do it in linear time where SQLite's does not).
- **Time.** The wall-clock limit :data:`TIME_LIMIT_S`, checked by the progress handler
  and by every charged function call, as the backstop.

Every refusal is a :class:`~stargraph_mem.errors.ConsolidationRuleError` that names the
rule and says why (``context``: ``rule_id``, ``reason``, ``detail``).
"""

from __future__ import annotations

import hashlib
import sqlite3
import string
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from stargraph_mem.compiler.select_sql import NORMAL_FORM_FUNCTION, TIMESTAMP_FUNCTION
from stargraph_mem.errors import ConsolidationRuleError
from stargraph_mem.ir.reference import normal_form_of, timestamp_micros
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.repositories.episode_rows import stored_row
from stargraph_mem.stores.scope import Partition, scope_key
from stargraph_mem.stores.sqlite_memory import EPISODES_TABLE

ALLOWED_FUNCTIONS = frozenset(
    {
        "json_extract",
        "json_type",
        "json_valid",
        "json_array_length",
        "instr",
        "substr",
        "substring",
        "length",
        "lower",
        "upper",
        "trim",
        "ltrim",
        "rtrim",
        "abs",
        "coalesce",
        "ifnull",
        "nullif",
        "min",
        "max",
        "round",
        "cast",
        "like",
        "glob",
        "replace",
        "typeof",
        "datetime",
        "julianday",
        "strftime",
        "date",
        "time",
        "unixepoch",
    }
)
"""Functions a ``select`` or ``when_filter`` may call (the authorizer refuses the rest)."""

TIME_LIMIT_S = 2.0
"""Wall-clock limit of one guarded query, in seconds: a ``select`` or one ``when_filter``
run over one window (checked by the progress handler, and by every charged function call
of a ``when_filter``)."""

WORK_BUDGET = 100_000_000
"""Steps one ``when_filter`` run over one window may take before it is interrupted.

A step is one SQLite VM instruction; a charged function adds its scanning work (see
:data:`CHARS_PER_STEP`, :data:`MATCH_UNITS_PER_STEP`). The count does not depend on the
machine, so a filter refused for work is refused everywhere. It is about 1.5 s of VM work
on the machine it was sized on; an ordinary filter (a few comparisons, ``json_extract``,
``lower``, ``LIKE``) over the largest window a pass reads, 50,000 episodes, uses 0.2-1 %."""

PROGRESS_EVERY = 100
"""VM instructions between two calls of the ``when_filter`` progress handler. Divided
further when :data:`MAX_VALUE_BYTES` is raised for a window with large rows, so the
instructions between two checks (each bounded by the value size) stay cheap."""

MAX_VALUE_BYTES = 256 * 1024
"""``SQLITE_LIMIT_LENGTH`` of a ``when_filter``: the largest string or blob (and record)
it may build, in bytes. Raised to the largest value stored in the window's rows, which the
filter must still be able to read."""

MAX_FILTER_CHARS = 4000
"""Longest ``when_filter`` text accepted, in characters (``SQLITE_LIMIT_SQL_LENGTH`` is
set to hold that many 4-byte characters plus the wrapper)."""

MAX_EXPR_DEPTH = 100
"""``SQLITE_LIMIT_EXPR_DEPTH`` of a ``when_filter``: how deeply expressions may nest."""

MAX_FUNCTION_ARGS = 16
"""``SQLITE_LIMIT_FUNCTION_ARG`` of a ``when_filter``: arguments of one function call."""

MAX_COMPOUND_SELECT = 8
"""``SQLITE_LIMIT_COMPOUND_SELECT`` of a ``when_filter``: terms of a ``UNION`` chain."""

MAX_COLUMNS = 64
"""``SQLITE_LIMIT_COLUMN`` of a ``when_filter``: columns of a subquery's result, its
``ORDER BY`` or ``GROUP BY``."""

MAX_LIKE_PATTERN = 1000
"""``SQLITE_LIMIT_LIKE_PATTERN_LENGTH`` of a ``when_filter``: bytes of a LIKE/GLOB pattern."""

MAX_PROGRAM_OPS = 10_000
"""``SQLITE_LIMIT_VDBE_OP`` of a ``when_filter``: instructions of the compiled statement
(an ordinary filter compiles to a few dozen; CTEs referenced many times are copied)."""

CHARS_PER_STEP = 16
"""Characters a charged function may scan or write per step of :data:`WORK_BUDGET`."""

MATCH_UNITS_PER_STEP = 8
"""For ``like`` and ``glob``, whose worst case is the subject's length times the longest
piece of the pattern between two wildcards: units of that product per step of
:data:`WORK_BUDGET`."""

_PER_MATCH = 16
"""Units charged per occurrence replaced by ``replace`` (each costs more than a character)."""

_SHORT_CHARSET = 64
"""Distinct characters up to which a two-argument ``trim`` uses ``str.strip``."""

_PER_LOOP_CHAR = 48
"""Units charged per character of a ``trim`` over a larger set (a Python loop)."""

_WRAPPER = "SELECT seq FROM episodes WHERE (\n{}\n)"
"""A ``when_filter`` is wrapped on lines of its own: its text can neither comment out the
closing parenthesis nor reach beyond it."""


Authorizer = Callable[[int, str | None, str | None, str | None, str | None], int]


def _authorizer_for(
    tables: frozenset[str], functions: frozenset[str], *, table_functions: bool = False
) -> Authorizer:
    """An authorizer allowing SELECT, reads of ``tables`` and calls of ``functions`` only.

    ``table_functions`` also lets SQLite read the schema, which it does (asking as if to
    update it) to set up ``json_each`` on a fresh connection; the connection is read-only
    (mode=ro, query_only), so nothing can be written."""

    def authorize(
        action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
    ) -> int:
        if action == sqlite3.SQLITE_SELECT:
            allowed = True
        elif action == sqlite3.SQLITE_FUNCTION:
            allowed = (arg2 or "").lower() in functions
        elif table_functions and arg1 == "sqlite_master" and db == "main":
            allowed = action in (sqlite3.SQLITE_READ, sqlite3.SQLITE_UPDATE)
        elif action == sqlite3.SQLITE_READ:
            allowed = arg1 in tables and db in (None, "main")
        else:
            allowed = False
        return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY

    return authorize


_authorizer = _authorizer_for(frozenset({"episodes"}), ALLOWED_FUNCTIONS)
"""A legacy ``when_filter`` reads the episodes table and calls allowed functions only."""


_ACTIONS = {
    getattr(sqlite3, name): name.removeprefix("SQLITE_").replace("_", " ")
    for name in (
        "SQLITE_ALTER_TABLE",
        "SQLITE_ANALYZE",
        "SQLITE_ATTACH",
        "SQLITE_CREATE_INDEX",
        "SQLITE_CREATE_TABLE",
        "SQLITE_CREATE_TEMP_INDEX",
        "SQLITE_CREATE_TEMP_TABLE",
        "SQLITE_CREATE_TEMP_TRIGGER",
        "SQLITE_CREATE_TEMP_VIEW",
        "SQLITE_CREATE_TRIGGER",
        "SQLITE_CREATE_VIEW",
        "SQLITE_CREATE_VTABLE",
        "SQLITE_DELETE",
        "SQLITE_DETACH",
        "SQLITE_DROP_INDEX",
        "SQLITE_DROP_TABLE",
        "SQLITE_DROP_TEMP_INDEX",
        "SQLITE_DROP_TEMP_TABLE",
        "SQLITE_DROP_TEMP_TRIGGER",
        "SQLITE_DROP_TEMP_VIEW",
        "SQLITE_DROP_TRIGGER",
        "SQLITE_DROP_VIEW",
        "SQLITE_DROP_VTABLE",
        "SQLITE_INSERT",
        "SQLITE_PRAGMA",
        "SQLITE_REINDEX",
        "SQLITE_SAVEPOINT",
        "SQLITE_TRANSACTION",
        "SQLITE_UPDATE",
    )
    if hasattr(sqlite3, name)
}


def _describe(action: int, arg1: str | None, arg2: str | None) -> str:
    """What a denied authorizer request was, in words."""
    if action == sqlite3.SQLITE_READ:
        return f"reading table '{arg1}'"
    if action == sqlite3.SQLITE_FUNCTION:
        return f"calling {arg2}()"
    if action == getattr(sqlite3, "SQLITE_RECURSIVE", 33):
        return "a recursive CTE"
    if action == sqlite3.SQLITE_PRAGMA:
        return f"PRAGMA {arg1}"
    if arg1 == "sqlite_master":
        # what SQLite asks before it sets up a table-valued function (pragma_*, json_each)
        return "a table-valued function"
    name = _ACTIONS.get(action, f"action {action}")
    return f"{name} {arg1}" if arg1 else name


_LEGACY_TABLE = (
    "CREATE TABLE episodes (seq INTEGER PRIMARY KEY, id TEXT, content TEXT, source_node TEXT,"
    " user TEXT, session TEXT, agent TEXT, scope_key TEXT, partition_key TEXT, ts_us INTEGER,"
    " metadata TEXT, last_accessed_us INTEGER, access_count INTEGER, timestamp TEXT)"
)
"""The row view a legacy ``when_filter`` reads. ``timestamp`` is the specification's column:
the episode time in UTC as ISO 8601 text with microseconds and ``Z``
(``2026-01-01T09:30:00.000000Z``), fixed width, so text comparison is time order."""


def _refuse(rule_id: str, reason: str, detail: str) -> ConsolidationRuleError:
    return ConsolidationRuleError(
        f"rule '{rule_id}': {detail}", rule_id=rule_id, reason=reason, detail=detail
    )


def _shape_problem(text: str) -> tuple[str, str] | None:
    """``(reason, what is wrong)`` when ``text`` is not shaped like one SQL expression.

    Scans like SQLite's tokenizer as far as it matters here: quoted strings and
    identifiers (``'…'``, ``"…"``, ``[…]``, `` `…` ``), comments, ``;`` and parentheses.
    """
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            end = i + 1
            while True:
                end = text.find(c, end)
                if end < 0:
                    return "quote", f"has an unterminated {c}-quoted string or identifier"
                if text.startswith(c, end + 1):
                    end += 2
                    continue
                break
            i = end + 1
            continue
        if c == "[":
            end = text.find("]", i + 1)
            if end < 0:
                return "quote", "has an unterminated [identifier]"
            i = end + 1
            continue
        if text.startswith("--", i) or text.startswith("/*", i):
            return "comment", "must not contain SQL comments"
        if c == ";":
            return "statement", "must be one SQL expression: ';' is not allowed"
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return "parentheses", "has a ')' that closes a parenthesis it did not open"
        i += 1
    if depth:
        return "parentheses", "has a '(' that is never closed"
    return None


def check_when_filter(when_filter: str, *, rule_id: str) -> None:
    """Refuse a ``when_filter`` that is not one SQL expression the sandbox would accept.

    Checks the text's shape, then compiles it (without running it) against an empty
    episodes table under the authorizer and the limits. Raises
    :class:`ConsolidationRuleError` naming ``rule_id``; returns ``None`` when it passes.
    """
    _check_text(when_filter, rule_id)
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(_LEGACY_TABLE)
        _Sandbox(conn, rule_id, MAX_VALUE_BYTES, 0).compile(_WRAPPER.format(when_filter))
    finally:
        conn.close()


def _check_text(when_filter: str, rule_id: str) -> None:
    if not isinstance(when_filter, str):
        raise _refuse(rule_id, "type", "when_filter must be a string")
    if "\x00" in when_filter:
        raise _refuse(rule_id, "nul", "when_filter contains a NUL character")
    if not when_filter.strip():
        raise _refuse(rule_id, "empty", "when_filter is empty")
    if len(when_filter) > MAX_FILTER_CHARS:
        raise _refuse(
            rule_id,
            "too-long",
            f"when_filter is {len(when_filter):,} characters long; "
            f"the limit is {MAX_FILTER_CHARS:,}",
        )
    problem = _shape_problem(when_filter)
    if problem is not None:
        reason, what = problem
        raise _refuse(rule_id, reason, f"when_filter {what}")


def when_filter_seqs(
    records: Sequence[EpisodeRecord],
    partition: Partition,
    when_filter: str,
    *,
    rule_id: str,
) -> set[int]:
    """Seqs of ``records`` (one partition's new episodes) that satisfy a legacy filter.

    The filter runs in a private in-memory database holding only these rows, so it
    cannot see other partitions, the fact store or anything else in the file; it runs
    under the authorizer, the size limits, the work budget and the time limit.
    """
    _check_text(when_filter, rule_id)
    scopes: dict[tuple[str, str, str], str] = {}
    rows = [_legacy_row(r, partition.key, scopes) for r in records]
    key = (when_filter, hashlib.blake2b(orjson.dumps(rows)).digest())
    with _LAST_LOCK:
        last = _LAST.get(key)
    if last is not None:
        return set(last)
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(_LEGACY_TABLE)
        conn.executemany("INSERT INTO episodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        sandbox = _Sandbox(conn, rule_id, _value_limit(rows), len(rows))
        seqs = sandbox.run(_WRAPPER.format(when_filter))
    finally:
        conn.close()
    with _LAST_LOCK:
        _LAST.clear()
        _LAST[key] = frozenset(seqs)
    return seqs


_LAST: dict[tuple[str, bytes], frozenset[int]] = {}
"""The last ``when_filter`` result, keyed by the filter and a digest of the window's rows:
a pass applies the filter to each rule of the pack, usually over the same window, and the
work (and its budget) is then spent once rather than once per rule."""
_LAST_LOCK = threading.Lock()


def _value_limit(rows: Sequence[tuple[Any, ...]]) -> int:
    """:data:`MAX_VALUE_BYTES`, or more when a stored value is longer (it must stay readable)."""
    limit = MAX_VALUE_BYTES
    for row in rows:
        for value in row:
            # a character is at most 4 bytes: encode only what might be over the limit
            if isinstance(value, str) and len(value) * 4 > limit:
                limit = max(limit, len(value.encode()))
    return limit


def _legacy_row(
    r: EpisodeRecord, partition_key: str, scopes: dict[tuple[str, str, str], str]
) -> tuple[Any, ...]:
    accessed = to_us(r.last_accessed) if r.last_accessed is not None else None
    scope = (r.user, r.session, r.agent)
    key = scopes.get(scope)
    if key is None:
        key = scopes[scope] = scope_key(*scope)
    return (
        r.seq,
        r.id,
        r.content,
        r.source_node,
        r.user,
        r.session,
        r.agent,
        key,
        partition_key,
        to_us(r.timestamp),
        orjson.dumps(r.metadata).decode(),
        accessed,
        r.access_count,
        utc_text(r.timestamp),
    )


def utc_text(ts: datetime) -> str:
    """``ts`` in UTC as fixed-width ISO 8601 text (``YYYY-MM-DDTHH:MM:SS.ffffffZ``)."""
    return ts.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


class _Stop(Exception):
    """Raised inside a charged function to abort the statement (reason kept on the sandbox)."""


def _text_length(value: object) -> int:
    """Length of ``value`` as SQLite would see it as text (an estimate for numbers)."""
    if value is None:
        return 0
    if isinstance(value, str | bytes):
        return len(value)
    return len(str(value))


class _Sandbox:
    """One ``when_filter`` run on a private connection: limits, authorizer, budget, clock."""

    def __init__(self, conn: sqlite3.Connection, rule_id: str, value_limit: int, rows: int):
        self.conn = conn
        self.rule_id = rule_id
        self.value_limit = value_limit
        self.rows = rows
        self.every = max(1, PROGRESS_EVERY * MAX_VALUE_BYTES // value_limit)
        self.used = 0
        self.deadline = float("inf")
        self.time_limit = TIME_LIMIT_S
        self.denied: list[str] = []
        self.stop: tuple[str, str] | None = None
        self.native: sqlite3.Connection | None = None
        self._arm()

    # --- setup -------------------------------------------------------------------------

    def _arm(self) -> None:
        conn = self.conn
        conn.execute("PRAGMA query_only = ON")
        _limit(conn, self.value_limit)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_FILTER_CHARS * 4 + 64)
        conn.setlimit(sqlite3.SQLITE_LIMIT_EXPR_DEPTH, MAX_EXPR_DEPTH)
        conn.setlimit(sqlite3.SQLITE_LIMIT_FUNCTION_ARG, MAX_FUNCTION_ARGS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, MAX_COMPOUND_SELECT)
        conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 1)
        if hasattr(sqlite3, "SQLITE_LIMIT_VDBE_OP"):
            conn.setlimit(sqlite3.SQLITE_LIMIT_VDBE_OP, MAX_PROGRAM_OPS)
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._progress, self.every)
        for name in ("trim", "ltrim", "rtrim"):
            conn.create_function(name, 2, self._trim(name), deterministic=True)
        conn.create_function("replace", 3, self._replace, deterministic=True)
        conn.create_function("instr", 2, self._instr, deterministic=True)
        conn.create_function("like", 2, self._matcher("like"), deterministic=True)
        conn.create_function("like", 3, self._matcher("like"), deterministic=True)
        conn.create_function("glob", 2, self._matcher("glob"), deterministic=True)

    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
    ) -> int:
        verdict = _authorizer(action, arg1, arg2, db, src)
        if verdict != sqlite3.SQLITE_OK:
            self.denied.append(_describe(action, arg1, arg2))
        return verdict

    # --- running -----------------------------------------------------------------------

    def compile(self, sql: str) -> None:
        """Prepare ``sql`` (through ``EXPLAIN``, so nothing runs) and refuse what fails."""
        self.deadline = time.monotonic() + self.time_limit
        try:
            self.conn.execute("EXPLAIN " + sql).fetchall()
        except (sqlite3.Error, MemoryError) as exc:
            raise self._error(exc) from exc

    def run(self, sql: str) -> set[int]:
        """Run ``sql`` (whose one column is ``seq``) and return its values."""
        self.deadline = time.monotonic() + self.time_limit
        try:
            rows = self.conn.execute(sql).fetchall()
        except (sqlite3.Error, MemoryError) as exc:
            raise self._error(exc) from exc
        finally:
            if self.native is not None:
                self.native.close()
        seqs: set[int] = set()
        for row in rows:
            value = row[0] if len(row) == 1 else None
            if type(value) is not int:
                raise _refuse(self.rule_id, "result", "when_filter changed what the query returns")
            seqs.add(value)
        return seqs

    def _error(self, exc: BaseException) -> ConsolidationRuleError:
        rule_id = self.rule_id
        if self.stop is not None:
            return _refuse(rule_id, *self.stop)
        if self.denied:
            return _refuse(
                rule_id,
                "not-allowed",
                f"when_filter refused: {self.denied[0]} is not allowed (a when_filter may "
                "read only the episodes table and call only pure built-in functions)",
            )
        if isinstance(exc, MemoryError):
            return _refuse(
                rule_id,
                "too-large",
                "when_filter refused: it compiles to a program over the limit of "
                f"{MAX_PROGRAM_OPS:,} instructions, or ran out of memory",
            )
        text = str(exc) or type(exc).__name__
        if "user-defined function raised exception" in text:
            return _refuse(
                rule_id,
                "function",
                "when_filter failed: a function was given arguments it cannot take "
                "(e.g. text that is not valid UTF-8)",
            )
        if "string or blob too big" in text:
            return _refuse(
                rule_id,
                "too-big",
                "when_filter refused: it built a value longer than the limit of "
                f"{self.value_limit:,} bytes",
            )
        if isinstance(exc, sqlite3.DataError) and "too large" in text:
            return _refuse(
                rule_id, "too-long", f"when_filter refused: its SQL is too long ({text})"
            )
        if "SQL variables" in text or "bindings" in text:
            return _refuse(
                rule_id,
                "parameter",
                "when_filter must not contain bind parameters (?, :name, @name, $name)",
            )
        limits = (
            "too large",
            "too many",
            "too complex",
            "maximum depth",
            "stack overflow",
        )
        if any(fragment in text for fragment in limits):
            return _refuse(rule_id, "limit", f"when_filter refused: over a limit ({text})")
        return _refuse(rule_id, "invalid", f"when_filter is not a valid SQL expression: {text}")

    def _halt(self, reason: str, detail: str) -> None:
        if self.stop is None:
            self.stop = (reason, detail)

    def _over(self) -> bool:
        """Whether the work budget or the time limit is spent (recording which)."""
        if self.used > WORK_BUDGET:
            self._halt(
                "budget",
                f"when_filter interrupted: it used up its work budget of {WORK_BUDGET:,} "
                f"steps over {self.rows:,} episodes",
            )
            return True
        if time.monotonic() > self.deadline:
            self._halt(
                "time",
                f"when_filter interrupted: it ran past the time limit of {self.time_limit:g} s "
                f"over {self.rows:,} episodes",
            )
            return True
        return False

    def _progress(self) -> int:
        self.used += self.every
        if self.used > WORK_BUDGET or time.monotonic() > self.deadline:
            return 1 if self._over() else 0
        return 0

    def _charge(self, units: int) -> None:
        """Add ``units`` of scanning (see :data:`CHARS_PER_STEP`) and stop if spent."""
        self.used += 1 + units // CHARS_PER_STEP
        if self._over():
            raise _Stop

    def _too_big(self, name: str, chars: int) -> None:
        if chars > self.value_limit:
            self._halt(
                "too-big",
                f"when_filter refused: {name}() would build a value of {chars:,} characters, "
                f"over the limit of {self.value_limit:,} bytes",
            )
            raise _Stop

    # --- charged functions -------------------------------------------------------------

    def _call_native(self, name: str, args: tuple[Any, ...]) -> Any:
        """SQLite's own ``name(*args)``, on a side connection under the same size limits."""
        if self.native is None:
            self.native = sqlite3.connect(":memory:")
            _limit(self.native, self.value_limit)
        marks = ",".join("?" * len(args))
        try:
            return self.native.execute(f"SELECT {name}({marks})", args).fetchone()[0]
        except sqlite3.Error as exc:
            text = str(exc)
            if "too big" in text:
                self._halt(
                    "too-big",
                    f"when_filter refused: {name}() built a value longer than the limit of "
                    f"{self.value_limit:,} bytes",
                )
            else:
                self._halt("limit", f"when_filter refused: {name}() failed: {text}")
            raise _Stop from exc

    def _replace(self, x: Any, y: Any, z: Any) -> Any:
        if not (isinstance(x, str) and isinstance(y, str) and isinstance(z, str)):
            # blobs and numbers: SQLite's own, charged for its worst case (the pattern
            # compared at every position)
            self._charge(_text_length(x) * (1 + _text_length(y)) + _text_length(z))
            return self._call_native("replace", (x, y, z))
        self._charge(len(x) + len(y))
        if not y or y[0] == "\x00":
            return x  # SQLite sees an empty pattern (it tests the first byte)
        count = x.count(y)
        size = len(x) + count * (len(z) - len(y))
        self._too_big("replace", size)
        self._charge(size + _PER_MATCH * count)
        return x.replace(y, z)

    def _instr(self, haystack: Any, needle: Any) -> Any:
        if isinstance(haystack, str) and isinstance(needle, str):
            self._charge(len(haystack) + len(needle))
            return haystack.find(needle) + 1
        self._charge(_text_length(haystack) * (1 + _text_length(needle)))
        return self._call_native("instr", (haystack, needle))

    def _trim(self, name: str) -> Callable[[Any, Any], Any]:
        def trim(x: Any, chars: Any) -> Any:
            if not (isinstance(x, str) and isinstance(chars, str)):
                self._charge(_text_length(x) * (1 + _text_length(chars)))
                return self._call_native(name, (x, chars))
            drop = frozenset(chars.partition("\x00")[0])  # SQLite reads the set up to a NUL
            if len(drop) <= _SHORT_CHARSET:
                # str.strip compares each character with every one of the set
                self._charge(len(chars) + len(x) * (1 + len(drop) // 8))
                kept = "".join(drop)
                if name == "ltrim":
                    return x.lstrip(kept)
                return x.rstrip(kept) if name == "rtrim" else x.strip(kept)
            self._charge(len(chars) + _PER_LOOP_CHAR * len(x))
            # a large set: one set lookup per character
            start, end = 0, len(x)
            if name != "rtrim":
                while start < end and x[start] in drop:
                    start += 1
            if name != "ltrim":
                while end > start and x[end - 1] in drop:
                    end -= 1
            return x[start:end]

        return trim

    def _matcher(self, name: str) -> Callable[..., Any]:
        glob = name == "glob"
        wildcard, special = ("*", "?[\x00") if glob else ("%", "_\x00")

        def match(pattern: Any, subject: Any, *escape: Any) -> Any:
            if (
                isinstance(pattern, str)
                and isinstance(subject, str)
                and not escape
                and not any(c in pattern for c in special)
                and "\x00" not in subject
            ):
                # only the many-character wildcard: matched piece by piece in linear time
                if len(pattern) * 4 > MAX_LIKE_PATTERN and len(pattern.encode()) > MAX_LIKE_PATTERN:
                    self._halt("limit", f"when_filter refused: {name}() pattern too complex")
                    raise _Stop
                self._charge(2 * (len(subject) + len(pattern)))
                if not glob:
                    pattern, subject = (
                        pattern.translate(_ASCII_FOLD),
                        subject.translate(_ASCII_FOLD),
                    )
                return int(_pieces_match(pattern.split(wildcard), subject))
            if isinstance(pattern, str) and not escape:
                # a failed match of the pattern's piece after a wildcard is retried at
                # every position of the subject (and no further back)
                piece = max(len(p) for p in pattern.split(wildcard))
            else:
                piece = _text_length(pattern)
            work = (_text_length(subject) + 1) * (piece + 1)
            self.used += work // MATCH_UNITS_PER_STEP
            self._charge(_text_length(subject) + _text_length(pattern))
            return self._call_native(name, (pattern, subject, *escape))

        return match


_ASCII_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
"""LIKE folds the case of ASCII letters only."""


def _pieces_match(pieces: list[str], subject: str) -> bool:
    """Whether ``subject`` is ``pieces`` joined by any runs of characters."""
    if len(pieces) == 1:
        return subject == pieces[0]
    first, last = pieces[0], pieces[-1]
    end = len(subject) - len(last)
    if end < len(first) or not subject.startswith(first) or not subject.endswith(last):
        return False
    at = len(first)
    for piece in pieces[1:-1]:
        found = subject.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def _limit(conn: sqlite3.Connection, value_limit: int) -> None:
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_limit)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN)


def _guarded(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any],
    rule_id: str,
    what: str,
    *,
    authorizer: Authorizer = _authorizer,
) -> set[int]:
    """Run ``sql`` under an authorizer and the time limit; return the first column."""
    conn.set_authorizer(authorizer)
    deadline = time.monotonic() + TIME_LIMIT_S
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        rows = conn.execute(sql, tuple(params)).fetchall()
    except sqlite3.Error as exc:
        raise ConsolidationRuleError(
            f"rule '{rule_id}': {what} refused or failed: {exc}", rule_id=rule_id
        ) from exc
    return {int(r[0]) for r in rows}


SELECT_FUNCTIONS = frozenset(
    {
        "json_extract",
        "json_type",
        "json_valid",
        "json_array_length",
        "instr",
        "substr",
        "length",
        "coalesce",
        "typeof",
        TIMESTAMP_FUNCTION,
        NORMAL_FORM_FUNCTION,
    }
)
"""Functions the ``select`` compiler emits; a ``select`` may call nothing else."""

SELECT_TABLES = frozenset({"episodes", "json_each"})
"""Tables a ``select`` reads: the episodes, and ``json_each`` for ``contains`` on lists."""


_select_authorizer = _authorizer_for(SELECT_TABLES, SELECT_FUNCTIONS, table_functions=True)
"""Compiled ``select`` SQL is parameterised, yet it too reads only what it needs."""


_SELECT_SQL: Final = (
    # rows whose metadata is not JSON (quarantined by the pass's read) never reach the
    # clause's json_extract, which would fail the whole query
    "WITH readable AS MATERIALIZED (SELECT * FROM episodes WHERE partition_key = ? "
    "AND seq > ? AND seq <= ? AND json_valid(CAST(metadata AS TEXT))) "
    "SELECT seq FROM readable WHERE ({where_sql})"
)


def episode_copy(records: Sequence[EpisodeRecord]) -> sqlite3.Connection:
    """A private in-memory SQLite copy of ``records`` (stored as the SQLite episode
    repository stores them), read-only once filled: what ``select`` clauses run over, so
    a clause means the same on every backend. Close it when done."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        conn.execute(_COPY_TABLE)
        conn.executemany(_COPY_EPISODE, map(stored_row, records))
        conn.execute("PRAGMA query_only = ON")
        conn.create_function(TIMESTAMP_FUNCTION, 1, timestamp_micros, deterministic=True)
        conn.create_function(NORMAL_FORM_FUNCTION, 1, normal_form_of, deterministic=True)
    except BaseException:
        conn.close()
        raise
    return conn


def select_seqs_in(
    records: Sequence[EpisodeRecord],
    partition: Partition,
    after_seq: int,
    upto_seq: int,
    where_sql: str,
    params: Sequence[Any],
    *,
    rule_id: str,
) -> set[int]:
    """Seqs among ``records`` matching a compiled ``select`` clause (parameterised SQL
    from the compiler), over a copy made for this one call (:func:`episode_copy`)."""
    conn = episode_copy([r for r in records if after_seq < r.seq <= upto_seq])
    try:
        return select_seqs_on(conn, partition, after_seq, upto_seq, where_sql, params, rule_id)
    finally:
        conn.close()


_COPY_TABLE: Final = EPISODES_TABLE.replace(" AUTOINCREMENT", "").replace(" UNIQUE", "")
"""The stored episodes table, its columns and types as stored, without what only keeps
writes in order (the copy is filled once, from rows already unique)."""
_COPY_EPISODE: Final = (
    "INSERT INTO episodes (seq, id, scope_key, partition_key, user, session, agent, ts_us, "
    "tz_offset_s, content, source_node, metadata, last_accessed_us, access_count) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def select_seqs_on(
    conn: sqlite3.Connection,
    partition: Partition,
    after_seq: int,
    upto_seq: int,
    where_sql: str,
    params: Sequence[Any],
    rule_id: str,
) -> set[int]:
    """Run a compiled ``select`` on an :func:`episode_copy` under its authorizer."""
    return _guarded(
        conn,
        _SELECT_SQL.format(where_sql=where_sql),
        (partition.key, after_seq, upto_seq, *params),
        rule_id,
        "select",
        authorizer=_select_authorizer,
    )
