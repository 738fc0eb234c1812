"""Hostile legacy ``when_filter`` SQL: each one ends in a ``ConsolidationRuleError`` that names
the rule and says why, within bounded time and memory, with the episodes untouched; ordinary
filters still pass, and the functions the sandbox replaces answer as SQLite's own do.

The nastiest filters run in a child process (this file run as a script) under an
address-space limit and a timeout, so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.engine.passes import filters
from stargraph_mem.errors import ConsolidationRuleError
from stargraph_mem.model.time import to_us as to_micros
from stargraph_mem.stores import ConsolidationRule, Episode, Partition, SQLiteMemoryStore

RULE = "hostile"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALICE = Partition("alice", "rag")
SUBJECTS = ("alice", "bob", "carol")
OBJECTS = ("tea", "Coffee", "green TEA", "water")

CHILD_TIMEOUT_S = 120.0
"""Generous: the filters below stop within about ``TIME_LIMIT_S`` once the child started."""
CHILD_ADDRESS_SPACE = 1 << 30
"""RLIMIT_AS of a child: 1 GiB, where the unguarded replace bomb reached 2 GB."""


def make_episodes(count: int, *, user: str = "alice") -> list[Episode]:
    """``count`` episodes of one (user, rag) partition, one minute apart, varied metadata."""
    out = []
    for n in range(count):
        obj = OBJECTS[n % len(OBJECTS)]
        subject = SUBJECTS[n % len(SUBJECTS)]
        out.append(
            Episode(
                id=f"{user}-e{n}",
                content=f"{subject.title()} likes {obj} (note {n})",
                timestamp=T0 + timedelta(minutes=n),
                user=user,
                session=f"s{n % 2}",
                agent="rag",
                metadata={
                    "subject": subject,
                    "predicate": "likes",
                    "object": f"{obj} #{n}",
                    "score": n % 10,
                    "tags": ["a", "b", "c"][n % 3 :],
                },
            )
        )
    return out


async def fill(path: Path, count: int) -> None:
    async with SQLiteMemoryStore(path) as store:
        await store.put_many(make_episodes(count))


def episodes_digest(path: Path) -> tuple[int, str]:
    """Row count and a SHA-256 of every column of every episode, read outside the store."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT * FROM episodes ORDER BY seq").fetchall()
    finally:
        conn.close()
    return len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()


def fact_count(path: Path) -> int:
    """Facts in the file (0 when the fact store was never opened)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'facts'").fetchone()
        return int(conn.execute("SELECT count(*) FROM facts").fetchone()[0]) if found else 0
    finally:
        conn.close()


def nest(expr: str, depth: int, pattern: str = "'e'", replacement: str = "'ee'") -> str:
    """``replace(replace(…expr…, pattern, replacement)…)``, ``depth`` calls deep."""
    return "replace(" * depth + expr + f",{pattern},{replacement})" * depth


def e_run(depth: int, column: str = "seq") -> str:
    """``2**depth`` letters 'e', built anew for every row (the column keeps it per row)."""
    return nest(f"('e'||substr({column},1,0))", depth)


E16, E17 = e_run(16), e_run(17)  # 64 Ki and 128 Ki characters, under the 256 KiB value limit

STATIC = {
    # the wrapper: one expression, nothing around it
    "union-to-text": ("1) UNION SELECT 'abc' --", "parentheses", "closes a parenthesis"),
    "union-block-comment": ("1) UNION SELECT 'abc' /*", "parentheses", "closes a parenthesis"),
    "line-comment": ("seq > 0 -- and the rest", "comment", "must not contain SQL comments"),
    "block-comment": ("seq > 0 /* x */", "comment", "must not contain SQL comments"),
    "stacked": ("seq > 0; DROP TABLE episodes", "statement", "';' is not allowed"),
    "unterminated-string": ("content = 'abc", "quote", "unterminated '-quoted"),
    "unterminated-identifier": ("[content = 1", "quote", "unterminated [identifier]"),
    "unclosed-parenthesis": ("(seq > 0", "parentheses", "never closed"),
    "blank": ("   \n ", "empty", "when_filter is empty"),
    "nul": ("seq > 0\x00", "nul", "NUL character"),
    "too-long": ("seq > 0 AND " * 400 + "1", "too-long", "the limit is 4,000"),
    "syntax": ("seq >", "invalid", "syntax error"),
    "two-expressions": ("1, 2", "invalid", "row value misused"),
    "bind-parameter": ("seq = ?", "parameter", "bind parameters"),
    "named-parameter": ("seq = :x", "parameter", "bind parameters"),
    # isolation: nothing but the episodes table and pure functions
    "write": ("seq IN (DELETE FROM episodes RETURNING seq)", "invalid", "syntax error"),
    "attach": ("1=1) ATTACH DATABASE ':memory:' AS x --", "parentheses", "closes a parenthesis"),
    "attached-schema": ("seq IN (SELECT seq FROM x.episodes)", "invalid", "no such table"),
    "pragma": (
        "EXISTS (SELECT 1 FROM pragma_table_info('episodes'))",
        "not-allowed",
        "a table-valued function is not allowed",
    ),
    "sqlite-master": (
        "seq IN (SELECT rowid FROM sqlite_master)",
        "not-allowed",
        "reading table 'sqlite_master' is not allowed",
    ),
    "sqlite-schema": (
        "seq IN (SELECT rowid FROM main.sqlite_schema)",
        "not-allowed",
        "reading table 'sqlite_master'",
    ),
    "facts": ("seq IN (SELECT rowid FROM facts)", "invalid", "no such table: facts"),
    "audit": ("EXISTS (SELECT 1 FROM audit)", "invalid", "no such table: audit"),
    "temp-schema": ("seq IN (SELECT seq FROM temp.episodes)", "invalid", "no such table"),
    "recursive-cte": (
        "seq IN (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c)",
        "not-allowed",
        "a recursive CTE is not allowed",
    ),
    "randomblob": ("length(randomblob(1e9)) > 0", "not-allowed", "calling randomblob()"),
    "zeroblob": ("length(zeroblob(1e9)) > 0", "not-allowed", "calling zeroblob()"),
    "printf": ("length(printf('%.*c', 1e9, 'x')) > 0", "not-allowed", "calling printf()"),
    "char-flood": (
        "char(" + ",".join(["65"] * 100) + ") <> ''",
        "limit",
        "too many arguments on function char",
    ),
    "char": ("char(65, 66) <> ''", "not-allowed", "calling char()"),
    "load-extension": ("load_extension('x') IS NULL", "not-allowed", "load_extension()"),
    "aggregate": ("(SELECT count(*) FROM episodes) > 0", "not-allowed", "calling count()"),
    # size limits checked while compiling
    "expression-depth": ("(" * 150 + "seq" + ")" * 150 + " > 0", "limit", "over a limit"),
    "function-arguments": ("max(seq" + ", 1" * 20 + ") > 0", "limit", "too many arguments"),
    "compound-select": (
        "seq IN (" + " UNION ".join(f"SELECT {i}" for i in range(12)) + ")",
        "limit",
        "too many terms in compound SELECT",
    ),
    "columns": (
        "EXISTS (SELECT " + ", ".join(["seq"] * 70) + " FROM episodes)",
        "limit",
        "too many columns",
    ),
    "cte-copies": (
        "EXISTS (WITH a(v) AS (SELECT content), "
        + ", ".join(f"b{i}(v) AS (SELECT v||v FROM {f'b{i - 1}' if i else 'a'})" for i in range(14))
        + " SELECT 1 FROM b13 WHERE v <> '')",
        "too-large",
        "limit of 10,000 instructions",
    ),
}
"""Refused before anything runs: ``(filter, reason, message fragment)``."""

RUNTIME = {
    "replace-bomb": (
        "length(" + nest("content", 12, "'e'", "'eeeeeeeeee'") + ") > 0",
        "too-big",
        "replace() would build a value of",
    ),
    "nested-replace": ("length(" + nest("content", 20) + ") > 0", "too-big", "over the limit of"),
    "concat-bomb": (
        "EXISTS (WITH a(v) AS MATERIALIZED (SELECT content), "
        + ", ".join(
            f"b{i}(v) AS MATERIALIZED (SELECT v||v FROM {f'b{i - 1}' if i else 'a'})"
            for i in range(16)
        )
        + " SELECT 1 FROM b15 WHERE v <> '')",
        "too-big",
        "built a value longer than the limit of 262,144 bytes",
    ),
    "like-long-pattern": ("content LIKE '%" + "a" * 1200 + "%'", "limit", "pattern too complex"),
    "like-built-pattern": (
        "content LIKE '%' || " + nest("'a'", 11, "'a'", "'aa'") + " || '_%'",
        "limit",
        "pattern too complex",
    ),
    "glob-long-pattern": ("content GLOB '*" + "a" * 1200 + "?'", "limit", "too complex"),
}
"""Refused while running, by the size limits: ``(filter, reason, message fragment)``."""


async def refused(db: Path, sql: str) -> ConsolidationRuleError:
    """Run ``consolidate(rule)`` with ``sql`` over the file's episodes; return its refusal."""
    async with SQLiteMemoryStore(db) as store:
        with pytest.raises(ConsolidationRuleError) as info:
            await store.consolidate(ConsolidationRule(id=RULE, when_filter=sql))
    return info.value


def check_refusal(error: ConsolidationRuleError, reason: str, fragment: str) -> None:
    message = str(error)
    assert message.startswith(f"rule '{RULE}': when_filter "), message
    assert error.context["rule_id"] == RULE
    assert error.context["reason"] == reason, message
    assert fragment in message


@pytest.mark.parametrize("name", [*STATIC, *RUNTIME])
async def test_hostile_filter_is_refused_and_changes_nothing(tmp_path: Path, name: str) -> None:
    sql, reason, fragment = {**STATIC, **RUNTIME}[name]
    db = tmp_path / "m.db"
    await fill(db, 20)
    before = episodes_digest(db)
    error = await refused(db, sql)
    check_refusal(error, reason, fragment)
    assert episodes_digest(db) == before
    assert fact_count(db) == 0
    if name in STATIC:
        # refused before any pass: the fact store was never even opened
        with pytest.raises(ConsolidationRuleError) as info:
            filters.check_when_filter(sql, rule_id=RULE)
        assert info.value.context["reason"] == reason


RUNAWAY = (
    "EXISTS (SELECT 1 FROM episodes a, episodes b, episodes c, episodes d, episodes e "
    "WHERE a.ts_us + b.ts_us + c.ts_us + d.ts_us + e.ts_us < episodes.ts_us)"
)
"""Allowed by the authorizer, but a five-way self join: far too much VM work to finish."""

HEAVY_REPLACE = f"length(replace({E17}, substr({E17}, 1, 65535)||'x', '')) + length({E17}) > 0"
"""Nested replace calls that stay under the value limit: few VM instructions per row, but
each call scans a long string (about 480,000 steps a row, so 300 rows overrun the budget);
SQLite's own replace is quadratic on the outer call."""

CHARGED = {
    "vm-work": RUNAWAY,
    "nested-replace": HEAVY_REPLACE,
    "quadratic-instr": f"instr({E17}, substr({E17}, 1, 65535)||'x') > 0",
    "quadratic-trim": f"length(trim({E16}, replace({E16}, 'e', 'x')||'e')) > 0",
    "quadratic-like": f"{E16} LIKE '%'||substr({E16}, 1, 990)||'_x%'",
    "quadratic-glob": f"{E16} GLOB '*'||substr({E16}, 1, 990)||'?x*'",
    "blob-replace": f"length(replace(CAST({E16} AS BLOB), CAST({E16} AS BLOB), x'00')) > 0",
}
"""Work the budget must see: VM instructions, and calls that scan long strings (whose
unguarded cost grows with the product of two lengths)."""


@pytest.mark.parametrize("sql", CHARGED.values(), ids=list(CHARGED))
async def test_work_budget_interrupts_whatever_the_clock_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    monkeypatch.setattr(filters, "WORK_BUDGET", 2_000_000)
    monkeypatch.setattr(filters, "TIME_LIMIT_S", 600.0)
    db = tmp_path / "m.db"
    await fill(db, 20)
    before = episodes_digest(db)
    error = await refused(db, sql)
    check_refusal(error, "budget", "interrupted: it used up its work budget of 2,000,000 steps")
    assert error.context["pack_rule_id"] != RULE
    assert episodes_digest(db) == before
    assert fact_count(db) == 0


async def test_time_limit_interrupts_a_filter_within_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filters, "WORK_BUDGET", 10**15)
    monkeypatch.setattr(filters, "TIME_LIMIT_S", 0.2)
    db = tmp_path / "m.db"
    await fill(db, 20)
    before = episodes_digest(db)
    error = await refused(db, RUNAWAY)
    check_refusal(error, "time", "interrupted: it ran past the time limit of 0.2 s")
    assert episodes_digest(db) == before


async def test_the_store_is_usable_after_a_refusal(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    await fill(db, 6)
    await refused(db, RUNTIME["replace-bomb"][0])
    async with SQLiteMemoryStore(db) as store:
        rule = ConsolidationRule(id="ok", when_filter="json_extract(metadata, '$.score') < 3")
        deltas = await store.consolidate(rule)
    assert sorted(d.source_episode_ids[0] for d in deltas) == ["alice-e0", "alice-e1", "alice-e2"]


# --- the nastiest, in a child process under RLIMIT_AS and a timeout ----------------------


CHILD_CASES = {
    "nested-replace-20": (20, RUNTIME["nested-replace"][0], ("too-big",)),
    "nested-replace-300": (300, RUNTIME["nested-replace"][0], ("too-big",)),
    "replace-bomb-300": (300, RUNTIME["replace-bomb"][0], ("too-big",)),
    "recursive-cte-300": (300, STATIC["recursive-cte"][0], ("not-allowed",)),
    "heavy-replace-300": (300, HEAVY_REPLACE, ("budget", "time")),
    "quadratic-trim-300": (
        300,
        f"length(trim({E17}, replace({E16}, 'e', 'x')||'e')) + length({E17}) > 0",
        ("budget", "time"),
    ),
}
"""``(episodes, filter, acceptable reasons)``: unguarded, these took 34 s to many minutes
or gigabytes; the two interrupting mechanisms race, so either reason is right."""


@dataclass
class ChildRun:
    before: tuple[int, str]
    after: tuple[int, str]
    returncode: int
    outcome: dict[str, Any]
    facts: int


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


@pytest.fixture(scope="module")
def child_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ChildRun]]:
    """Every child case, run side by side (each in its own process and file)."""
    root = tmp_path_factory.mktemp("children")
    started: dict[str, tuple[subprocess.Popen[str], tuple[int, str], Path]] = {}
    try:
        for name, (count, _, _) in CHILD_CASES.items():
            db = root / f"{name}.db"
            asyncio.run(fill(db, count))
            proc = subprocess.Popen(
                [sys.executable, __file__, str(db), name],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=_limit_child,
                cwd=Path(__file__).resolve().parents[1],
                env={**os.environ, "PYTHONHASHSEED": "0"},
            )
            started[name] = (proc, episodes_digest(db), db)
        runs: dict[str, ChildRun] = {}
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        for name, (proc, before, db) in started.items():
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            lines = out.strip().splitlines()
            outcome = json.loads(lines[-1]) if lines else {"error": "no output", "stderr": err}
            runs[name] = ChildRun(before, episodes_digest(db), proc.returncode, outcome, 0)
            runs[name].facts = fact_count(db)
        yield runs
    finally:
        for proc, _, _ in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("name", CHILD_CASES)
def test_nastiest_filters_stop_in_bounded_time_and_memory(
    child_runs: dict[str, ChildRun], name: str
) -> None:
    run = child_runs[name]
    reasons = CHILD_CASES[name][2]
    outcome = run.outcome
    assert run.returncode == 0, outcome
    assert outcome["error"] == "ConsolidationRuleError", outcome
    assert outcome["rule_id"] == RULE
    assert outcome["reason"] in reasons, outcome
    assert outcome["message"].startswith(f"rule '{RULE}': when_filter "), outcome
    if "budget" in reasons:
        assert "interrupted" in outcome["message"]
    assert run.after == run.before
    assert run.facts == 0


def _child(db: str, name: str) -> None:
    """Run one :data:`CHILD_CASES` filter; print what happened as one JSON line."""
    sql = CHILD_CASES[name][1]

    async def consolidate() -> dict[str, Any]:
        async with SQLiteMemoryStore(Path(db)) as store:
            try:
                await store.consolidate(ConsolidationRule(id=RULE, when_filter=sql))
            except ConsolidationRuleError as exc:
                return {"error": "ConsolidationRuleError", "message": str(exc), **exc.context}
            except BaseException as exc:  # reported to the parent, which fails the test
                return {"error": type(exc).__name__, "message": str(exc)}
        return {"error": None}

    started = time.perf_counter()
    outcome = asyncio.run(consolidate())
    outcome["seconds"] = round(time.perf_counter() - started, 3)
    outcome["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps(outcome, default=str))


# --- ordinary filters ---------------------------------------------------------------------


def expected(episodes: list[Episode], keep: Any) -> set[str]:
    return {e.id for e in episodes if keep(e)}


CUTOFF = T0 + timedelta(minutes=150)
ORDINARY: dict[str, tuple[str, Any]] = {
    "json-equals": (
        "json_extract(metadata, '$.subject') = 'alice'",
        lambda e: e.metadata["subject"] == "alice",
    ),
    "json-number": (
        "json_extract(metadata, '$.score') >= 7 AND json_array_length(metadata, '$.tags') = 1",
        lambda e: e.metadata["score"] >= 7 and len(e.metadata["tags"]) == 1,
    ),
    "lower-like": ("lower(content) LIKE '%tea%'", lambda e: "tea" in e.content.lower()),
    "like-case": ("content LIKE 'ALICE likes %'", lambda e: e.content.startswith("Alice likes ")),
    "like-underscore": (
        "content LIKE '%(note _)'",
        lambda e: e.content.endswith(")") and len(e.content.split("(note ")[1]) == 2,
    ),
    "glob": ("content GLOB '*TEA*'", lambda e: "TEA" in e.content),
    "timestamp-micros": (
        f"ts_us >= {to_micros(CUTOFF)}",
        lambda e: e.timestamp >= CUTOFF,
    ),
    "timestamp-datetime": (
        "datetime(ts_us / 1000000, 'unixepoch') < '2026-01-01 01:00:00'",
        lambda e: e.timestamp < T0 + timedelta(hours=1),
    ),
    "string-functions": (
        "instr(lower(content), 'coffee') > 0 AND trim(content, 'A') <> '' "
        "AND replace(content, 'likes', 'loves') LIKE '% loves %' AND length(content) > 5",
        lambda e: "coffee" in e.content.lower(),
    ),
    "subquery": (
        "seq IN (SELECT seq FROM episodes WHERE session = 's1') AND NOT content LIKE 'Bob%'",
        lambda e: e.session == "s1" and not e.content.startswith("Bob"),
    ),
}
"""``(filter, the same test in Python)``: the kinds of filter rule authors write."""


@pytest.mark.parametrize("name", ORDINARY)
async def test_ordinary_filters_pass_on_a_hundredth_of_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setattr(filters, "WORK_BUDGET", filters.WORK_BUDGET // 100)
    sql, keep = ORDINARY[name]
    episodes = make_episodes(400)
    async with SQLiteMemoryStore(tmp_path / "m.db") as store:
        await store.put_many(episodes)
        records = await store.since(ALICE, 0)
        seqs = filters.when_filter_seqs(records, ALICE, sql, rule_id="ordinary")
    by_seq = {r.seq: r.id for r in records}
    assert {by_seq[s] for s in seqs} == expected(episodes, keep)


async def test_ordinary_filter_end_to_end(tmp_path: Path) -> None:
    episodes = make_episodes(300)
    sql, keep = ORDINARY["lower-like"]
    async with SQLiteMemoryStore(tmp_path / "m.db") as store:
        await store.put_many(episodes)
        deltas = await store.consolidate(ConsolidationRule(id="ordinary", when_filter=sql))
    assert {d.rule_id for d in deltas} == {"ordinary"}
    assert {i for d in deltas for i in d.source_episode_ids} == expected(episodes, keep)


# --- the replaced functions answer as SQLite's own ----------------------------------------

_ALPHABET = "aAbBzZeE%_*?[]^-\\' \x00éÉßÿ漢😀"
_values = st.one_of(
    st.none(),
    st.integers(-50, 50),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(_ALPHABET, max_size=10),
    st.text("aAb%*", max_size=30),
    st.binary(max_size=6),
)
_CALLS = [
    ("replace", 3),
    ("instr", 2),
    ("trim", 2),
    ("ltrim", 2),
    ("rtrim", 2),
    ("like", 2),
    ("like", 3),
    ("glob", 2),
]


def literal(value: Any) -> str:
    """``value`` as an SQL literal (the sandbox allows no bind parameters)."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"x'{value.hex()}'"
    if isinstance(value, str):
        if "\x00" in value:  # not allowed in SQL text: spelled as its UTF-8 bytes
            return f"CAST(x'{value.encode().hex()}' AS TEXT)"
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def answer(conn: sqlite3.Connection, sql: str) -> tuple[str, Any]:
    try:
        value = conn.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return ("error", None)
    return (type(value).__name__, value)


@settings(max_examples=500, deadline=None)
@given(
    call=st.sampled_from(_CALLS),
    args=st.lists(_values, min_size=3, max_size=3),
    wild=st.text("%*_?aA", max_size=4),
)
def test_replaced_functions_agree_with_sqlite(
    call: tuple[str, int], args: list[Any], wild: str
) -> None:
    name, arity = call
    if name in ("like", "glob") and isinstance(args[0], str):
        args[0] = wild + args[0] + wild[::-1]  # patterns with wildcards at both ends
    sql = f"SELECT {name}({', '.join(literal(a) for a in args[:arity])})"
    native = sqlite3.connect(":memory:")
    guarded = sqlite3.connect(":memory:")
    try:
        filters._Sandbox(guarded, "diff", filters.MAX_VALUE_BYTES, 0)
        assert answer(guarded, sql) == answer(native, sql), sql
    finally:
        native.close()
        guarded.close()


_WIDE = "".join(chr(c) for c in range(0x20, 0x7F)) + "éü漢"
SPOT_CHECKS = [
    f"trim({literal(_WIDE + 'core' + _WIDE[::-1])}, {literal(_WIDE)})",
    f"ltrim({literal(_WIDE + 'core' + _WIDE)}, {literal(_WIDE)})",
    f"rtrim({literal('core' + _WIDE)}, {literal(_WIDE + 'x')})",
    f"trim({literal('core')}, {literal(_WIDE)})",
    "'aXbXc' LIKE '%x%X%'",
    "'abcabc' LIKE 'a%c%c'",
    "'abcab' LIKE 'a%c%c'",
    "'abc' LIKE 'abc%%'",
    "'ÉCOLE' LIKE 'école'",
    "'Straße' LIKE '%SSE'",
    "'a*b' GLOB 'a*B'",
    "'aaaa' GLOB '*aa*aa*'",
    "'aaa' GLOB '*aa*aa*'",
    "replace('aaaa', 'aa', 'b')",
    "replace('aaa', '', 'b')",
    "instr('漢字漢字', '字漢')",
    "instr(x'00ff00', x'ff')",
    "replace(12345, 3, 'x')",
]
"""Cases the generated ones rarely reach: large trim sets, overlapping pieces, non-ASCII."""


@pytest.mark.parametrize("expr", SPOT_CHECKS)
def test_replaced_functions_agree_with_sqlite_on_spot_checks(expr: str) -> None:
    native = sqlite3.connect(":memory:")
    guarded = sqlite3.connect(":memory:")
    try:
        filters._Sandbox(guarded, "diff", filters.MAX_VALUE_BYTES, 0)
        assert answer(guarded, f"SELECT {expr}") == answer(native, f"SELECT {expr}")
    finally:
        native.close()
        guarded.close()


if __name__ == "__main__":
    _child(*sys.argv[1:])
