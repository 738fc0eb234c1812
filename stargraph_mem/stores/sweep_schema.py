"""The indexes sweep pre-filters read through, the same DDL on both backends.

SQLite creates them with its schema on every writable open (``IF NOT EXISTS``: a file of
the current version made before them gets them then); PostgreSQL in its migration
``0004_sweep_indexes``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SWEEP_INDEXES", "SWEEP_INDEX_NAMES"]

SWEEP_INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS facts_current_confidence ON facts (confidence) "
    "WHERE valid_until_us IS NULL",
    "CREATE INDEX IF NOT EXISTS facts_current_valid_from ON facts (valid_from_us) "
    "WHERE valid_until_us IS NULL",
    "CREATE INDEX IF NOT EXISTS facts_current_predicate ON facts (predicate, subject) "
    "WHERE valid_until_us IS NULL",
    "CREATE INDEX IF NOT EXISTS facts_current_rule ON facts (rule_id) WHERE valid_until_us IS NULL",
)
"""The indexes sweep pre-filters use (the same DDL on SQLite and PostgreSQL): current facts
by confidence, by age, by (predicate, subject) and by rule; ``partition_key`` is not
needed, a candidate's row gives it."""
SWEEP_INDEX_NAMES: Final = tuple(ddl.split()[5] for ddl in SWEEP_INDEXES)
"""Their names (``CREATE INDEX IF NOT EXISTS <name> ON …``)."""
