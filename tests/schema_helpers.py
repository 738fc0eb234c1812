"""Taking a current SQLite fact store back to an older layout, for migration tests."""

from __future__ import annotations

import sqlite3

UNDO_VERSION_4 = (
    "DROP TABLE aggregates",
    "ALTER TABLE facts DROP COLUMN observed_us",
    "ALTER TABLE reinforcements DROP COLUMN observed_us",
    "DROP TABLE deferred_episodes",
    "DROP TABLE pass_times",
)
"""What version 4 added: aggregates, observation times, deferred episodes, pass times."""


def undo_version_4(db: sqlite3.Connection) -> None:
    """Remove what version 4 added (the caller sets the version it wants)."""
    for statement in UNDO_VERSION_4:
        db.execute(statement)
