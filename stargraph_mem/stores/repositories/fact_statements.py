"""The statements the fact repository hands the shared apply and read code.

Each statement is written once, in the qmark style, in
:mod:`~stargraph_mem.stores.repositories.fact_sql`, and rendered for one backend's
:class:`~stargraph_mem.stores.dialect.Dialect` into a :class:`FactStatements` (once per
dialect); :mod:`~stargraph_mem.stores.repositories.fact_apply` and
:mod:`~stargraph_mem.stores.repositories.fact_explain` run them through a
:class:`~stargraph_mem.stores.sql_conn.Conn` and never write SQL. Parameters are
positional; a parameter that carries a list of ids is passed through
:attr:`FactStatements.ids` (SQLite: JSON text for ``json_each``; PostgreSQL: an array).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.sql_conn import Insert, Many

__all__ = ["FactStatements"]


@dataclass(frozen=True, slots=True)
class FactStatements:
    """The fact store's shared code's SQL, rendered for one backend (columns in the shared
    order)."""

    dialect: Dialect
    """The backend's dialect, which rendered these statements."""
    mark: str
    """The positional parameter placeholder (``?`` or ``%s``)."""
    ids: Callable[[Sequence[str]], Any]
    """Encodes a list of ids as the one parameter the ``*_in`` statements take."""
    no_limit: Any
    """The ``LIMIT`` parameter that means no limit."""
    fact_columns: str
    """``id, user, agent, subject, …, delta_id`` of ``facts`` (see ``fact_from_row``)."""
    lineage_columns: str
    audit_columns: str
    last_ids: str
    """The last facts rowid and the last audit seq used, and the highest facts rowid the
    search index is known to hold (one row, three columns; the third NULL when each fact
    is indexed by the transaction that makes it)."""
    stored_facts_in: str
    """The ids among the given ones that name a stored fact (``(ids,)``)."""
    chunk_reads: str
    """What applying a chunk reads first, in one statement (``(named, made, markers,
    cited)``, each a list of ids): rows tagged 0 for the ids of ``made`` that name a stored
    fact, 1 for the ``markers`` (delta ids) already audited, 2 the ``fact_states_in`` row
    of each of ``named`` (from its second column on), 3 ``id`` and ``ts_us`` (in the fifth
    column) of the cited episodes, and one row tagged 4 with the :attr:`last_ids` row in
    its fifth to seventh columns."""
    chunk_reads_no_episodes: str
    """:attr:`chunk_reads` for a database without an episodes table (``(named, made,
    markers)``; no rows tagged 3)."""
    fact_states_in: str
    episode_columns: str
    """Names of the ``episodes`` table's columns (no rows when there is no such table)."""
    episode_partitions_in: str
    episode_owners_in: str
    insert_fact: Insert
    insert_lineage: Insert
    index_fact: Insert
    catch_up_text: str
    """Index the facts above the rowid ``(mark,)`` (see :data:`last_ids`; empty: the
    backend indexes each fact in the transaction that makes it)."""
    move_text_mark: str
    """Set the highest facts rowid the index holds ``(rowid,)``."""
    close: Many
    insert_audit: Insert
    insert_reinforcement: Insert
    upsert_watermark: str
    upsert_watermarks: Many
    """``upsert_watermark`` for many rows (of distinct keys) at once."""
    insert_rejection: str
    marks: str
    version: str
    marks_of: str
    """``partition_key, rule_id, last_seq`` of a pack (``(pack, keys)``), by key and rule."""
    versions_of: str
    """``key, max audit seq`` of each of the given keys (``(keys,)``)."""
    claims_of: str
    """``partition_key, holder, expires_us`` of the claims on the given keys."""
    fresh_of: str
    """What an apply checks of the passes it is given, in one read (``(packs, keys, keys,
    keys)``): rows ``(0, pack, key, rule_id, last_seq)`` for the packs' watermarks,
    ``(1, NULL, key, NULL, max audit seq)`` for each key, ``(2, NULL, key, holder,
    expires_us)`` for the claims on the keys."""
    fresh_one: str
    """:attr:`fresh_of` for one pass, by equalities (``(pack, key, key, key, key)``)."""
    current_of: str
    """Current facts (the current-facts columns, then ``partition_key``) of the given keys."""
    claim_of: str
    drop_claim: str
    renew_claim: str
    put_claim: str
    put_claims: Many
    """``put_claim`` for many rows (of distinct keys) at once."""
    """Claim ``(partition_key, holder, expires_us)``, replacing whatever claim was there."""
    predecessors_in: str
    fact_by_id: str
    lineage_of: str
    """Parameters ``(fact_id,)``; :attr:`mark` in it stands for the one parameter."""
    source_episodes_in: str
    audit_by_fact_in: str
    reinforcing_deltas: str
    audit_markers_in: str
    """``id, ts_us`` of the given episode ids (the fact's newest source observation)."""
    aggregates_in: str
    """``ref, value, n, last_us, last_id, data`` of a pack's aggregate rows with the given
    refs (``(pack, refs)``)."""
    aggregates_window: str
    """:attr:`aggregates_in`, then the rows of other refs a window needs (see
    ``AggregateWindow``): ``(pack, refs, pack, window refs, pack, low, newest, keep,
    values)``."""
    upsert_aggregate: str
    """``(pack, ref, value, partition_key, n, last_us, last_id, data)``, replacing the row."""
    delete_aggregate: str
    """``(pack, ref, value)``."""
    insert_access: Insert
    """Access statistics ``(fact_id, count, last_access_us)`` a new fact carries."""
    insert_pin: Insert
    """``(fact_id, pinned_at_us, reason)``."""
    delete_pin: str
    pin_of: str
    """``pinned_at_us, reason`` of one fact's pin (no row: not pinned)."""
    insert_event: Insert
    """``(seq, fact_id, event, at_us, rule_id, delta_id, reason, related_id)``."""
    last_event_seq: str
    events_of: str
    """``seq, event, at_us, rule_id, delta_id, reason, related_id`` of one fact, by seq."""
    set_status: Many
    """Flag or clear a current fact (``(status, id)`` rows; NULL status: ``current``)."""
    mark_restored: Many
    """``(successor, fact_id)``: name the fact that restored an archived one."""
    archived_of: str
    """Archived, never restored facts (the current-facts columns, then ``partition_key``)
    of the given keys."""
    index_text: Callable[[str], str]
    """What a fact's body text becomes before :attr:`index_fact` stores it."""
    made_from: str
    """Ids of the current facts of a partition whose sources (JSON text) start with an
    episode: ``(partition_key, len(prefix), prefix)``, the prefix being ``["<id>"``."""
    provenance_in: str
    """``id``, the lineage columns and ``pinned_at_us`` of the given fact ids (``(ids,)``):
    what ``Fact.lineage`` and ``Fact.pinned_at`` read."""
