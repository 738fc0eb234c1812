"""Promoted facts over PostgreSQL: the same behaviour as the SQLite fact store.

The apply state machine, row encoding, validation, filters and explain walks are the
shared code (:mod:`~stargraph_mem.stores.fact_apply`, :mod:`~stargraph_mem.stores.fact_rows`,
:mod:`~stargraph_mem.stores.fact_explain`); this module holds the transactions and the
search. A batch runs in one transaction holding the schema's ``facts`` advisory lock, so
its fact rowids and audit seqs follow the stored ones and a pass's basis check and its
writes see no other writer in between, as with SQLite's one writer.

Search uses PostgreSQL full-text search: a ``tsvector`` per fact ('simple' configuration,
text case folded and without accents, as SQLite's index), a GIN index, the query's words
(never its syntax) joined with OR, ranked by ``ts_rank``, then confidence and recency.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from stargraph_mem.errors import FactNotFoundError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.facts import Fact, FactAccess, FactHit, FactPattern, StatusEvent
from stargraph_mem.model.time import from_us, seconds_us, to_us, utc_now
from stargraph_mem.stores.aggregates import AggregateRow, AggregateWindow, AggregateWrite
from stargraph_mem.stores.fact import (
    ApplyResult,
    AuditRow,
    DeltaInput,
    EngineFact,
    Explanation,
    ProvenanceAdapter,
    ProvenanceBundle,
    Rejection,
    WatermarkAdvance,
    check_pack_hash,
)
from stargraph_mem.stores.fact_apply import (
    Batch,
    marks,
    other_claim,
    version,
)
from stargraph_mem.stores.fact_explain import explain, lineage_of
from stargraph_mem.stores.fact_passes import (
    CHUNK,
    RecordRuns,
    aggregates_in,
    apply_batch,
    apply_passes_in,
    checked_deltas,
    claim_many,
    group_current,
    marks_of,
    versions_of,
)
from stargraph_mem.stores.fact_rows import (
    Delta,
    PassBasis,
    PassWrite,
    audit_from_row,
    engine_fact,
    fact_from_row,
    fact_query,
    hits,
    pattern_filter,
    rejection_from_row,
    validate_deltas,
    with_provenance,
)
from stargraph_mem.stores.fact_status import (
    ARCHIVED,
    pin_fact,
    restore_in,
    status_history,
    unpin_fact,
)
from stargraph_mem.stores.models import MigrationPlan
from stargraph_mem.stores.pass_time import Deferral, deferred_of
from stargraph_mem.stores.plan_migration import Ledger, apply_plan, check_plan
from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.postgres.schema import TABLES
from stargraph_mem.stores.postgres.statements import CURRENT, FACTS, PLANS, RUNS, TOUCH
from stargraph_mem.stores.schedule_runs import RuleRun, record_runs
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.search_common import (
    check_fact_id,
    check_fact_ids,
    check_known,
    check_limit,
    fold,
    query_words,
    search_pattern,
)
from stargraph_mem.stores.sweep_reads import sweep_candidates, sweep_facts, sweep_partitions
from stargraph_mem.stores.sweep_schema import to_make

if TYPE_CHECKING:
    from stargraph_mem.stores.postgres.database import PostgresDatabase

__all__ = ["CHUNK", "PostgresFactStore", "search_query"]

_LOCK: Final = "facts"
_INDEX_LOCK: Final = "sweep_indexes"
_LEDGER: Final = Ledger(
    "fact_store_migrations",
    "INSERT INTO fact_store_migrations (name, applied_at_us, plan) VALUES (%s, %s, %s)",
    applied="SELECT plan FROM fact_store_migrations WHERE name = %s",
)


def search_query(
    words: list[str] | None,
    where: Sequence[str],
    params: Sequence[Any],
    limit: int,
    *,
    include_history: bool = False,
) -> tuple[str, list[Any]]:
    """SQL and parameters of a search: fact columns plus a score (higher is better)."""
    conditions = [*where] if include_history else [*where, "valid_until_us IS NULL"]
    condition = " AND ".join(conditions) or "TRUE"
    order = "confidence DESC, valid_from_us DESC, id"
    columns = FACTS.fact_columns
    if words is None:
        sql = f"SELECT {columns}, 0.0 FROM facts WHERE {condition} ORDER BY {order} LIMIT %s"
        return sql, [*params, limit]
    # each word quoted as one tsquery operand: words are letters, digits and _ only
    match = " | ".join(f"'{fold(word)}'" for word in words)
    sql = (
        f"SELECT {columns}, ts_rank(t.body, q.query) AS score "
        "FROM to_tsquery('simple', %s) AS q(query) "
        "JOIN fact_text t ON t.body @@ q.query JOIN facts ON facts.rowid = t.rowid "
        f"WHERE {condition} ORDER BY score DESC, {order} LIMIT %s"
    )
    return sql, [match, *params, limit]


class PostgresFactStore(PostgresRepository):
    """The fact store of a :class:`PostgresDatabase` (its pool, its schema).

    ``adapter`` carries listeners for new facts; the database's clock stamps
    ``recorded_at`` and audit rows.
    """

    def __init__(self, database: PostgresDatabase, *, adapter: ProvenanceAdapter | None = None):
        super().__init__(database)
        self.adapter = adapter if adapter is not None else ProvenanceAdapter()
        self._indexed: set[str] = set()
        """Sweep indexes made (or found made) through this store."""

    # --- lifecycle ----------------------------------------------------------------------

    @asynccontextmanager
    async def background_checkpoints(self) -> AsyncIterator[None]:
        """Nothing to do: the server checkpoints by itself (kept for the SQLite API)."""
        yield

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations to this store's tables (one transaction,
        recorded by name in ``fact_store_migrations``)."""
        check_plan(plan, store="fact", tables=TABLES["fact"])
        now_us = self.database.now_us()
        async with self.database.transaction("schema") as db:
            await apply_plan(db, plan, store="fact", ledger=_LEDGER, now_us=now_us, dialect=PLANS)

    # --- writes -------------------------------------------------------------------------

    async def apply_delta(self, delta: DeltaInput, *, pack_hash: str = "") -> ApplyResult:
        """Apply one delta (see :meth:`apply_deltas`)."""
        return await self.apply_deltas([delta], pack_hash=pack_hash)

    async def apply_deltas(
        self,
        deltas: Sequence[DeltaInput],
        *,
        pack_hash: str = "",
        watermarks: Sequence[WatermarkAdvance] = (),
        rejections: Sequence[Rejection] = (),
        runs: Sequence[RuleRun] = (),
        version_of: Partition | None = None,
        basis: PassBasis | None = None,
        aggregates: Sequence[AggregateWrite] = (),
    ) -> ApplyResult:
        """Apply a batch in order, in one transaction, with its watermarks and rejections
        (the semantics of :meth:`SQLiteFactStore.apply_deltas`)."""
        check_pack_hash(pack_hash)
        with gc_paused():
            return await self._apply(
                validate_deltas(deltas),
                pack_hash,
                tuple(watermarks),
                tuple(rejections),
                runs,
                version_of,
                basis,
                aggregates,
            )

    async def _apply(
        self,
        deltas: list[Delta],
        pack_hash: str,
        watermarks: tuple[WatermarkAdvance, ...],
        rejections: tuple[Rejection, ...],
        runs: Sequence[RuleRun],
        version_of: Partition | None,
        basis: PassBasis | None,
        aggregates: Sequence[AggregateWrite] = (),
    ) -> ApplyResult:
        async with self._applying(pack_hash) as (db, batch, record):
            return await apply_batch(
                db,
                FACTS,
                batch,
                deltas,
                watermarks=watermarks,
                rejections=rejections,
                runs=runs,
                version_of=version_of,
                basis=basis,
                record=record,
                aggregates=aggregates,
            )

    @asynccontextmanager
    async def _applying(self, pack_hash: str) -> AsyncIterator[tuple[PgConn, Batch, RecordRuns]]:
        """A transaction holding the ``facts`` lock, a batch on it and the run recorder;
        the adapter's staged facts are dropped afterwards."""
        now = self.database.clock()
        try:
            async with self.database.transaction(_LOCK) as db:
                yield (
                    db,
                    Batch(db, FACTS, self.adapter, pack_hash, now, episodes_here=True),
                    partial(record_runs, db, RUNS),
                )
        finally:
            self.adapter.discard()

    async def claim_partition(
        self, partition: Partition, holder: str, seconds: float
    ) -> str | None:
        """Claim ``partition`` for ``holder`` for ``seconds`` (renewing a claim it holds);
        None when the claim is ours, else the other holder's name."""
        now_us = to_us(utc_now(), "claim time")
        async with self.database.transaction(_LOCK) as db:
            other = await other_claim(db, FACTS, partition.key, holder, now_us)
            if other is not None:
                return other
            await db.execute(FACTS.put_claim, (partition.key, holder, now_us + seconds_us(seconds)))
        return None

    async def claim_partitions(
        self, partitions: Sequence[Partition], holder: str, seconds: float
    ) -> list[Partition]:
        """Claim each of ``partitions`` for ``holder`` for ``seconds`` in one transaction;
        the ones now held (see :meth:`claim_partition`), in the order given."""
        now_us = to_us(utc_now(), "claim time")
        keys = [p.key for p in partitions]
        async with self.database.transaction(_LOCK) as db:
            held = await claim_many(db, FACTS, keys, holder, now_us, now_us + seconds_us(seconds))
        return [p for p in partitions if p.key in held]

    async def release_partitions(self, partitions: Sequence[Partition], holder: str) -> None:
        """Give up ``holder``'s claims on ``partitions`` (those it holds)."""
        async with self.database.transaction(_LOCK) as db:
            await db.executemany(FACTS.drop_claim, [(p.key, holder) for p in partitions])

    async def release_partition(self, partition: Partition, holder: str) -> None:
        """Give up ``holder``'s claim on ``partition`` (nothing if it holds none)."""
        async with self.database.transaction(_LOCK) as db:
            await db.execute(FACTS.drop_claim, (partition.key, holder))

    async def basis(self, pack: str, partition: Partition) -> tuple[dict[str, int], int]:
        """The pack's watermarks for ``partition`` and the partition's facts version."""
        async with self.database.connection() as db:
            now = await version(db, FACTS, partition)
            return await marks(db, FACTS, pack, partition.key), now

    async def version(self, partition: Partition) -> int:
        """A number that changes whenever ``partition``'s facts do (its highest audit seq)."""
        async with self.database.connection() as db:
            return await version(db, FACTS, partition)

    # --- reads --------------------------------------------------------------------------

    async def _facts(self, sql: str, params: Sequence[Any]) -> list[Fact]:
        """The facts ``sql`` selects, with their lineage and pin time (``Fact.lineage``,
        ``Fact.pinned_at``)."""
        async with self.database.connection() as db:
            rows = await db.fetch(sql, params)
            return await with_provenance(db, FACTS, [fact_from_row(row) for row in rows])

    async def query(self, pattern: FactPattern) -> list[Fact]:
        """Facts matching ``pattern`` (current only unless ``include_history``)."""
        return await self._facts(*fact_query(FACTS, pattern))

    async def as_of(self, t: datetime, pattern: FactPattern | None = None) -> list[Fact]:
        """Facts valid at ``t`` (``valid_from <= t < valid_until``); naive ``t`` is refused."""
        as_of_us = to_us(t, "as_of time")
        return await self._facts(*fact_query(FACTS, pattern or FactPattern(), as_of_us=as_of_us))

    async def search(
        self,
        query: str = "",
        *,
        user: str | None = None,
        agent: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        min_confidence: float | None = None,
        limit: int = 10,
        touch: bool = True,
        include_history: bool = False,
    ) -> list[FactHit]:
        """Current facts matching any word of ``query``, best first, and the filters (see
        :meth:`SQLiteFactStore.search`); ``touch`` records each returned fact's access."""
        words = query_words(query)
        pattern = search_pattern(user, agent, subject, predicate, min_confidence)
        where, params = pattern_filter(pattern, "%s")
        sql, args = search_query(
            words, where, params, check_limit(limit), include_history=include_history
        )
        if not touch:
            async with self.database.connection() as db:
                return hits(await db.fetch(sql, args))
        async with self.database.transaction() as db:
            rows = await db.fetch(sql, args)
            if rows:
                now_us = self.database.now_us()
                await db.executemany(TOUCH, [(row[0], now_us) for row in rows])
        return hits(rows)

    async def record_access(self, fact_ids: Sequence[str], *, at: datetime | None = None) -> None:
        """Count one read of each fact at ``at`` (default: now); see
        :meth:`SQLiteFactStore.record_access`."""
        fact_ids = check_fact_ids(fact_ids)
        at_us = self.database.now_us() if at is None else to_us(at)
        async with self.database.transaction() as db:
            rows = await db.fetch("SELECT id FROM facts WHERE id = ANY(%s)", (list(fact_ids),))
            check_known(fact_ids, {str(row[0]) for row in rows})
            await db.executemany(TOUCH, [(fid, at_us) for fid in fact_ids])

    async def access(self, fact_id: str) -> FactAccess:
        """How often ``fact_id`` was read by access-recording reads, and when last."""
        fact_id = check_fact_id(fact_id)
        async with self.database.connection() as db:
            rows = await db.fetch(
                "SELECT f.id, a.count, a.last_access_us FROM facts f "
                "LEFT JOIN fact_access a ON a.fact_id = f.id WHERE f.id = %s",
                (fact_id,),
            )
        if not rows:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
        _, count, last_us = rows[0]
        return FactAccess(
            fact_id=fact_id,
            count=count or 0,
            last_access=None if last_us is None else from_us(last_us),
        )

    async def get(self, fact_id: str) -> Fact:
        """One fact by id, current or closed; :class:`FactNotFoundError` if unknown."""
        fact_id = check_fact_id(fact_id)
        found = await self._facts(FACTS.fact_by_id, (fact_id,))
        if not found:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
        return found[0]

    async def lineage(self, fact_id: str) -> ProvenanceBundle:
        """The provenance bundle recorded with a fact."""
        fact_id = check_fact_id(fact_id)
        async with self.database.connection() as db:
            return await lineage_of(db, FACTS, fact_id)

    async def current_facts(self, partition: Partition) -> list[EngineFact]:
        """The partition's current facts for the consolidation runtime (no pydantic)."""
        async with self.database.connection() as db:
            rows = await db.fetch(CURRENT, (partition.key,))
        return [engine_fact(row) for row in rows]

    async def watermark(self, pack: str, rule_id: str, partition: Partition) -> int:
        """Last consolidated episode seq for (pack, rule, partition); 0 when none."""
        async with self.database.connection() as db:
            seq = await db.scalar(
                "SELECT last_seq FROM watermarks WHERE pack = %s AND rule_id = %s "
                "AND partition_key = %s",
                (pack, rule_id, partition.key),
            )
        return 0 if seq is None else int(seq)

    async def watermarks(self, pack: str, partition: Partition) -> dict[str, int]:
        """Every rule's watermark for (pack, partition), by rule id."""
        async with self.database.connection() as db:
            return await marks(db, FACTS, pack, partition.key)

    async def audit_rows(self, partition: Partition | None = None) -> list[AuditRow]:
        """Applied deltas in application order, optionally for one partition."""
        where, params = ("WHERE partition_key = %s", (partition.key,)) if partition else ("", ())
        async with self.database.connection() as db:
            rows = await db.fetch(
                f"SELECT {FACTS.audit_columns} FROM audit {where} ORDER BY seq", params
            )
        return [audit_from_row(row) for row in rows]

    async def rejections(self, partition: Partition | None = None) -> list[Rejection]:
        """Recorded rejections, oldest first, optionally for one partition."""
        where, params = ("WHERE partition_key = %s", (partition.key,)) if partition else ("", ())
        async with self.database.connection() as db:
            rows = await db.fetch(
                'SELECT id, pack, rule_id, "user", agent, reason, at_us FROM rejections '
                f"{where} ORDER BY at_us, id, pack, rule_id, partition_key",
                params,
            )
        return [rejection_from_row(row) for row in rows]

    async def explain(self, fact_id: str) -> Explanation:
        """Rule, pack hash, reason, bindings, source episodes, supersession chain, audit
        and status history."""
        fact_id = check_fact_id(fact_id)
        async with self.database.connection() as db:
            return await explain(db, FACTS, fact_id)

    async def status_history(self, fact_id: str) -> list[StatusEvent]:
        """What happened to a fact, oldest first (see :class:`StatusEvent`)."""
        fact_id = check_fact_id(fact_id)
        async with self.database.connection() as db:
            return await status_history(db, FACTS, fact_id)

    # --- statuses and pins --------------------------------------------------------------

    async def pin(self, fact: str | Fact, *, reason: str = "") -> bool:
        """Pin a current fact (see :meth:`SQLiteFactStore.pin`); False when pinned already."""
        fact_id = check_fact_id(fact.id if isinstance(fact, Fact) else fact)
        now_us = self.database.now_us()
        async with self.database.transaction(_LOCK) as db:
            return await pin_fact(db, FACTS, fact_id, now_us, reason)

    async def unpin(self, fact_id: str, *, reason: str = "") -> bool:
        """Unpin a current fact; False when it was not pinned."""
        fact_id = check_fact_id(fact_id)
        now_us = self.database.now_us()
        async with self.database.transaction(_LOCK) as db:
            return await unpin_fact(db, FACTS, fact_id, now_us, reason)

    async def restore(self, fact_id: str, *, reason: str = "") -> Fact:
        """Make an archived fact current again as a new fact (see
        :meth:`SQLiteFactStore.restore`); returns the new fact."""
        fact_id = check_fact_id(fact_id)
        async with self._applying("") as (db, batch, _):
            return await restore_in(db, FACTS, batch, fact_id, reason)

    # --- many partitions at once (batched passes) ----------------------------------------

    async def pass_bases(
        self, pack: str, partitions: Sequence[Partition]
    ) -> list[tuple[dict[str, int], int]]:
        """:meth:`basis` of every partition (in the order given), in two statements."""
        keys = [p.key for p in partitions]
        async with self.database.connection() as db:
            versions = await versions_of(db, FACTS, keys)
            marks = await marks_of(db, FACTS, pack, keys)
        return [(marks.get(key, {}), versions[key]) for key in keys]

    async def aggregates_of(
        self, pack: str, refs: Sequence[str], window: AggregateWindow | None = None
    ) -> list[AggregateRow]:
        """The pack's durable aggregate rows with any of ``refs``, and those ``window``
        asks for (one statement)."""
        async with self.database.connection() as db:
            return await aggregates_in(db, FACTS, pack, refs, window)

    async def deferred_of(self, pack: str, partitions: Sequence[Partition]) -> list[list[Deferral]]:
        """The episodes passes of ``pack`` left for a later pass, per partition (see
        :meth:`SQLiteFactStore.deferred_of`)."""
        async with self.database.connection() as db:
            return await deferred_of(db, FACTS, pack, partitions)

    async def current_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """:meth:`current_facts` of every partition (in the order given), in one statement."""
        keys = [p.key for p in partitions]
        async with self.database.connection() as db:
            rows = await db.fetch(FACTS.current_of, (keys,))
        return group_current(rows, keys)

    async def archived_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """The archived facts (never restored) of every partition, in the order given, with
        status ``archived``, in one statement."""
        keys = [p.key for p in partitions]
        async with self.database.connection() as db:
            rows = await db.fetch(FACTS.archived_of, (keys,))
        return group_current(rows, keys, ARCHIVED)

    async def sweep_partitions(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> list[Partition]:
        """Partitions with a current fact a sweep's pre-filter ``where`` selects."""
        async with self.database.connection() as db:
            return await sweep_partitions(db, FACTS, where, params, archived=archived)

    async def sweep_candidates(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> dict[Partition, int]:
        """Per partition, how many facts a sweep's pre-filter ``where`` selects."""
        async with self.database.connection() as db:
            return await sweep_candidates(db, FACTS, where, params, archived=archived)

    async def sweep_facts(
        self, where: str, params: Sequence[Any], partitions: Sequence[Partition]
    ) -> list[list[EngineFact]]:
        """The current facts ``where`` selects in each of ``partitions``, in one statement."""
        async with self.database.connection() as db:
            return await sweep_facts(db, FACTS, where, params, partitions)

    async def ensure_sweep_indexes(self, names: Sequence[str]) -> None:
        """Create the sweep indexes ``names`` the schema does not have yet (see
        :meth:`SQLiteFactStore.ensure_sweep_indexes`), under an advisory lock so two
        workers never race on one."""
        todo = to_make(names, self._indexed)
        if not todo:
            return
        async with self.database.transaction(_INDEX_LOCK) as db:
            for _, statement in todo:
                await db.execute(statement)
        self._indexed.update(name for name, _ in todo)

    async def apply_passes(
        self, passes: Sequence[PassWrite], *, pack_hash: str = ""
    ) -> list[int | None]:
        """Apply many partitions' passes in one transaction (see
        :meth:`SQLiteFactStore.apply_passes`): stale or claimed passes are left out
        (``None``), any other error rolls every pass back."""
        check_pack_hash(pack_hash)
        with gc_paused():
            checked = [checked_deltas(p) for p in passes]
            async with self._applying(pack_hash) as (db, batch, record):
                return await apply_passes_in(db, FACTS, batch, passes, checked, record)
