"""The indexes sweep pre-filters read through, the same DDL on both backends.

They are made **on demand**: a store creates the ones a sweep's pre-filter names
(:attr:`~stargraph_mem.compiler.sweep_sql.SweepFilter.indexes`) before that sweep first
reads, and never otherwise. Each is a partial index over current facts, so closing a fact
removes its entries from every such index that exists; a fact's row and these entries sit
on unrelated pages, so an index no sweep reads would make every close (a sweep's delete,
a pass's update) write pages all over it for nothing. At a million facts the three
indexes a confidence sweep does not read made 45 % of its page writes.

Stores made before this had all four: PostgreSQL migration 4 created them and SQLite made
them on every writable open. PostgreSQL migration 5 drops them, and a SQLite file drops
them once on its first writable open (:data:`ON_DEMAND_MARK` in ``fact_store_meta`` says
it did); the first sweep that needs one creates it again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Final

__all__ = [
    "DROP_SWEEP_INDEXES",
    "ON_DEMAND_MARK",
    "SWEEP_INDEXES",
    "SWEEP_INDEX_NAMES",
    "index_ddl",
]

SWEEP_INDEXES: Final[Mapping[str, str]] = {
    "facts_current_confidence": "facts (confidence) WHERE valid_until_us IS NULL",
    "facts_current_valid_from": "facts (valid_from_us) WHERE valid_until_us IS NULL",
    "facts_current_predicate": "facts (predicate, subject) WHERE valid_until_us IS NULL",
    "facts_current_rule": "facts (rule_id) WHERE valid_until_us IS NULL",
    "facts_current_reinforced": (
        "facts ((coalesce(reinforced_us, valid_from_us))) WHERE valid_until_us IS NULL"
    ),
    "facts_current_observed": (
        "facts ((coalesce(observed_us, valid_from_us))) WHERE valid_until_us IS NULL"
    ),
    "facts_current_layer": "facts (layer) WHERE valid_until_us IS NULL",
}
"""Index name → what it indexes: current facts by confidence, by age, by (predicate,
subject), by rule, by the reinforcement and the observation time they started from (the
base of ``reinforced_at`` and ``observed_at``, whose later rows the pre-filter checks
through the reinforcements' own index), by layer (a promotion sweep over ``working``);
``partition_key`` is not needed, a candidate's row gives it."""
SWEEP_INDEX_NAMES: Final = tuple(SWEEP_INDEXES)


def index_ddl(name: str) -> str:
    """``CREATE INDEX IF NOT EXISTS`` of the sweep index ``name`` (a :class:`KeyError`
    for a name that is not one)."""
    return f"CREATE INDEX IF NOT EXISTS {name} ON {SWEEP_INDEXES[name]}"


DROP_SWEEP_INDEXES: Final = tuple(f"DROP INDEX IF EXISTS {name}" for name in SWEEP_INDEX_NAMES)
"""Drops every sweep index (a store made before they were made on demand)."""
ON_DEMAND_MARK: Final = "sweep_indexes_on_demand"
"""The ``fact_store_meta`` key of a SQLite file whose sweep indexes are made on demand."""


def to_make(names: Iterable[str], made: Collection[str]) -> list[tuple[str, str]]:
    """``(name, DDL)`` of each of ``names`` (once) a store has not made yet (``made``)."""
    return [(name, index_ddl(name)) for name in dict.fromkeys(names) if name not in made]
