"""One bad row never blocks a partition.

At the door: times the store could not read back (UTC outside years 1..9999), text UTF-8
cannot hold (lone surrogates) and metadata JSON storage would not keep are refused with a
message naming the field and the value, and nothing is written. In the store: rows that do
not decode (written by an older version or by hand) are skipped by every read, noted once
in the ``quarantine`` table and reported; the rest of the partition goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import DEFAULT, ROOT, episode
from pydantic import JsonValue, ValidationError

from stargraph_mem.authoring.replay import replay
from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import DeltaValidationError, MemoryScopeError, StoreError
from stargraph_mem.stores.fact import ProvenanceBundle, sanitize_bundle
from stargraph_mem.stores.memory import CheckedRead, QuarantinedRow
from stargraph_mem.stores.models import (
    AddDelta,
    Episode,
    Fact,
    FactPayload,
    TimestampRangeError,
    to_utc,
)
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite.connection import from_us, to_us
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
PLUS_14 = timezone(timedelta(hours=14))
MINUS_1 = timezone(timedelta(hours=-1))
YEAR_0 = datetime(1, 1, 1, tzinfo=PLUS_14)
"""A valid ``datetime`` whose UTC value (0000-12-31T10:00Z) no datetime can hold."""
YEAR_10000 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_1)
"""``datetime.max``-ish: its UTC value is in year 10000."""
OUT_OF_RANGE = "is outside the range the store can keep"
ALICE = Partition("alice", "rag")
BOB = Partition("bob", "rag")


def good(eid: str, minute: int = 0, *, user: str = "alice", **metadata: JsonValue) -> Episode:
    """An episode stating (user, p-<eid>, o-<eid>) unless metadata says otherwise."""
    triple: dict[str, JsonValue] = {"subject": user, "predicate": f"p-{eid}", "object": f"o-{eid}"}
    triple.update(metadata)
    return episode(eid, minute, user=user, meta=triple)


def fields(**changes: object) -> dict[str, Any]:
    """An episode's fields, with ``changes``."""
    return {**good("e1").model_dump(), **changes}


def checksum(path: Path) -> str:
    """Every row of every table (text read as bytes, so undecodable rows count too)."""
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        digest = hashlib.sha256()
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        for (name,) in tables.fetchall():
            digest.update(name)
            for row in sorted(conn.execute(f"SELECT * FROM {name.decode()}"), key=repr):
                digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        conn.close()


def count(path: Path, table: str = "episodes") -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def execute(path: Path, sql: str, params: Sequence[Any] = ()) -> None:
    """One statement through a plain connection (how a hand edit or an old version writes)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, tuple(params))
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteMemoryStore(tmp_path / "m.db") as opened:
        yield opened


# --- the door: models ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"timestamp": YEAR_0}, f"timestamp 0001-01-01T00:00:00\\+14:00 {OUT_OF_RANGE}"),
        ({"timestamp": YEAR_10000}, f"timestamp 9999-12-31T23:59:59-01:00 {OUT_OF_RANGE}"),
        ({"timestamp": "0001-01-01T00:00:00+14:00"}, f"timestamp 0001-01-01.* {OUT_OF_RANGE}"),
        ({"content": "bad \ud800"}, "content contains a lone surrogate '\\\\ud800' at index 4"),
        ({"source_node": "n\udcff"}, "source_node contains a lone surrogate"),
        ({"user": "al\ud800ice"}, "user"),
        ({"session": "\udcff"}, "session"),
        ({"agent": "\udcff"}, "agent"),
        ({"id": "e\udcff"}, "id"),
        ({"metadata": {"note": "x\ud800"}}, "metadata.note contains a lone surrogate"),
        ({"metadata": {"k\udcff": 1}}, "metadata: key 'k\\\\udcff' contains a lone surrogate"),
        ({"metadata": {"deep": [{"x": "\ud800"}]}}, r"metadata.deep\[0\].x contains a lone"),
        ({"metadata": {"n": 2**64}}, r"metadata.n is an integer outside the 64-bit range"),
        ({"metadata": {"n": -(2**70)}}, r"outside the 64-bit range \(got -1180591620717411303424"),
        ({"metadata": {"x": math.nan}}, "metadata.x must be a finite number"),
        ({"metadata": {"x": [math.inf]}}, r"metadata.x\[0\] must be a finite number"),
    ],
)
def test_the_episode_model_refuses_what_the_store_cannot_keep(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        Episode.model_validate(fields(**changes))
    assert [error["loc"][0] for error in caught.value.errors()] == list(changes)


def test_the_extreme_times_the_store_keeps_are_accepted() -> None:
    lowest = datetime(1, 1, 1, tzinfo=UTC)
    highest = datetime.max.replace(tzinfo=UTC)
    for ts in (lowest, highest, datetime(1, 1, 1, 14, tzinfo=PLUS_14), highest.astimezone(MINUS_1)):
        assert Episode.model_validate(fields(timestamp=ts)).timestamp == ts
        assert from_us(to_us(ts)) == ts


def test_json_lines_are_checked_the_same_way() -> None:
    line = good("e1").model_dump_json().replace("2026-03-01T09:00:00Z", "0001-01-01T00:00:00+14:00")
    with pytest.raises(
        ValidationError, match=f"timestamp 0001-01-01T00:00:00\\+14:00 {OUT_OF_RANGE}"
    ):
        Episode.model_validate_json(line)
    with pytest.raises(ValidationError, match="Invalid JSON"):
        Episode.model_validate_json(line.replace('"text of e1"', '"\\ud800"'))


@pytest.mark.parametrize("when", [YEAR_0, YEAR_10000])
def test_every_stored_datetime_is_range_checked(when: datetime) -> None:
    stamp = when.isoformat().replace("+", "\\+")
    base = {"user": "u", "agent": "a", "source_episode_ids": ["e1"], "rule_id": "r"}
    fact = FactPayload(subject="s", predicate="p", object="o")
    with pytest.raises(ValidationError, match=f"promotion_ts {stamp} {OUT_OF_RANGE}"):
        AddDelta(**base, promotion_ts=when, confidence=0.5, fact=fact)
    stored = {
        "id": "f1",
        "user": "u",
        "agent": "a",
        "subject": "s",
        "predicate": "p",
        "object": "o",
        "confidence": 0.5,
        "valid_from": T0,
        "recorded_at": T0,
        "rule_id": "r",
        "delta_id": "d1",
    }
    for name in ("valid_from", "valid_until", "recorded_at"):
        with pytest.raises(ValidationError, match=f"{name} {stamp} {OUT_OF_RANGE}"):
            Fact.model_validate({**stored, name: when})
    with pytest.raises(ValidationError, match=f"promotion_ts {stamp}"):
        ProvenanceBundle(
            rule_id="r",
            delta_id="d1",
            source_episode_ids=("e1",),
            promotion_ts=when,
            confidence=0.5,
        )
    unchecked = ProvenanceBundle.model_construct(
        rule_id="r", delta_id="d1", source_episode_ids=("e1",), promotion_ts=when, confidence=0.5
    )
    with pytest.raises(DeltaValidationError, match=f"promotion_ts: {stamp} {OUT_OF_RANGE}"):
        sanitize_bundle(unchecked)
    with pytest.raises(TimestampRangeError, match=f"pass time {stamp} {OUT_OF_RANGE}"):
        to_utc(when, "pass time")
    with pytest.raises(TimestampRangeError, match=f"as_of time {stamp} {OUT_OF_RANGE}"):
        to_us(when, "as_of time")


def test_fact_text_that_utf8_cannot_hold_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"fact\.object contains a lone surrogate"):
        FactPayload(subject="s", predicate="p", object="\ud800")
    base = {"user": "u", "agent": "a", "source_episode_ids": ["e1"], "rule_id": "r"}
    fact = FactPayload(subject="s", predicate="p", object="o")
    with pytest.raises(ValidationError, match="reason contains a lone surrogate"):
        AddDelta(**base, promotion_ts=T0, confidence=0.5, fact=fact, reason="\udcff")


# --- the door: the stores and the Consolidator ---------------------------------------------


async def test_put_put_many_and_record_refuse_bad_episodes_and_write_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    async with Consolidator.open(path, [DEFAULT]) as mem:
        await mem.memory.put_many([good("ok")])
        before = checksum(path)
        for changes in (
            {"timestamp": YEAR_0},
            {"content": "\ud800"},
            {"metadata": {"k": "\udcff"}},
        ):
            with pytest.raises(ValidationError):
                Episode.model_validate(fields(id="bad", **changes))
        # models built without validation still stop at the store
        unchecked = [
            (Episode.model_construct(**fields(id="t", timestamp=YEAR_0)), "timestamp 0001-01-01"),
            (
                Episode.model_construct(**fields(id="t", timestamp=YEAR_10000)),
                "timestamp 9999-12-31T23:59:59-01:00",
            ),
            (
                Episode.model_construct(**fields(id="c", content="\ud800")),
                "content contains a lone",
            ),
            (Episode.model_construct(**fields(id="s", source_node="\udcff")), "source_node"),
            (
                Episode.model_construct(**fields(id="m", metadata={"k": "\ud800"})),
                "metadata cannot be stored",
            ),
            (
                Episode.model_construct(**fields(id="n", metadata={"n": 2**65})),
                "metadata cannot be stored",
            ),
        ]
        for bad, message in unchecked:
            with pytest.raises(StoreError, match=message):
                await mem.memory.put(bad, user=bad.user, session=bad.session, agent=bad.agent)
            with pytest.raises(StoreError, match=message):
                await mem.memory.put_many([good("fine-too"), bad])
            with pytest.raises(StoreError, match=message):
                await mem.record(bad)
            assert checksum(path) == before
        for part in ("user", "session", "agent"):
            scope = {"user": "alice", "session": "s1", "agent": "rag", part: "x\ud800"}
            with pytest.raises(MemoryScopeError, match=f"'{part}' contains a lone surrogate"):
                await mem.memory.put(good("ok"), **scope)
        with pytest.raises(MemoryScopeError, match="lone surrogate"):
            await mem.memory.recent("\ud800", limit=5)
        with pytest.raises(MemoryScopeError, match="lone surrogate"):
            await mem.memory.since(Partition("alice", "\udcff"), 0)
        assert checksum(path) == before


@pytest.mark.parametrize("when", [YEAR_0, YEAR_10000])
async def test_a_pass_at_an_unkeepable_time_is_an_error_and_changes_nothing(
    tmp_path: Path, when: datetime
) -> None:
    path = tmp_path / "m.db"
    async with Consolidator.open(path, [DEFAULT]) as mem:
        await mem.memory.put_many([good("e1"), good("e2", 1, user="bob")])
        before = checksum(path)
        with pytest.raises(TimestampRangeError, match=OUT_OF_RANGE):
            await mem.consolidate(now=when)
        with pytest.raises(TimestampRangeError, match=OUT_OF_RANGE):
            await mem.facts(as_of=when)
        assert checksum(path) == before
    with pytest.raises(TimestampRangeError, match=OUT_OF_RANGE):
        await replay(path, [compile_file(DEFAULT)], now=when)
    with pytest.raises(TimestampRangeError, match=OUT_OF_RANGE):
        await replay(path, [compile_file(DEFAULT)], as_of=when)
    assert checksum(path) == before


async def test_a_pass_at_the_last_keepable_instant_reads_back(tmp_path: Path) -> None:
    last = datetime.max.replace(tzinfo=UTC)
    async with Consolidator.open(tmp_path / "m.db", [DEFAULT]) as mem:
        await mem.memory.put_many([good("e1")])
        await mem.consolidate(now=last)
        [fact] = await mem.facts()
        assert fact.valid_from == last
        assert [f.id for f in await mem.facts(as_of=last)] == [fact.id]


async def test_a_delta_at_an_unkeepable_time_is_refused_by_the_fact_store(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    async with SQLiteFactStore(path) as facts:
        delta = {
            "kind": "add",
            "user": "u",
            "agent": "a",
            "source_episode_ids": ["e1"],
            "rule_id": "r",
            "confidence": 0.5,
            "fact": {"subject": "s", "predicate": "p", "object": "o"},
        }
        await facts.apply_delta({**delta, "promotion_ts": T0})
        before = checksum(path)
        with pytest.raises(DeltaValidationError, match=f"promotion_ts.*{OUT_OF_RANGE}"):
            await facts.apply_delta({**delta, "promotion_ts": YEAR_0})
        with pytest.raises(TimestampRangeError, match=f"as_of time .*{OUT_OF_RANGE}"):
            await facts.as_of(YEAR_10000)
        assert checksum(path) == before


# --- the door: the CLI ---------------------------------------------------------------------


def cli(*args: str | bytes) -> subprocess.CompletedProcess[str]:
    """``stargraph-mem`` in a child process (argv may hold bytes that are not UTF-8)."""
    argv: list[str | bytes] = [sys.executable, "-m", "stargraph_mem.cli", *args]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="backslashreplace",
        cwd=ROOT,
        env=env,
        check=False,
    )


RANGE_TAIL = (
    "is outside the range the store can keep: its UTC time must lie within "
    "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"
)


def test_cli_put_ingest_and_passes_refuse_bad_input_and_write_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    scope = ["--db", db, "--user", "alice", "--agent", "rag"]
    first = cli("put", *scope, "--session", "s1", "--id", "ok", "fine")
    assert (first.returncode, first.stdout) == (0, "ok\n")
    done = cli("consolidate", "--db", db, "--pack", str(DEFAULT), "--now", NOW.isoformat())
    assert done.returncode == 0, done.stderr
    before = checksum(Path(db))

    stamp = "0001-01-01T00:00:00+14:00"
    result = cli("put", *scope, "--session", "s1", "--id", "e1", "--timestamp", stamp, "x")
    assert result.returncode == 1
    assert result.stderr == f"error: timestamp: Value error, timestamp {stamp} {RANGE_TAIL}\n"
    put_args: list[list[str | bytes]] = [
        ["--session", "s1", "--id", "e2", b"bad \xff"],
        ["--session", "s1", "--id", "e3", "--meta", b"k=\xff", "x"],
        ["--session", b"s\xff", "--id", "e4", "x"],
    ]
    for args in put_args:
        result = cli("put", *scope, *args)
        assert result.returncode != 0
        assert "UTF-8" in result.stderr
        assert "Traceback" not in result.stderr

    base = {"id": "j1", "content": "x", "timestamp": "2026-03-01T09:00:00Z"}
    base |= {"user": "u", "session": "s", "agent": "a"}
    bad_lines: list[tuple[dict[str, Any], str]] = [
        ({"timestamp": stamp}, f"timestamp: Value error, timestamp {stamp} {RANGE_TAIL}"),
        ({"metadata": {"n": 2**70}}, "metadata.n is an integer outside the 64-bit range"),
        ({"metadata": {"n": math.nan}}, "metadata.n must be a finite number"),
        ({"content": "\ud800"}, "not valid JSON"),
    ]
    for number, (changes, message) in enumerate(bad_lines):
        jsonl = tmp_path / f"bad{number}.jsonl"
        lines = [good("fine").model_dump_json(), json.dumps({**base, **changes})]
        jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = cli("ingest", str(jsonl), "--db", db)
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith(f"error: {jsonl}:2: ")
        assert message in result.stderr

    for option in (stamp, "9999-12-31T23:59:59-01:00"):
        result = cli("consolidate", "--db", db, "--pack", str(DEFAULT), "--now", option)
        assert (result.returncode, result.stderr) == (1, f"error: time {option} {RANGE_TAIL}\n")
        result = cli("facts", "--db", db, "--as-of", option)
        expected = f"error: as_of time {option} {RANGE_TAIL}\n"
        assert (result.returncode, result.stderr) == (1, expected)
    assert checksum(Path(db)) == before


# --- quarantine -----------------------------------------------------------------------------

NOT_NULL_FREE = """CREATE TABLE episodes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    scope_key TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    user TEXT,
    session TEXT,
    agent TEXT,
    ts_us INTEGER,
    tz_offset_s INTEGER,
    content TEXT,
    source_node TEXT,
    metadata BLOB,
    last_accessed_us INTEGER NULL,
    access_count INTEGER DEFAULT 0
)"""
"""An episodes table as an older (or hand-made) schema could have it: few NOT NULLs, and
no quarantine table beside it."""
LEGACY_LEDGER = (
    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, "
    "applied_at_us INTEGER NOT NULL, plan BLOB NOT NULL)",
    "INSERT INTO schema_migrations VALUES (1, '0001_episodes', 0, '{\"baseline\":true}')",
)
"""The migrations ledger an older version created with its episodes table."""

CORRUPTIONS: list[tuple[str, str, tuple[Any, ...], str]] = [
    (
        "ts_us far out",
        "ts_us = ?",
        (2**62,),
        f"ts_us: stored time 4611686018427387904 {OUT_OF_RANGE}",
    ),
    (
        "ts_us below year 1",
        "ts_us = ?",
        (-(2**62),),
        f"ts_us: stored time -4611686018427387904 {OUT_OF_RANGE}",
    ),
    ("ts_us text", "ts_us = ?", ("soon",), "ts_us: expected an INTEGER, got TEXT"),
    ("ts_us real", "ts_us = ?", (1.5,), "ts_us: expected an INTEGER, got a REAL"),
    ("offset", "tz_offset_s = ?", (10**6,), "tz_offset_s: 1000000 is not a UTC offset"),
    (
        "local year 0",
        "ts_us = ?, tz_offset_s = ?",
        (to_us(datetime(1, 1, 1, tzinfo=UTC)), -3600),
        "ts_us: stored time (UTC offset -3600 s)",
    ),
    ("metadata not json", "metadata = ?", (b"{not json",), "metadata: not valid JSON"),
    ("metadata a list", "metadata = ?", (b"[1]",), "metadata: a JSON array, expected an object"),
    ("metadata null", "metadata = ?", (b"null",), "metadata: a JSON null, expected an object"),
    ("metadata null column", "metadata = NULL", (), "metadata: expected a JSON object, got NULL"),
    (
        "metadata not utf-8",
        "metadata = CAST(? AS TEXT)",
        (b'{"a": "\xff"}',),
        "metadata: TEXT that is not valid UTF-8",
    ),
    ("content blob", "content = ?", (b"\xff\xfe",), "content: expected TEXT, got a BLOB"),
    (
        "content not utf-8",
        "content = CAST(? AS TEXT)",
        (b"caf\xe9",),
        "content: TEXT that is not valid UTF-8 (b'caf\\xe9')",
    ),
    ("content nul", "content = ?", ("a\x00b",), "content: contains a NUL character"),
    ("content null", "content = NULL", (), "content: expected TEXT, got NULL"),
    ("session null", "session = NULL", (), "session: expected TEXT, got NULL"),
    ("source_node blob", "source_node = ?", (b"\x00",), "source_node: expected TEXT, got a BLOB"),
    ("id off pattern", "id = ?", ("has space",), "id: 'has space' does not match the id pattern"),
    ("id null", "id = NULL", (), "id: expected TEXT, got NULL"),
    ("id not utf-8", "id = CAST(? AS TEXT)", (b"e\xff",), "id: TEXT that is not valid UTF-8"),
    (
        "accessed far out",
        "last_accessed_us = ?",
        (2**62,),
        f"last_accessed_us: stored time 4611686018427387904 {OUT_OF_RANGE}",
    ),
    ("access_count null", "access_count = NULL", (), "access_count: expected an INTEGER, got NULL"),
    ("ts_us null", "ts_us = NULL", (), "ts_us: expected an INTEGER, got NULL"),
]


async def seeded(path: Path, *, legacy: bool = True) -> None:
    """Episodes e0..e5 of alice, then b0, b1 of bob (seqs 1..8), in a file created as an
    older version left it (``legacy``: no NOT NULL on most columns, no quarantine table)."""
    if legacy:
        execute(path, NOT_NULL_FREE)
        for statement in LEGACY_LEDGER:
            execute(path, statement)
    async with SQLiteMemoryStore(path) as store:
        await store.put_many([good(f"e{i}", i) for i in range(6)])
        await store.put_many([good("b0", 10, user="bob"), good("b1", 11, user="bob")])
    if legacy:  # and without the mark of this version's layout
        for statement in ("DROP TABLE quarantine", "PRAGMA application_id = 0"):
            execute(path, statement)


def corrupt(path: Path, eid: str, assignment: str, params: Sequence[Any]) -> None:
    execute(path, f"UPDATE episodes SET {assignment} WHERE id = ?", (*params, eid))


@pytest.mark.parametrize(
    ("assignment", "params", "reason"),
    [case[1:] for case in CORRUPTIONS],
    ids=[case[0] for case in CORRUPTIONS],
)
async def test_reads_skip_note_and_report_an_undecodable_row(
    tmp_path: Path, assignment: str, params: tuple[Any, ...], reason: str
) -> None:
    path = tmp_path / "m.db"
    await seeded(path)
    corrupt(path, "e2", assignment, params)
    readable_id = "e2" if "id" not in assignment.split("=")[0] else None
    if assignment.startswith("id = ?"):
        readable_id = params[0]
    async with SQLiteMemoryStore(path) as store:  # an older file gains the table on open
        read = await store.since_checked(ALICE, 0)
        assert isinstance(read, CheckedRead)
        records, [bad] = read
        assert [r.id for r in records] == ["e0", "e1", "e3", "e4", "e5"]
        assert (bad.seq, bad.episode_id, bad.partition_key) == (3, readable_id, ALICE.key)
        assert bad.reason.startswith(reason) or reason in bad.reason, bad.reason
        assert bad.recorded
        assert (read.scanned, read.last_seq(0)) == (6, 6)
        assert [r.id for r in await store.since(ALICE, 0)] == ["e0", "e1", "e3", "e4", "e5"]
        assert [e.id for e in await store.recent("alice", limit=10)] == [
            "e5",
            "e4",
            "e3",
            "e1",
            "e0",
        ]
        assert [r.id for r in await store.by_ids(["e1", "e2", "e3", "has space"])] == ["e1", "e3"]
        assert await store.quarantined() == [bad]
        assert await store.quarantined(ALICE) == [bad]
        assert await store.quarantined(BOB) == []
        again = await store.since_checked(ALICE, 0)
        assert again.quarantined == [bad]  # noted once: the same entry, the same time
        assert [r.id for r in await store.since(BOB, 0)] == ["b0", "b1"]
    assert count(path, "quarantine") == 1


async def test_metadata_the_model_refuses_still_decodes(store: SQLiteMemoryStore) -> None:
    # the runtime rejects such an episode itself (and records the rejection); reads show it
    await store.put_many([good("e0"), good("e1", 1)])
    corrupt(store.path, "e1", "metadata = ?", (b'{"intent": "merge", "subject": 3}',))
    read = await store.since_checked(ALICE, 0)
    assert ([r.id for r in read.records], read.quarantined) == (["e0", "e1"], [])
    assert read.records[1].metadata == {"intent": "merge", "subject": 3}
    [shown, _] = await store.recent("alice", limit=5)
    assert (shown.id, shown.metadata) == ("e1", {"intent": "merge", "subject": 3})
    assert await store.quarantined() == []


async def test_limits_count_bad_rows_and_since_still_fills_its_page(
    store: SQLiteMemoryStore,
) -> None:
    await store.put_many([good(f"e{i}", i) for i in range(6)])
    for eid in ("e1", "e2", "e5"):
        corrupt(store.path, eid, "metadata = ?", (b"{",))
    first = await store.since_checked(ALICE, 0, limit=3)
    assert ([r.seq for r in first.records], [q.seq for q in first.quarantined]) == ([1], [2, 3])
    assert (first.scanned, first.last_seq(0)) == (3, 3)
    second = await store.since_checked(ALICE, first.last_seq(0), limit=3)
    assert ([r.seq for r in second.records], [q.seq for q in second.quarantined]) == ([4, 5], [6])
    assert (second.scanned, second.last_seq(3)) == (3, 6)
    last = await store.since_checked(ALICE, 6, limit=3)
    assert (last, last.scanned, last.last_seq(6)) == (CheckedRead([], []), 0, 6)
    assert [r.seq for r in await store.since(ALICE, 0, limit=2)] == [1, 4]
    assert [r.seq for r in await store.since(ALICE, 1, limit=1)] == [4]
    assert [r.seq for r in await store.since(ALICE, 4, limit=5)] == [5]
    assert await store.since(ALICE, 5, limit=1) == []
    assert [e.id for e in await store.recent("alice", limit=2)] == ["e4", "e3"]
    assert [e.id for e in await store.recent("alice", limit=3)] == ["e4", "e3", "e0"]
    episodes, skipped = await store.recent_checked("alice", limit=1)
    assert ([e.id for e in episodes], [q.seq for q in skipped]) == (["e4"], [6])
    assert [q.seq for q in await store.quarantined()] == [2, 3, 6]
    with pytest.raises(ValueError, match="limit"):
        await store.since_checked(ALICE, 0, limit=0)


@pytest.mark.parametrize("older", [False, True], ids=["current", "older file"])
async def test_reads_go_on_when_the_quarantine_cannot_be_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, older: bool
) -> None:
    path = tmp_path / "m.db"
    await seeded(path, legacy=older)  # the older file has no quarantine table
    corrupt(path, "e0", "ts_us = ?", (2**62,))
    before = checksum(path)
    store = SQLiteMemoryStore(path)
    store.read_only = True
    async with store:
        with caplog.at_level(logging.WARNING, logger="stargraph_mem.stores.sqlite_memory"):
            records, [bad] = await store.since_checked(ALICE, 0)
        assert [r.id for r in records] == ["e1", "e2", "e3", "e4", "e5"]
        assert (bad.seq, bad.episode_id, bad.partition_key, bad.recorded) == (
            1,
            "e0",
            ALICE.key,
            False,
        )
        assert bad.reason.startswith("ts_us: stored time 4611686018427387904")
        assert "could not record 1 quarantined episodes row(s)" in caplog.text
        assert [r.id for r in await store.since(ALICE, 0, limit=2)] == ["e1", "e2"]
        assert [r.id for r in await store.by_ids(["e0", "e1"])] == ["e1"]
        assert await store.partitions() == [ALICE, BOB]
        assert await store.quarantined() == []
    assert checksum(path) == before


async def test_reads_that_drop_rows_log_one_warning_each(
    store: SQLiteMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    await store.put_many([good("e0"), good("e1", 1), good("e2", 2)])
    corrupt(store.path, "e1", "metadata = ?", (b"nope",))
    corrupt(store.path, "e2", "content = ?", (b"\xff",))
    with caplog.at_level(logging.WARNING, logger="stargraph_mem.stores.sqlite_memory"):
        assert [e.id for e in await store.recent("alice", limit=5)] == ["e0"]
    assert [message.partition(" (")[0] for message in caplog.messages] == [
        "skipped quarantined episodes row seq=3",
        "skipped quarantined episodes row seq=2",
    ]
    assert caplog.messages[0].endswith(
        f"(id 'e2', partition {ALICE.key}): content: expected TEXT, got a BLOB"
    )
    assert f"(id 'e1', partition {ALICE.key}): metadata: not valid JSON (" in caplog.messages[1]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stargraph_mem.stores.sqlite_memory"):
        await store.since_checked(ALICE, 0)  # returns them instead
    assert caplog.messages == []


async def test_a_malformed_partition_key_does_not_hide_the_other_partitions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "m.db"
    await seeded(path, legacy=False)
    execute(path, "UPDATE episodes SET partition_key = CAST(? AS TEXT) WHERE id = 'b1'", (b"\xff",))
    execute(path, "UPDATE episodes SET partition_key = '/user//agent/x/' WHERE id = 'b0'")
    async with SQLiteMemoryStore(path) as store:
        assert await store.partitions() == [ALICE]
    assert "skipped malformed episodes partition key" in caplog.text


def recent_cli(db: Path) -> subprocess.CompletedProcess[str]:
    return cli("recent", "--db", str(db), "--user", "alice", "--limit", "4")


async def test_cli_recent_prints_the_good_rows_and_warns_per_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    await seeded(path, legacy=False)
    corrupt(path, "e5", "ts_us = ?", (2**62,))
    corrupt(path, "e3", "content = CAST(? AS TEXT)", (b"\xff",))
    result = recent_cli(path)
    assert result.returncode == 0, result.stderr
    assert [line.split()[3] for line in result.stdout.splitlines()] == [
        "ID",
        "e4",
        "e2",
        "e1",
        "e0",
    ]
    assert result.stderr.splitlines() == [
        f"skipped quarantined episodes row seq=6 (id 'e5', partition {ALICE.key}): ts_us: "
        f"stored time 4611686018427387904 {OUT_OF_RANGE}: its UTC time must lie within "
        "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z",
        f"skipped quarantined episodes row seq=4 (id 'e3', partition {ALICE.key}): content: "
        "TEXT that is not valid UTF-8 (b'\\xff')",
    ]


def triples(facts: Sequence[Fact]) -> set[tuple[str, str, str]]:
    return {(f.subject, f.predicate, f.object) for f in facts}


async def test_consolidation_goes_past_quarantined_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    await seeded(path)
    async with SQLiteMemoryStore(path) as store:  # more alice rows after bob's
        await store.put_many([good("e6", 6), good("e7", 7)])
    kinds = {case[0]: case for case in CORRUPTIONS}
    for eid, kind in (
        ("e0", "content not utf-8"),
        ("e2", "ts_us far out"),
        ("e3", "metadata not json"),
        ("e4", "content null"),
        ("e7", "offset"),  # the partition's last row
    ):
        corrupt(path, eid, kinds[kind][1], kinds[kind][2])
    async with Consolidator.open(path, [DEFAULT]) as mem:
        await mem.consolidate(now=NOW)
        alice = await mem.facts(user="alice", agent="rag")
        assert triples(alice) == {("alice", f"p-{e}", f"o-{e}") for e in ("e1", "e5", "e6")}
        bob = await mem.facts(user="bob", agent="rag")
        assert triples(bob) == {("bob", f"p-{e}", f"o-{e}") for e in ("b0", "b1")}
        quarantined = await mem.memory.quarantined()
        assert [(q.seq, q.episode_id) for q in quarantined] == [
            (1, "e0"),
            (3, "e2"),
            (4, "e3"),
            (5, "e4"),
            (10, "e7"),
        ]
        assert await mem.memory.quarantined(BOB) == []
        facts_before = checksum(path)
        again = (await mem.consolidate(now=NOW + timedelta(hours=1))).passes
        assert [r.delta_counts for r in again if r.delta_counts] == []
        assert sum(r.episodes for r in again) == 0
        assert checksum(path) == facts_before
        assert [e.id for e in await mem.memory.recent("alice", limit=10)] == ["e6", "e5", "e1"]
        # every row, the quarantined ones included, has been consumed
        assert [await c.pending(ALICE) for c in mem.runners] == [0]
        assert [await c.pending(BOB) for c in mem.runners] == [0]


async def test_replay_skips_and_lists_rows_it_cannot_use(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    await seeded(path)
    corrupt(path, "e1", "content = NULL", ())
    corrupt(path, "e3", "metadata = ?", (b"[]",))
    async with Consolidator.open(path, [DEFAULT]):
        pass  # bootstrapped by this version
    before = checksum(path)
    result = await replay(path, [compile_file(DEFAULT)], now=NOW)
    assert [(q.seq, q.episode_id, q.recorded) for q in result.quarantined] == [
        (2, "e1", False),
        (4, "e3", False),
    ]
    assert result.quarantined[0].reason == "content: expected a value, got NULL"
    assert result.quarantined[1].reason == "metadata: a JSON array, expected an object"
    assert result.counts()["appear"] == 6  # e0, e2, e4, e5, b0, b1
    assert result.document()["quarantined"] == [
        {"seq": q.seq, "episode_id": q.episode_id, "partition_key": ALICE.key, "reason": q.reason}
        for q in result.quarantined
    ]
    assert all(isinstance(q, QuarantinedRow) for q in result.quarantined)
    assert checksum(path) == before


SELECTING = """\
ir_version: 1
pack: selecting
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {every: 1}, confidence: 0.8}
rules:
  - id: add_selected
    select: {subject: {eq: alice}, predicate: {prefix: "p-"}}
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""


async def test_a_select_over_metadata_goes_past_a_row_that_is_not_json(tmp_path: Path) -> None:
    """A ``select`` reads metadata with ``json_extract``: a row whose metadata is not JSON
    must not fail the pass (it is quarantined and the rest is selected)."""
    path = tmp_path / "m.db"
    pack = tmp_path / "selecting.yaml"
    pack.write_text(SELECTING, "utf-8")
    async with SQLiteMemoryStore(path) as store:
        await store.put_many([good("e1", 1), good("e2", 2), good("e3", 3)])
    execute(path, "UPDATE episodes SET metadata = ? WHERE id = ?", (b"{not json", "e2"))
    async with Consolidator.open(path, [pack]) as mem:
        reports = (await mem.consolidate(now=NOW)).passes
        assert [q.episode_id for r in reports for q in r.quarantined] == ["e2"]
        facts = await mem.facts(user="alice", agent="rag")
        assert triples(facts) == {("alice", "p-e1", "o-e1"), ("alice", "p-e3", "o-e3")}
