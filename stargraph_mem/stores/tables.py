"""Every stored table of a memory, with its columns and the key that orders its rows: what
a copy (:mod:`~stargraph_mem.stores.copy`) and a replay read and write whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["COPIED_TABLES", "Table"]


@dataclass(frozen=True, slots=True)
class Table:
    """One stored table as copied: its columns and the key that orders its rows."""

    name: str
    columns: tuple[str, ...]
    order: tuple[str, ...]


def _table(name: str, columns: str, order: str) -> Table:
    return Table(name, tuple(columns.split()), tuple(order.split()))


COPIED_TABLES: Final = (
    _table(
        "episodes",
        "seq id scope_key partition_key user session agent ts_us tz_offset_s content "
        "source_node metadata last_accessed_us access_count",
        "seq",
    ),
    _table("quarantine", "seq episode_id partition_key reason at_us", "seq"),
    _table(
        "facts",
        "rowid id user agent partition_key subject predicate object payload confidence "
        "valid_from_us valid_until_us superseded_by closed_by recorded_at_us rule_id delta_id "
        "observed_us reinforced_us reinforcement_base status layer memory_type trust",
        "rowid",
    ),
    _table(
        "lineage",
        "rowid fact_id delta_id rule_id pack_hash source_episode_ids promotion_ts_us "
        "confidence reason bindings predecessor_ids audit_seq",
        "rowid",
    ),
    _table(
        "audit",
        "seq delta_id kind rule_id pack_hash user agent partition_key applied_at_us delta",
        "seq",
    ),
    _table("reinforcements", "fact_id ts_us delta_id observed_us", "fact_id ts_us delta_id"),
    _table(
        "watermarks",
        "pack rule_id partition_key last_seq updated_at_us",
        "pack rule_id partition_key",
    ),
    _table(
        "rejections",
        "id pack rule_id partition_key user agent reason at_us",
        "id pack rule_id partition_key",
    ),
    _table("fact_access", "fact_id count last_access_us", "fact_id"),
    _table("fact_pins", "fact_id pinned_at_us reason", "fact_id"),
    _table(
        "fact_events",
        "seq fact_id event at_us rule_id delta_id reason related_id",
        "seq",
    ),
    _table(
        "aggregates",
        "pack ref value partition_key n last_us last_id data",
        "pack ref value",
    ),
    _table(
        "deferred_episodes",
        "pack partition_key rule_id seq episode_id ts_us",
        "pack partition_key rule_id seq",
    ),
    _table("pass_times", "pack partition_key now_us upto_seq", "pack partition_key now_us"),
    _table(
        "rule_runs",
        "pack rule_id partition_key anchor_us last_run_us runs token",
        "pack rule_id partition_key",
    ),
    _table("schedule_rules", "pack rule_id rule_index cadence", "pack rule_id"),
    _table(
        "entities",
        "id partition_key canonical_name folded type aliases created_us updated_us",
        "id",
    ),
    _table("entity_aliases", "partition_key folded entity_id alias", "partition_key folded"),
)
"""What a memory is: every table but derived data (the search index), the schema's own
ledgers (each database records how its schema was built; migration plans applied to the
source are not replayed on the target), partition claims and the scheduler lease."""
