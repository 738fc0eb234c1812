"""Durable aggregates: the state ``over: history`` patterns keep per partition.

Each row belongs to one rule's relation in one partition, for one key (the values of the
pattern's ``keys``) and one counted value:

* a ``count`` with ``distinct`` keeps one row per distinct value (how many episodes had
  it, and the newest one); a windowed plain ``count`` one row per episode still inside its
  window; a plain ``count`` one row per key holding the tally;
* an ``earlier`` keeps one row per key: the latest episode, with the fields rules test.

So a partition's state is bounded by its distinct keys and values (or the episodes inside
a window), never by its history. A second kind of row, the *marker* (value
:data:`MARKER`), says a relation's state is kept for a partition at all: a pass that finds
no marker folds the episodes the rule already consumed into fresh state first (a database
written before aggregates existed, a copy, or a relation whose definition changed).

Rows are derived data: they are written in the transaction that applies the pass that
consumed the episodes (so they move with the watermarks, exactly once), and can always
be rebuilt from the episodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import orjson

from stargraph_mem.stores.scope import Partition

__all__ = [
    "AGGREGATE_TEXT_BYTES",
    "MARKER",
    "AggregateRow",
    "AggregateWindow",
    "AggregateWrite",
    "bounded",
    "counted_value",
    "marker_ref",
    "relation_ref",
]

MARKER: Final = "#kept"
"""The ``value`` of a relation's marker row (no counted value starts with ``#``: they are
JSON texts or episode ids, and episode ids are validated identifiers)."""


AGGREGATE_TEXT_BYTES: Final = 512
"""The longest key or counted value an aggregate row holds as itself; a longer one is held
as its digest (``#sha256:…``), on both backends, so that the row's primary key stays
within an index row (see :data:`~stargraph_mem.model.limits.KEY_BYTES`)."""
DIGEST: Final = "#sha256:"


def bounded(text: str) -> str:
    """``text``, or its digest when it is longer than :data:`AGGREGATE_TEXT_BYTES` (keys
    and counted values are JSON texts: none starts with ``#``, a digest stays itself)."""
    if len(text) * 4 <= AGGREGATE_TEXT_BYTES or text.startswith(DIGEST):
        return text
    raw = text.encode()
    if len(raw) <= AGGREGATE_TEXT_BYTES:
        return text
    return DIGEST + hashlib.sha256(raw).hexdigest()


def counted_value(value: object) -> str:
    """The ``value`` of a distinct count's row for one typed value (JSON, :func:`bounded`)."""
    return bounded(orjson.dumps(value).decode())


def relation_ref(partition: Partition, rule_id: str, relation: str, key: str) -> str:
    """The ``ref`` of one key's rows: unambiguous JSON, whatever the scope components hold
    (a long key is held as its digest: :func:`bounded`)."""
    return orjson.dumps([partition.user, partition.agent, rule_id, relation, bounded(key)]).decode()


def marker_ref(partition: Partition, rule_id: str, relation: str) -> str:
    """The ``ref`` of a relation's marker row in ``partition``."""
    return orjson.dumps([partition.user, partition.agent, rule_id, relation]).decode()


@dataclass(frozen=True, slots=True)
class AggregateRow:
    """One stored aggregate row (see the module)."""

    ref: str
    value: str
    n: int
    last_us: int
    last_id: str
    data: str = ""

    def __reduce__(self) -> tuple[type[AggregateRow], tuple[str, str, int, int, str, str]]:
        """Pickled as its fields (a worker process ships a pass's rows): several times
        faster than a slotted dataclass's default."""
        return AggregateRow, (self.ref, self.value, self.n, self.last_us, self.last_id, self.data)


@dataclass(frozen=True)
class AggregateWindow:
    """Which rows of windowed counts' keys a read needs: those last seen at or after
    ``low`` (inside a window of the pass's episodes), more than ``keep`` before the later
    of ``newest`` and their key's newest row (dropped by the pass), or counting one of
    ``values`` (the pass's own values: their rows are updated, whenever they were seen)."""

    refs: Sequence[str]
    low: int
    newest: int
    keep: int
    values: Sequence[str]


@dataclass
class AggregateWrite:
    """What one pass changes in its partition's aggregates."""

    pack: str
    partition: Partition
    upserts: list[AggregateRow] = field(default_factory=list)
    deletes: list[tuple[str, str]] = field(default_factory=list)
    """``(ref, value)`` of rows that left their window."""

    def rows(self) -> list[tuple[str, str, str, str, int, int, str, str]]:
        """Upserts as statement parameters."""
        key = self.partition.key
        return [
            (self.pack, r.ref, r.value, key, r.n, r.last_us, r.last_id, r.data)
            for r in self.upserts
        ]

    def gone(self) -> list[tuple[str, str, str]]:
        """Deletes as statement parameters."""
        return [(self.pack, ref, value) for ref, value in self.deletes]

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


def overlay(rows: Sequence[AggregateRow], writes: Sequence[AggregateWrite]) -> list[AggregateRow]:
    """``rows`` as they stand once ``writes`` (passes not committed yet) are applied."""
    table = {(r.ref, r.value): r for r in rows}
    for write in writes:
        for ref, value in write.deletes:
            table.pop((ref, value), None)
        for row in write.upserts:
            table[(row.ref, row.value)] = row
    return list(table.values())
