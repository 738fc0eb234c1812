"""``facts`` lists from a settled SQLite file without the store stack or pydantic
(:mod:`stargraph_mem.stores.sqlite.listing`); what it prints is byte for byte what the
store's way prints, for every option, and any file the store would change, refuse or find
corrupt is left to the store."""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_probe import loaded
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.cli import facts as facts_cli
from stargraph_mem.model.deltas import DeleteDelta, UpdateDelta
from stargraph_mem.model.statuses import FACT_STATUSES
from stargraph_mem.model.time import MAX_US, MIN_US
from stargraph_mem.stores import AddDelta, FactPayload
from stargraph_mem.stores.database import SQLiteDatabase, open_database
from stargraph_mem.stores.repositories.fact_rows import fact_from_row
from stargraph_mem.stores.sqlite import listing
from stargraph_mem.stores.sqlite.schema import TABLES

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
ODD = "é\t\x1b[31m\u202e"
"""Text a table must escape (tab, an escape sequence, a bidi override)."""


def add(
    subject: str,
    obj: str,
    *,
    user: str = "alice",
    agent: str = "a1",
    predicate: str = "likes",
    confidence: float = 0.7,
    at: datetime = T0,
    **extra: Any,
) -> AddDelta:
    return AddDelta(
        user=user,
        agent=agent,
        source_episode_ids=[
            f"e{zlib.crc32(repr((user, agent, subject, predicate, obj)).encode())}"
        ],
        promotion_ts=at,
        rule_id="r1",
        confidence=confidence,
        fact=FactPayload(subject=subject, predicate=predicate, object=obj)
        if subject
        else FactPayload(payload={"note": obj, "n": 1e-7, "list": [1, {"x": None}]}),
        **extra,
    )


async def _fill(path: Path) -> None:
    """Facts of two users and agents, every status, a payload-only fact, non-default
    layers, memory types and trust, confidences that print differently, odd text."""
    tea = add("alice", "tea")
    gin = add("alice", "gin", confidence=1.0)
    note = add("", "remember the milk", confidence=0.25)
    layered = add(
        "alice", "chess", predicate="plays", layer="semantic", memory_type="procedure", trust=0.5
    )
    odd = add(ODD, f"cake{ODD}", user=f"bob{ODD}", agent="a2", confidence=0.123456789)
    archived = add("bob", "rain", user="bob", agent="a2")
    merged = add("bob", "sun", user="bob", agent="a2", at=T0 + HOUR)
    kept = add("bob", "snow", user="bob", agent="a2", confidence=0.5)
    deleted = add("carol", "noise", user="carol", confidence=1e-7)
    async with open_database(path) as db:
        facts = db.facts
        await facts.apply_deltas([tea, gin, note, layered, odd, archived, merged, kept, deleted])
        update = UpdateDelta(
            user="alice",
            agent="a1",
            source_episode_ids=["e-update"],
            promotion_ts=T0 + 2 * HOUR,
            rule_id="r2",
            confidence=0.9,
            replaces=[tea.new_fact_id],
            fact=FactPayload(subject="alice", predicate="likes", object="coffee"),
        )
        closes = [
            DeleteDelta(
                user=user,
                agent=agent,
                source_episode_ids=["e-close"],
                promotion_ts=T0 + 3 * HOUR,
                rule_id="r3",
                confidence=1.0,
                replaces=[fact_id],
                status=status,
            )
            for user, agent, fact_id, status in (
                ("bob", "a2", archived.new_fact_id, "archived"),
                ("carol", "a1", deleted.new_fact_id, "deleted"),
            )
        ]
        await facts.apply_deltas([update, *closes])
        await facts.update_status(gin.new_fact_id, "challenged", reason="doubt", at=T0 + 4 * HOUR)
        await facts.update_status(
            merged.new_fact_id,
            "merged",
            merged_into=kept.new_fact_id,
            at=T0 + 4 * HOUR,
        )


@pytest.fixture(scope="module")
def settled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("listing") / "m.db"
    asyncio.run(_fill(path))
    return path


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each listing was answered by the quick way (True) or the store (False)."""
    seen: list[bool] = []
    quick = facts_cli.quick_listing

    def spying(*args: Any) -> Any:
        found = quick(*args)
        seen.append(found is not None)
        return found

    monkeypatch.setattr(facts_cli, "quick_listing", spying)
    yield seen


def _both_ways(
    monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """The CLI's answer as it runs, and with the quick way turned off (the store's)."""
    first = _cli(*args)
    with monkeypatch.context() as patch:
        patch.setattr(facts_cli, "quick_listing", lambda *_: None)
        second = _cli(*args)
    return first, second


AS_OF = [(T0 + k * HOUR / 2).isoformat() for k in (-1, 1, 3, 5, 7, 9)]
OPTIONS = [
    (),
    ("--json",),
    ("--user", "alice"),
    ("--user", "bob"),
    ("--user", f"bob{ODD}"),
    ("--agent", "a2"),
    ("--user", "alice", "--agent", "a1"),
    ("--user", "alice", "--agent", "a2"),
    ("--user", "nobody"),
    ("--subject", "alice"),
    ("--predicate", "plays"),
    ("--subject", "alice", "--predicate", "likes", "--json"),
    ("--min-confidence", "0.5"),
    ("--min-confidence", "1"),
    ("--min-confidence", "0"),
    *[("--status", status) for status in (*FACT_STATUSES, "active", "all")],
    *[("--status", status, "--json") for status in ("all", "challenged", "merged", "active")],
    ("--status", "all", "--user", "bob", "--min-confidence", "0.2"),
    *[("--as-of", at) for at in AS_OF],
    *[("--as-of", at, "--json", "--user", "bob") for at in AS_OF[1:3]],
    ("--as-of", "2026-05-01T12:00:00+05:00", "--subject", "alice"),
]


@pytest.mark.parametrize("options", OPTIONS, ids=" ".join)
def test_the_quick_listing_prints_what_the_store_prints(
    settled: Path, options: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, answers: list[bool]
) -> None:
    quick, stored = _both_ways(monkeypatch, "facts", "--db", str(settled), *options)
    assert answers == [True]  # the first run was the quick way's
    assert quick == stored
    assert quick[0] == 0


def test_the_listing_covers_every_kind_of_fact(settled: Path) -> None:
    code, out, _ = _cli("facts", "--db", str(settled), "--status", "all")
    assert code == 0
    table = out.splitlines()
    assert table[0].split() == [
        "ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "STATUS", "OBJECT",
    ]  # fmt: skip
    statuses = {line.split()[-2] for line in table[1:] if "remember" not in line}
    assert {"current", "challenged", "superseded", "merged", "archived", "deleted"} <= statuses
    assert '{"note":"remember the milk","n":1e-7,"list":[1,{"x":null}]}' in out
    assert "\\x1b[31m" in out and "\x1b" not in out
    code, out, _ = _cli("facts", "--db", str(settled), "--json", "--predicate", "plays")
    assert '"layer":"semantic","memory_type":"procedure","trust":0.5}' in out
    assert out.count("\n") == 1


@pytest.mark.parametrize(
    "options",
    [("--user", ""), ("--agent", "x" * 257), ("--as-of", "0001-01-01T00:00:00+01:00")],
    ids=["empty user", "long agent", "as-of out of range"],
)
def test_patterns_the_store_refuses_are_the_stores_to_report(
    settled: Path, options: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, answers: list[bool]
) -> None:
    quick, stored = _both_ways(monkeypatch, "facts", "--db", str(settled), *options)
    assert answers == [False]
    assert quick == stored
    assert quick[0] == 1 and quick[2].startswith("error: ")


# --- files the store must open ----------------------------------------------------------


def _copy(settled: Path, tmp_path: Path) -> Path:
    path = tmp_path / "copy.db"
    source = sqlite3.connect(settled)
    target = sqlite3.connect(path)
    source.backup(target)
    source.close()
    target.execute("PRAGMA journal_mode=WAL")
    target.close()
    return path


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            db.execute(statement)
    finally:
        db.close()


def test_a_copy_of_a_settled_file_is_listed_the_quick_way(
    settled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[bool]
) -> None:
    path = _copy(settled, tmp_path)
    quick, stored = _both_ways(monkeypatch, "facts", "--db", f"sqlite:///{path}", "--json")
    assert answers == [True]
    assert quick == stored and quick[1]


BREAKAGES = {
    "new file": (),
    "rollback journal": ("PRAGMA journal_mode=DELETE",),
    "not stamped": ("PRAGMA application_id=0",),
    "older schema": ("UPDATE fact_store_meta SET value = '6' WHERE key = 'schema_version'",),
    "newer schema": ("UPDATE fact_store_meta SET value = '99' WHERE key = 'schema_version'",),
    "sweep indexes not on demand": (
        "DELETE FROM fact_store_meta WHERE key = 'sweep_indexes_on_demand'",
    ),
    "damaged schedule store": ("DROP TABLE scheduler_lease",),
    "damaged fact store": ("DROP TABLE fact_pins",),
    "corrupt id": ("UPDATE facts SET id = 'bad id' WHERE rowid = 1",),
    "corrupt layer": ("UPDATE facts SET layer = 'attic' WHERE rowid = 2",),
    "corrupt time": ("UPDATE facts SET valid_from_us = 'soon' WHERE rowid = 3",),
    "corrupt payload": ("UPDATE facts SET payload = '[1]' WHERE rowid = 3",),
    "text confidence": ("UPDATE facts SET confidence = 'high' WHERE rowid = 1",),
    "time out of range": (f"UPDATE facts SET recorded_at_us = {MAX_US + 1} WHERE rowid = 1",),
}


@pytest.mark.parametrize("breakage", BREAKAGES, ids=list(BREAKAGES))
def test_a_file_the_store_would_change_refuse_or_find_corrupt_is_the_stores(
    settled: Path,
    tmp_path: Path,
    breakage: str,
    monkeypatch: pytest.MonkeyPatch,
    answers: list[bool],
) -> None:
    if breakage == "new file":
        path = tmp_path / "new.db"
        path.touch()
    else:
        path = _copy(settled, tmp_path)
        _sql(path, *BREAKAGES[breakage])
    assert listing.list_facts(path, facts_cli.ListingPattern(status="all")) is None
    quick, stored = _both_ways(monkeypatch, "facts", "--db", str(path), "--status", "all")
    assert answers == [False]
    assert quick == stored


def test_a_missing_file_or_another_backend_is_the_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[bool]
) -> None:
    missing = tmp_path / "missing.db"
    quick, stored = _both_ways(monkeypatch, "facts", "--db", str(missing))
    assert quick == stored == (1, "", f"error: {missing}: database file does not exist\n")
    everything = facts_cli.ListingPattern()
    assert facts_cli.quick_listing("postgresql://nowhere/db", everything, None) is None
    assert facts_cli.quick_listing("ftp://x", everything, None) is None
    assert answers == [False, False, False]


def test_a_file_the_store_would_open_read_only_is_the_stores(
    settled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = facts_cli.ListingPattern()
    assert listing.list_facts(settled, everything) is not None
    monkeypatch.setattr(listing, "read_only_reason", lambda path: "the file is not writable")
    assert listing.list_facts(settled, everything) is None


def test_the_listing_loads_no_pydantic_nor_the_store_stack(settled: Path, tmp_path: Path) -> None:
    """A process listing a settled file loads neither pydantic nor the store stack."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    for options in ((), ("--json", "--user", "alice"), ("--status", "all"), ("--as-of", AS_OF[2])):
        assert loaded(env, "facts", "--db", str(settled), *options) == ("0", set())


# --- what the quick way knows of the stores ---------------------------------------------------


def test_the_table_lists_are_the_stores_own(tmp_path: Path) -> None:
    database = SQLiteDatabase(tmp_path / "m.db")
    stores = [member() for member in database.connection.members]
    assert (
        tuple(store._all_tables() for store in stores if store is not None) == listing.STORE_TABLES
    )
    assert listing.FACT_TABLES == TABLES


# --- one row, every value ----------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
texts = st.text(st.characters(exclude_categories=["Cs"]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | finite | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
times = st.integers(MIN_US, MAX_US)


@settings(max_examples=300, deadline=None)
@given(
    text=texts,
    payload=st.dictionaries(texts, json_values, max_size=4),
    confidence=finite | st.integers(-(2**53), 2**53),
    trust=st.sampled_from([1.0, 1, 0.0, -0.0, 0.5, 1e-300]) | finite,
    valid_from=times,
    valid_until=st.none() | times,
    recorded_at=times,
    status=st.sampled_from([None, *FACT_STATUSES]),
    layer=st.sampled_from(["working", "episodic", "semantic", "procedural"]),
    memory_type=st.sampled_from(["fact", "procedure", "narrative"]),
    superseded_by=st.none() | texts,
)
def test_a_row_lists_as_the_stores_fact_dumps(
    text: str,
    payload: dict[str, Any],
    confidence: float,
    trust: float,
    valid_from: int,
    valid_until: int | None,
    recorded_at: int,
    status: str | None,
    layer: str,
    memory_type: str,
    superseded_by: str | None,
) -> None:
    import orjson

    row = (
        "f-1.a:b@c",
        text,
        "agent",
        text,
        "pred",
        text,
        orjson.dumps(payload).decode(),
        confidence,
        valid_from,
        valid_until,
        superseded_by,
        recorded_at,
        "rule",
        "d1",
        status,
        layer,
        memory_type,
        trust,
    )
    fact = fact_from_row(row)
    listed = listing._listed(row)
    assert listed is not None
    assert listed.json == fact.model_dump_json()
    assert (listed.confidence, listed.status, listed.payload) == (
        fact.confidence,
        fact.status,
        fact.payload,
    )
    assert math.copysign(1, listed.confidence) == math.copysign(1, fact.confidence)
