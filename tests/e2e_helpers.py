"""Shared helpers for the end-to-end, property, crash and bad-input consolidation tests."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from pydantic import JsonValue

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode, Fact

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
DEFAULT = RULES / "default.yaml"
DEDUP = RULES / "dedup_against_facts.yaml"
FREQUENCY = RULES / "frequency_promotion.yaml"
EXPIRE = RULES / "expire_speculative.yaml"

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
SEED_PACK = """\
ir_version: 1
pack: seed
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {every: 1}, confidence: 0.3}
rules:
  - id: guess
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""
"""A streaming pack promoting every triple as a guess (confidence 0.3): facts for sweeps."""

WALL_CLOCK_COLUMNS = {
    "facts": ("recorded_at_us",),
    "audit": ("applied_at_us",),
    "watermarks": ("updated_at_us",),
    "rejections": ("at_us",),
    "schema_migrations": ("applied_at_us",),
    "rule_runs": ("token",),
}
"""Columns stamped from the wall clock (not from the pass time), and a run record's random
compare-and-set token, left out of comparisons."""

Row = tuple[Any, ...]
Spoc = tuple[str, str, str, float]


def episode(
    eid: str,
    minute: int = 0,
    *,
    user: str = "alice",
    session: str = "s1",
    agent: str = "rag",
    content: str | None = None,
    at: datetime | None = None,
    meta: Mapping[str, JsonValue] | None = None,
    **metadata: JsonValue,
) -> Episode:
    """Episode ``eid`` at ``T0 + minute`` (or ``at``); content defaults to ``"text of <eid>"``.

    Metadata is ``meta`` updated with the remaining keyword arguments.
    """
    return Episode(
        id=eid,
        content=f"text of {eid}" if content is None else content,
        timestamp=T0 + timedelta(minutes=minute) if at is None else at,
        user=user,
        session=session,
        agent=agent,
        metadata={**(meta or {}), **metadata},
    )


class Triple(TypedDict):
    """Episode metadata stating a (subject, predicate, object) triple."""

    subject: str
    predicate: str
    object: str


def spo(subject: str, predicate: str, obj: str) -> Triple:
    """Metadata stating (subject, predicate, object); splat it into :func:`episode`."""
    return {"subject": subject, "predicate": predicate, "object": obj}


def spoc(facts: Sequence[Fact]) -> Counter[Spoc]:
    """The multiset of (subject, predicate, object, confidence) of ``facts``."""
    return Counter((f.subject, f.predicate, f.object, f.confidence) for f in facts)


def by_spo(facts: Sequence[Fact]) -> dict[tuple[str, str, str], Fact]:
    """Facts keyed by their triple (the triples must be distinct)."""
    out = {(f.subject, f.predicate, f.object): f for f in facts}
    assert len(out) == len(facts), f"repeated triples among {facts}"
    return out


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f"PRAGMA table_info('{table}')")]


INDEX_LAYOUT_TABLES = ("fact_text_data", "fact_text_idx")
"""The search index's segments (dumped by content instead, see :func:`dump_tables`)."""


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [str(row[0]) for row in rows]


def dump_tables(path: Path, *, skip_wall_clock: bool = False) -> dict[str, list[Row]]:
    """Every table of the file (schema included) with its rows, sorted, read outside the stores.

    ``skip_wall_clock`` leaves out :data:`WALL_CLOCK_COLUMNS`, so two databases fed the
    same input at the same pass time compare equal. The search index is dumped as what it
    holds (each term's occurrences by fact rowid), not as its segments, whose layout
    depends on how many transactions wrote it.
    """
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        out: dict[str, list[Row]] = {
            "sqlite_master": sorted(
                conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(),
                key=repr,
            )
        }
        for table in _tables(conn):
            if table in INDEX_LAYOUT_TABLES:
                continue
            skip = WALL_CLOCK_COLUMNS.get(table, ()) if skip_wall_clock else ()
            columns = [c for c in _columns(conn, table) if c not in skip]
            rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            out[table] = sorted(rows, key=repr)
        if "fact_text" in out:
            conn.execute(
                "CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, fact_text, 'instance')"
            )
            out["fact_text"] = sorted(conn.execute("SELECT * FROM temp.terms").fetchall())
        return out
    finally:
        conn.close()


def scalar(path: Path, sql: str, params: Sequence[Any] = ()) -> Any:
    """One value read with a plain read-only connection."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute(sql, tuple(params)).fetchone()
        return None if row is None else row[0]
    finally:
        conn.close()


def rows(path: Path, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    """All rows of a query, read with a plain read-only connection."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql, tuple(params)).fetchall()]
    finally:
        conn.close()


@dataclass(frozen=True)
class Outcome:
    """What a consolidated database holds, minus wall-clock stamps."""

    current: tuple[Row, ...]
    history: tuple[Row, ...]
    lineage: tuple[Row, ...]
    audit_ids: tuple[str, ...]
    watermarks: tuple[Row, ...]
    rejections: tuple[Row, ...]


LINEAGE = (
    "fact_id, delta_id, rule_id, pack_hash, source_episode_ids, promotion_ts_us, confidence, "
    "reason, bindings, predecessor_ids"
)
"""Lineage columns compared between runs (not ``audit_seq``: a storage link whose value
depends on the order partitions were consolidated in)."""


def outcome(path: Path) -> Outcome:
    """Facts (ids, triples, confidence, validity, rule), lineage, marks, rejections, and the
    audit delta ids in application order within each partition (partitions run one by one,
    so the order across partitions depends on when each was consolidated)."""
    fact_sql = (
        "SELECT id, user, agent, subject, predicate, object, confidence, valid_from_us, "
        "valid_until_us, superseded_by, closed_by, rule_id, delta_id FROM facts "
        "WHERE valid_until_us IS {} NULL ORDER BY id"
    )
    return Outcome(
        current=tuple(rows(path, fact_sql.format(""))),
        history=tuple(rows(path, fact_sql.format("NOT"))),
        lineage=tuple(rows(path, f"SELECT {LINEAGE} FROM lineage ORDER BY fact_id")),
        audit_ids=tuple(
            str(r[0]) for r in rows(path, "SELECT delta_id FROM audit ORDER BY partition_key, seq")
        ),
        watermarks=tuple(
            rows(
                path,
                "SELECT pack, rule_id, partition_key, last_seq FROM watermarks ORDER BY 1, 2, 3",
            )
        ),
        rejections=tuple(
            rows(
                path,
                "SELECT id, pack, rule_id, partition_key, reason FROM rejections ORDER BY 1, 2, 3",
            )
        ),
    )


async def record_all(path: Path, packs: Sequence[Path], episodes: Sequence[Episode]) -> None:
    """Store ``episodes`` (one batch) in the database at ``path``."""
    async with Consolidator.open(path, packs) as c:
        await c.memory.put_many(episodes)
