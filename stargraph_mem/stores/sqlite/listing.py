"""Facts listed straight from a SQLite file, for the command line's ``facts``.

The fact store's ``query`` and ``as_of`` open the file through the store stack (aiosqlite,
every repository, their schema checks and bootstrap) and build a validated
:class:`~stargraph_mem.model.facts.Fact` per row: right for a library, but most of a
listing command's start-up. :func:`list_facts` answers the same question with the
standard library's ``sqlite3`` and no pydantic, and only when the answer is sure to be
the one the store gives: it returns ``None`` (the caller then asks the store, which
reports whatever is wrong in its own words) unless

- the file exists, can be written (the store would open it read-only otherwise) and is in
  write-ahead-log mode (the store would switch it);
- it carries this version's stamp (application id, file version), its fact store schema is
  this version's (nothing to migrate or create) and its sweep indexes were made on demand
  (nothing to drop), so the store's bootstrap would change nothing;
- no store's tables are partly missing (the store refuses a damaged file);
- every row reads back as the store would build it: an id of the id pattern, text where
  text is stored, times in range, a layer and memory type the vocabulary knows; any other
  row (a corrupt one) is the store's to report.

The checks and the read share one read transaction, so they see the same file. A listing
read here writes nothing: unlike the store's close, it does not bring the facts' search
index up to date (the next search or write does).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from stargraph_mem.model.ids import ID_PATTERN
from stargraph_mem.model.layers import LAYERS, MEMORY_TYPES
from stargraph_mem.model.time import from_us
from stargraph_mem.stores.repositories.fact_filter import FACT_COLUMNS, FactFilter, fact_select
from stargraph_mem.stores.repositories.sweep_schema import ON_DEMAND_MARK
from stargraph_mem.stores.sqlite.files import BUSY_TIMEOUT_MS, read_only_reason
from stargraph_mem.stores.sqlite.identity import (
    APPLICATION_ID,
    FACT_SCHEMA_VERSION,
    FILE_VERSION,
)

__all__ = ["FACT_TABLES", "STORE_TABLES", "Listed", "list_facts"]

FACT_TABLES: Final = (
    "fact_store_meta",
    "facts",
    "lineage",
    "audit",
    "reinforcements",
    "watermarks",
    "rejections",
    "fact_text",
    "fact_access",
    "aggregates",
    "deferred_episodes",
    "pass_times",
    "fact_pins",
    "fact_events",
)
"""The fact store's tables at this version (the store's ``TABLES``; a test keeps the two
equal)."""
STORE_TABLES: Final[tuple[tuple[str, ...], ...]] = (
    ("episodes", "schema_migrations", "quarantine"),
    FACT_TABLES,
    ("rule_runs", "scheduler_lease", "schedule_rules"),
    ("vectors", "index_marks", "episode_text"),
    ("entities", "entity_aliases"),
)
"""The tables of each store a SQLite database holds, at this version's layout: a file that
has some of one store's tables must have them all (a test keeps these equal to the stores'
own lists)."""
_ID: Final = re.compile(ID_PATTERN)
_LAYERS: Final = frozenset(LAYERS)
_MEMORY_TYPES: Final = frozenset(MEMORY_TYPES)


@dataclass(frozen=True, slots=True)
class Listed:
    """One fact as a listing prints it: the columns of its table row, and ``json``, the
    fact as one JSON object exactly as ``Fact.model_dump_json()`` writes it."""

    id: str
    user: str
    agent: str
    subject: str
    predicate: str
    object: str
    payload: dict[str, Any] = field(repr=False)
    confidence: float
    status: str
    json: str = field(repr=False)

    @property
    def has_triple(self) -> bool:
        """Whether the fact has subject/predicate/object (see ``Fact.has_triple``)."""
        return self.subject != ""


def list_facts(
    path: Path, pattern: FactFilter, *, as_of_us: int | None = None
) -> list[Listed] | None:
    """The facts the SQLite store's ``query(pattern)`` (or, with ``as_of_us``, its
    ``as_of``) returns from the file at ``path``, in its order; ``None`` when the store
    must answer (see the module's docstring)."""
    if not path.is_file() or read_only_reason(path) is not None:
        return None
    try:
        db = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=rw",
            uri=True,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
        )
    except sqlite3.Error:
        return None
    try:
        db.execute("BEGIN")
        if not _settled(db):
            return None
        text, params = fact_select(
            pattern, mark="?", columns=FACT_COLUMNS, no_limit=-1, as_of_us=as_of_us
        )
        rows = db.execute(text, params).fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    out = []
    for row in rows:
        listed = _listed(row)
        if listed is None:
            return None
        out.append(listed)
    return out


def _settled(db: sqlite3.Connection) -> bool:
    """Whether opening the file through the fact store would change nothing and refuse
    nothing (see the module's docstring)."""
    if _first(db, "PRAGMA application_id") != APPLICATION_ID:
        return False
    if _first(db, "PRAGMA user_version") != FILE_VERSION:
        return False
    if str(_first(db, "PRAGMA journal_mode")).lower() != "wal":
        return False
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for tables in STORE_TABLES:
        there = [table in names for table in tables]
        if any(there) and not all(there):
            return False
    if not all(table in names for table in FACT_TABLES):
        return False
    meta = dict(
        db.execute(
            "SELECT key, value FROM fact_store_meta WHERE key IN ('schema_version', ?)",
            (ON_DEMAND_MARK,),
        ).fetchall()
    )
    try:
        version = int(meta["schema_version"])
    except (KeyError, TypeError, ValueError):
        return False
    return version == FACT_SCHEMA_VERSION and ON_DEMAND_MARK in meta


def _first(db: sqlite3.Connection, sql: str) -> Any:
    row = db.execute(sql).fetchone()
    return None if row is None else row[0]


def _text(value: object) -> bool:
    return isinstance(value, str)


def _number(value: object) -> float | None:
    """A stored REAL as pydantic reads it into a ``float`` field (an integer too); None
    for anything else."""
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return None


def _listed(row: Sequence[Any]) -> Listed | None:
    """The fact of a ``FACT_COLUMNS`` row, or ``None`` unless the store would build the
    same fact from it."""
    (
        fact_id,
        user,
        agent,
        subject,
        predicate,
        obj,
        payload_text,
        confidence,
        valid_from_us,
        valid_until_us,
        superseded_by,
        recorded_at_us,
        rule_id,
        delta_id,
        status,
        layer,
        memory_type,
        trust,
    ) = row
    if not (isinstance(fact_id, str) and _ID.fullmatch(fact_id)):
        return None
    if not all(map(_text, (user, agent, subject, predicate, obj, rule_id, delta_id))):
        return None
    if superseded_by is not None and not isinstance(superseded_by, str):
        return None
    if status is not None and not isinstance(status, str):
        return None
    if layer not in _LAYERS or memory_type not in _MEMORY_TYPES:
        return None
    confidence, trust = _number(confidence), _number(trust)
    if confidence is None or trust is None:
        return None
    times = (valid_from_us, valid_until_us, recorded_at_us)
    if not all(t is None or (isinstance(t, int) and not isinstance(t, bool)) for t in times):
        return None
    if valid_from_us is None or recorded_at_us is None:
        return None
    try:
        payload = orjson.loads(payload_text)
        valid_from = from_us(valid_from_us)
        valid_until = None if valid_until_us is None else from_us(valid_until_us)
        recorded_at = from_us(recorded_at_us)
    except (ValueError, TypeError, OverflowError):
        return None
    if not isinstance(payload, dict):
        return None
    status = "current" if status is None else status
    document: dict[str, Any] = {
        "id": fact_id,
        "user": user,
        "agent": agent,
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "payload": payload,
        "confidence": confidence,
        "valid_from": valid_from,
        "valid_until": valid_until,
        "superseded_by": superseded_by,
        "recorded_at": recorded_at,
        "rule_id": rule_id,
        "delta_id": delta_id,
        "status": status,
    }
    # left out at their defaults, as the model's dump leaves them out
    if layer != "episodic":
        document["layer"] = layer
    if memory_type != "fact":
        document["memory_type"] = memory_type
    if trust != 1.0:
        document["trust"] = trust
    try:
        json = orjson.dumps(document, option=orjson.OPT_UTC_Z).decode()
    except (TypeError, orjson.JSONEncodeError):
        return None
    return Listed(fact_id, user, agent, subject, predicate, obj, payload, confidence, status, json)
