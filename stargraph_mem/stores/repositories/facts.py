"""The fact repository, written once for every SQL backend.

:class:`SQLFactRepository` holds every method of the fact store: its body and its SQL,
written once in the qmark style and rendered for the backend's
:class:`~stargraph_mem.stores.dialect.Dialect` when the class is made. A backend's store
subclasses it and supplies only its connection handling: a read connection
(:meth:`~SQLFactRepository._facts_reading`), a write transaction
(:meth:`~SQLFactRepository._facts_writing`), the apply transaction and the run recorder; its
schema, migrations and dialect stay in the backend's own modules.

Statements run through :class:`~stargraph_mem.stores.sql_conn.Conn`: each backend's
connection decides how (SQLite: on the caller's thread where it may, ``executemany`` in
one transaction; PostgreSQL: ``COPY`` and array updates).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar, overload

from stargraph_mem.errors import FactNotFoundError, FactStatusError, StoreError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.facts import (
    Fact,
    FactAccess,
    FactHit,
    FactPattern,
    StatusChange,
    StatusEvent,
)
from stargraph_mem.model.layers import RecallMode
from stargraph_mem.model.time import from_us, seconds_us, to_us, utc_now
from stargraph_mem.stores.dialect import Dialect
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
from stargraph_mem.stores.repositories.aggregates import (
    AggregateRow,
    AggregateWindow,
    AggregateWrite,
)
from stargraph_mem.stores.repositories.fact_apply import Batch, marks, other_claim, version
from stargraph_mem.stores.repositories.fact_explain import explain, lineage_of
from stargraph_mem.stores.repositories.fact_passes import (
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
from stargraph_mem.stores.repositories.fact_rows import (
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
from stargraph_mem.stores.repositories.fact_sql import (
    ACCESS,
    AUDIT_ROWS,
    FACT_COLUMNS,
    KNOWN_IDS,
    REJECTIONS,
    WATERMARK,
    current,
    fact_statements,
    touch,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.repositories.fact_status import (
    ARCHIVED,
    pin_fact,
    restore_in,
    spec_status_history,
    status_history,
    unpin_fact,
    update_status_in,
)
from stargraph_mem.stores.repositories.pass_time import Deferral, deferred_of
from stargraph_mem.stores.repositories.schedule_runs import RuleRun
from stargraph_mem.stores.repositories.search import (
    check_fact_id,
    check_fact_ids,
    check_known,
    check_limit,
    query_words,
    search_pattern,
)
from stargraph_mem.stores.repositories.sweep_reads import (
    sweep_candidates,
    sweep_facts,
    sweep_partitions,
)
from stargraph_mem.stores.repositories.sweep_schema import to_make
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["FACTS_LOCK", "INDEX_LOCK", "ConnT", "FactQueries", "SQLFactRepository", "Search"]

FACTS_LOCK: Final = "facts"
"""What writers of facts hold (PostgreSQL: an advisory lock; SQLite has one writer)."""
INDEX_LOCK: Final = "sweep_indexes"
"""What a writer making sweep indexes holds, so two never race on one."""


@dataclass(frozen=True, slots=True)
class FactQueries:
    """The repository's own statements (beyond the shared code's), rendered."""

    current: str
    touch: str
    watermark: str
    access: str
    audit_all: str
    audit_of: str
    rejections_all: str
    rejections_of: str
    known_ids: str
    facts_by_ids: str


@cache
def queries(d: Dialect) -> FactQueries:
    """:class:`FactQueries` rendered for ``d`` (once per dialect)."""
    by_partition = "WHERE partition_key = ?"
    return FactQueries(
        current=current(d),
        touch=touch(d),
        watermark=d.sql(WATERMARK),
        access=d.sql(ACCESS),
        audit_all=d.sql(AUDIT_ROWS.format(where="")),
        audit_of=d.sql(AUDIT_ROWS.format(where=by_partition)),
        rejections_all=d.sql(REJECTIONS.format(where="")),
        rejections_of=d.sql(REJECTIONS.format(where=by_partition)),
        known_ids=d.sql(KNOWN_IDS.format(in_ids=d.in_ids())),
        facts_by_ids=d.sql(f"SELECT {FACT_COLUMNS}, closed_by FROM facts WHERE id {d.in_ids()}"),
    )


@dataclass(frozen=True, slots=True)
class Search:
    """What a search asks for, before it is made SQL (see :meth:`SQLFactRepository.search`)."""

    words: list[str] | None
    where: list[str]
    """Conditions over ``facts`` columns, qmark style."""
    params: list[Any]
    limit: int
    include_history: bool
    include_challenged: bool = False


ConnT = TypeVar("ConnT", bound=Conn)
"""The backend's connection type (what its hooks hand the repository)."""


class SQLFactRepository(Generic[ConnT]):
    """The :class:`~stargraph_mem.stores.protocols.FactRepository` over one SQL backend.

    A subclass names its :attr:`dialect` and its connection type and implements the
    connection hooks; ``adapter``
    carries listeners for new facts; ``_clock`` stamps ``recorded_at`` and audit rows.
    """

    dialect: ClassVar[Dialect]
    sql: ClassVar[FactStatements]
    """The shared code's statements, rendered for :attr:`dialect`."""
    queries: ClassVar[FactQueries]

    adapter: ProvenanceAdapter
    _clock: Callable[[], datetime]
    _episodes_here: bool | None
    """Whether the database holds the episodes (None: learnt by the first write)."""
    _indexed: set[str]
    """Sweep indexes made (or found made) through this store."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "dialect" in cls.__dict__:
            cls.sql = fact_statements(cls.dialect)
            cls.queries = queries(cls.dialect)

    def _repository(self, adapter: ProvenanceAdapter | None, episodes_here: bool | None) -> None:
        """Set up the repository's own state (from the subclass's ``__init__``)."""
        self.adapter = adapter if adapter is not None else ProvenanceAdapter()
        self._episodes_here = episodes_here
        self._indexed = set()

    # --- what a backend supplies --------------------------------------------------------

    def _facts_reading(self) -> AbstractAsyncContextManager[ConnT]:
        """A connection for reads (autocommit)."""
        raise NotImplementedError

    def _facts_writing(self, lock: str | None = FACTS_LOCK) -> AbstractAsyncContextManager[ConnT]:
        """A connection inside a write transaction holding ``lock`` (None: no lock)."""
        raise NotImplementedError

    def _apply_transaction(self) -> AbstractAsyncContextManager[ConnT]:
        """The write transaction a batch is applied in."""
        return self._facts_writing(FACTS_LOCK)

    def _run_recorder(self, db: ConnT) -> RecordRuns:
        """What writes a scheduler's pass records inside the transaction of ``db``."""
        raise NotImplementedError

    def _now_us(self) -> int:
        """The injected clock as UTC microseconds."""
        return to_us(self._clock(), "clock()")

    async def _search_without_writing(
        self, db: ConnT, search: Search
    ) -> list[Sequence[Any]] | None:
        """The rows of a search that records no access, or None when the search index must
        first be brought up to date (in a write transaction)."""
        return await db.fetch(*self._search_sql(search))

    async def _catch_up_text(self, db: ConnT) -> None:
        """Index the facts the search index lacks (inside the write transaction of ``db``);
        nothing where each fact is indexed by the transaction that makes it."""

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
        """Apply a batch in order, in one transaction, with its watermarks and rejections.

        Deltas already in the audit table are skipped. Any error (validation, conflict,
        a watermark going backwards, a listener raising) rolls the whole batch back.
        ``runs`` (a scheduler's pass records) are written first, as a compare-and-set:
        another scheduler's earlier pass raises :class:`PassConflictError` and rolls back.
        With ``basis`` (a consolidation pass), the stored watermarks and facts version are
        first compared with what the pass read: a change raises :class:`StalePassError`.
        """
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
        runs: Sequence[RuleRun] = (),
        version_of: Partition | None = None,
        basis: PassBasis | None = None,
        aggregates: Sequence[AggregateWrite] = (),
    ) -> ApplyResult:
        async with self._applying(pack_hash) as (db, batch, record):
            return await apply_batch(
                db,
                self.sql,
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
    async def _applying(
        self, pack_hash: str, at: datetime | None = None
    ) -> AsyncIterator[tuple[ConnT, Batch, RecordRuns]]:
        """The apply transaction, a batch on it (stamped ``at``, default now) and the run
        recorder; the adapter's staged facts are dropped afterwards."""
        now = self._clock() if at is None else at
        try:
            async with self._apply_transaction() as db:
                batch = Batch(db, self.sql, self.adapter, pack_hash, now, self._episodes_here)
                yield db, batch, self._run_recorder(db)
                self._episodes_here = batch.episodes_here
        finally:
            self.adapter.discard()

    async def apply_passes(
        self, passes: Sequence[PassWrite], *, pack_hash: str = ""
    ) -> list[int | None]:
        """Apply many partitions' passes in one transaction (group commit).

        Each pass's basis is checked as :meth:`apply_deltas` does; a pass whose partition
        changed, or that another holder claims, is left out (``None``: compute it again),
        the others are applied. Returns each applied partition's facts version after it.
        Any other error (validation, conflict, a run another scheduler applied first) rolls
        every pass back.
        """
        check_pack_hash(pack_hash)
        with gc_paused():
            checked = [checked_deltas(p) for p in passes]
            async with self._applying(pack_hash) as (db, batch, record):
                return await apply_passes_in(db, self.sql, batch, passes, checked, record)

    # --- claims and bases ---------------------------------------------------------------

    async def claim_partition(
        self, partition: Partition, holder: str, seconds: float
    ) -> str | None:
        """Claim ``partition`` for ``holder`` for ``seconds`` (renewing a claim it holds).

        Returns None when the claim is ours, else the other holder's name. An expired
        claim, or one held by a process of this host that no longer runs, is taken over.
        """
        now_us = to_us(utc_now(), "claim time")
        async with self._facts_writing() as db:
            other = await other_claim(db, self.sql, partition.key, holder, now_us)
            if other is not None:
                return other
            until_us = now_us + seconds_us(seconds)
            await db.execute(self.sql.put_claim, (partition.key, holder, until_us))
        return None

    async def claim_partitions(
        self, partitions: Sequence[Partition], holder: str, seconds: float
    ) -> list[Partition]:
        """Claim each of ``partitions`` for ``holder`` for ``seconds`` in one transaction;
        the ones now held (see :meth:`claim_partition`), in the order given."""
        now_us = to_us(utc_now(), "claim time")
        keys = [p.key for p in partitions]
        until_us = now_us + seconds_us(seconds)
        async with self._facts_writing() as db:
            held = await claim_many(db, self.sql, keys, holder, now_us, until_us)
        return [p for p in partitions if p.key in held]

    async def release_partitions(self, partitions: Sequence[Partition], holder: str) -> None:
        """Give up ``holder``'s claims on ``partitions`` (those it holds)."""
        async with self._facts_writing() as db:
            await db.executemany(self.sql.drop_claim, [(p.key, holder) for p in partitions])

    async def release_partition(self, partition: Partition, holder: str) -> None:
        """Give up ``holder``'s claim on ``partition`` (nothing if it holds none)."""
        async with self._facts_writing() as db:
            await db.execute(self.sql.drop_claim, (partition.key, holder))

    async def basis(self, pack: str, partition: Partition) -> tuple[dict[str, int], int]:
        """The pack's watermarks for ``partition`` and the partition's facts version, read
        before a pass reads episodes and facts (see :class:`PassBasis`)."""
        async with self._facts_reading() as db:
            now = await version(db, self.sql, partition)
            return await marks(db, self.sql, pack, partition.key), now

    async def version(self, partition: Partition) -> int:
        """A number that changes whenever ``partition``'s facts do: its highest audit seq
        (every change to facts, reinforcements included, writes an audit row)."""
        async with self._facts_reading() as db:
            return await version(db, self.sql, partition)

    # --- reads --------------------------------------------------------------------------

    async def _facts(self, sql: str, params: Sequence[Any]) -> list[Fact]:
        """The facts ``sql`` selects, with their lineage and pin time (one read)."""
        async with self._facts_reading() as db:
            rows = await db.fetch(sql, params)
            return await with_provenance(db, self.sql, [fact_from_row(r) for r in rows])

    async def query(self, pattern: FactPattern) -> list[Fact]:
        """Facts matching ``pattern`` (current only unless ``include_history``), with their
        lineage and pin time (``Fact.lineage``, ``Fact.pinned_at``)."""
        return await self._facts(*fact_query(self.sql, pattern))

    async def as_of(self, t: datetime, pattern: FactPattern | None = None) -> list[Fact]:
        """Facts valid at ``t`` (``valid_from <= t < valid_until``); naive ``t`` is refused."""
        as_of_us = to_us(t, "as_of time")
        return await self._facts(*fact_query(self.sql, pattern or FactPattern(), as_of_us=as_of_us))

    def _search_sql(self, search: Search, table: str = "") -> tuple[str, list[Any]]:
        """SQL and parameters of a search: fact columns plus a score (higher is better);
        ``table``: the search index to read (default: the schema's)."""
        where = search.where
        if not search.include_history:
            where = [*where, _CURRENT] if search.include_challenged else [*where, _ACTIVE]
        condition = " AND ".join(where) or "TRUE"
        params = [*search.params, search.limit]
        if search.words is None:
            text = f"SELECT {FACT_COLUMNS}, 0.0 FROM facts WHERE {condition} ORDER BY {_ORDER}"
            return self.dialect.sql(f"{text} LIMIT ?"), params
        text = self.dialect.search_hits(FACT_COLUMNS, condition, _ORDER, table)
        return self.dialect.sql(text), [self.dialect.match(search.words), *params]

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
        include_challenged: bool = False,
        mode: RecallMode = "full_context",
    ) -> list[FactHit]:
        """Current facts matching any word of ``query``, best first, and the filters.

        Words are matched in subject, predicate, object and payload (case and accents
        ignored); an empty query searches by the filters alone, by confidence. Challenged
        facts are left out unless ``include_challenged``; with ``include_history``, every
        fact is searched, closed ones too. With ``touch`` (the default)
        each returned fact's access count and last access are recorded (see
        :meth:`access`) in the same call; ``touch=False`` reads without a trace (and,
        on SQLite, works on a read-only file). ``mode`` keeps the memory types a recall
        mode returns (specification 004: ``facts_only``, ``facts_plus_rules``,
        ``full_context``).
        """
        words = query_words(query)
        pattern = search_pattern(user, agent, subject, predicate, min_confidence, mode)
        where, params = pattern_filter(pattern)
        search = Search(
            words, where, params, check_limit(limit), include_history, include_challenged
        )
        if not touch:
            async with self._facts_reading() as db:
                found = await self._search_without_writing(db, search)
            if found is not None:
                return hits(found)
        async with self._facts_writing(None) as db:
            await self._catch_up_text(db)
            rows = await db.fetch(*self._search_sql(search))
            if touch and rows:
                now_us = self._now_us()
                await db.executemany(self.queries.touch, [(row[0], now_us) for row in rows])
        return hits(rows)

    async def search_ids(
        self,
        query: str,
        *,
        user: str,
        agent: str,
        limit: int = 10,
        include_history: bool = False,
        include_challenged: bool = False,
        mode: RecallMode = "full_context",
        valid_from_after_us: int | None = None,
        valid_from_before_us: int | None = None,
    ) -> list[str]:
        """The ids of what :meth:`search` with ``touch=False`` returns for one partition, in
        its order, without building the facts (recall reads back only those it keeps);
        those whose ``valid_from`` is before ``valid_from_after_us`` or not before
        ``valid_from_before_us`` (microseconds since the epoch) left out."""
        pattern = search_pattern(user, agent, None, None, None, mode)
        where, params = pattern_filter(pattern)
        search = Search(
            query_words(query),
            where,
            params,
            check_limit(limit),
            include_history,
            include_challenged,
        )
        async with self._facts_reading() as db:
            rows = await self._search_without_writing(db, search)
        if rows is None:
            async with self._facts_writing(None) as db:
                await self._catch_up_text(db)
                rows = await db.fetch(*self._search_sql(search))
        low = -(2**63) if valid_from_after_us is None else valid_from_after_us
        high = 2**63 - 1 if valid_from_before_us is None else valid_from_before_us
        return [str(row[0]) for row in rows if low <= int(row[8]) < high]

    async def record_access(self, fact_ids: Sequence[str], *, at: datetime | None = None) -> None:
        """Count one read of each fact at ``at`` (default: now): for reads made outside
        :meth:`search`, such as a fact an agent put in a prompt. All or nothing; an unknown
        id raises :class:`FactNotFoundError` and records nothing."""
        fact_ids = check_fact_ids(fact_ids)
        at_us = self._now_us() if at is None else to_us(at)
        async with self._facts_writing(None) as db:
            known = await db.fetch(self.queries.known_ids, (self.dialect.ids(fact_ids),))
            check_known(fact_ids, {str(row[0]) for row in known})
            await db.executemany(self.queries.touch, [(fid, at_us) for fid in fact_ids])

    async def access(self, fact_id: str) -> FactAccess:
        """How often ``fact_id`` was read by access-recording reads, and when last."""
        fact_id = check_fact_id(fact_id)
        async with self._facts_reading() as db:
            rows = await db.fetch(self.queries.access, (fact_id,))
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
        found = await self._facts(self.sql.fact_by_id, (fact_id,))
        if not found:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
        return found[0]

    async def get_many(self, fact_ids: Sequence[str]) -> list[Fact]:
        """The facts of ``fact_ids`` that exist, current or closed, in the order asked
        (one read, with lineage and pin times); unknown ids are left out."""
        wanted = check_fact_ids(fact_ids)
        if not wanted:
            return []
        found = await self._facts(self.queries.facts_by_ids, (self.dialect.ids(wanted),))
        by_id = {fact.id: fact for fact in found}
        return [by_id[fid] for fid in dict.fromkeys(wanted) if fid in by_id]

    async def lineage(self, fact_id: str) -> ProvenanceBundle:
        """The provenance bundle recorded with a fact."""
        fact_id = check_fact_id(fact_id)
        async with self._facts_reading() as db:
            return await lineage_of(db, self.sql, fact_id)

    async def current_facts(self, partition: Partition) -> list[EngineFact]:
        """The partition's current facts for the consolidation runtime (no pydantic)."""
        async with self._facts_reading() as db:
            rows = await db.fetch(self.queries.current, (partition.key,))
        return [engine_fact(row) for row in rows]

    async def watermark(self, pack: str, rule_id: str, partition: Partition) -> int:
        """Last consolidated episode seq for (pack, rule, partition); 0 when none."""
        async with self._facts_reading() as db:
            seq = await db.scalar(self.queries.watermark, (pack, rule_id, partition.key))
        return 0 if seq is None else int(seq)

    async def watermarks(self, pack: str, partition: Partition) -> dict[str, int]:
        """Every rule's watermark for (pack, partition), by rule id."""
        async with self._facts_reading() as db:
            return await marks(db, self.sql, pack, partition.key)

    async def audit_rows(self, partition: Partition | None = None) -> list[AuditRow]:
        """Applied deltas in application order, optionally for one partition."""
        q = self.queries
        sql, params = (q.audit_of, (partition.key,)) if partition else (q.audit_all, ())
        async with self._facts_reading() as db:
            rows = await db.fetch(sql, params)
        return [audit_from_row(row) for row in rows]

    async def rejections(self, partition: Partition | None = None) -> list[Rejection]:
        """Recorded rejections, oldest first, optionally for one partition."""
        q = self.queries
        sql, params = (q.rejections_of, (partition.key,)) if partition else (q.rejections_all, ())
        async with self._facts_reading() as db:
            rows = await db.fetch(sql, params)
        return [rejection_from_row(row) for row in rows]

    async def explain(self, fact_id: str) -> Explanation:
        """Rule, pack hash, reason, bindings, source episodes, supersession chain, audit
        and status history."""
        fact_id = check_fact_id(fact_id)
        async with self._facts_reading() as db:
            return await explain(db, self.sql, fact_id)

    @overload
    async def status_history(
        self, fact_id: str, *, shape: Literal["events"] = "events"
    ) -> list[StatusEvent]: ...
    @overload
    async def status_history(
        self, fact_id: str, *, shape: Literal["spec"]
    ) -> list[StatusChange]: ...
    async def status_history(
        self, fact_id: str, *, shape: Literal["events", "spec"] = "events"
    ) -> list[StatusEvent] | list[StatusChange]:
        """What happened to a fact, oldest first (see :class:`StatusEvent`); with
        ``shape="spec"``, its status transitions as specification 004 writes them,
        ``{old, new, reason, changed_at}`` (see :class:`StatusChange`)."""
        fact_id = check_fact_id(fact_id)
        if shape not in ("events", "spec"):
            raise StoreError(f"shape must be 'events' or 'spec' (got {shape!r})")
        async with self._facts_reading() as db:
            if shape == "spec":
                return await spec_status_history(db, self.sql, fact_id)
            return await status_history(db, self.sql, fact_id)

    async def update_status(
        self,
        fact_id: str,
        status: str,
        *,
        reason: str = "",
        merged_into: str | None = None,
        at: datetime | None = None,
        user: str | None = None,
        agent: str | None = None,
    ) -> Fact:
        """Move a fact to ``status`` (specification 004's ``update_status``) and return it
        as it is now: ``challenged`` flags a current fact (it stays current, left out of
        search and recall), ``active`` clears the flag, ``merged`` (with ``merged_into``, a
        current fact of the same user and agent), ``superseded`` (with ``merged_into``, such
        a fact and not older: its successor), ``invalidated``, ``deleted``, ``expired`` or
        ``archived`` close it. A reason is required for ``challenged`` and
        ``invalidated``. Each change is in the audit (a delete delta of rule
        ``update_status``) or, clearing a flag, a status event, and in
        :meth:`status_history`. Stamped ``at`` (an aware time, not before the fact became
        valid; default now). ``user``/``agent``, when given, must be the fact's. Anything
        refused raises (:class:`FactStatusError`, :class:`FactNotFoundError`) and
        changes nothing."""
        fact_id = check_fact_id(fact_id)
        if merged_into is not None:
            merged_into = check_fact_id(merged_into)
        if at is not None:
            try:
                at = from_us(to_us(at, "at"))
            except (ValueError, TypeError) as exc:
                raise FactStatusError(
                    f"cannot update the status of fact {fact_id}: {exc}",
                    fact_id=fact_id,
                    status=None,
                ) from exc
        async with self._applying("", at) as (db, batch, _):
            return await update_status_in(
                db, self.sql, batch, fact_id, status, reason, merged_into, (user, agent)
            )

    # --- statuses and pins --------------------------------------------------------------

    async def pin(self, fact: str | Fact, *, reason: str = "") -> bool:
        """Pin a current fact (sweeps leave it alone); False when it was pinned already.
        A closed or unknown fact raises and changes nothing. ``fact`` is its id or, as in
        stargraph 0.8, the :class:`Fact` itself (read from this store: facts enter only
        through deltas)."""
        fact_id = check_fact_id(fact.id if isinstance(fact, Fact) else fact)
        now_us = self._now_us()
        async with self._facts_writing() as db:
            return await pin_fact(db, self.sql, fact_id, now_us, reason)

    async def unpin(self, fact_id: str, *, reason: str = "") -> bool:
        """Unpin a current fact; False when it was not pinned."""
        fact_id = check_fact_id(fact_id)
        now_us = self._now_us()
        async with self._facts_writing() as db:
            return await unpin_fact(db, self.sql, fact_id, now_us, reason)

    async def restore(self, fact_id: str, *, reason: str = "") -> Fact:
        """Make an archived fact current again as a new fact (same statement, payload and
        confidence; it keeps the archived one's reinforcement, access and pin); the
        archived fact stays closed. Returns the new fact."""
        fact_id = check_fact_id(fact_id)
        async with self._applying("") as (db, batch, _):
            return await restore_in(db, self.sql, batch, fact_id, reason)

    # --- many partitions at once (batched passes) ----------------------------------------

    async def pass_bases(
        self, pack: str, partitions: Sequence[Partition]
    ) -> list[tuple[dict[str, int], int]]:
        """:meth:`basis` of every partition (in the order given), in two statements."""
        keys = [p.key for p in partitions]
        async with self._facts_reading() as db:
            versions = await versions_of(db, self.sql, keys)
            found = await marks_of(db, self.sql, pack, keys)
        return [(found.get(key, {}), versions[key]) for key in keys]

    async def aggregates_of(
        self, pack: str, refs: Sequence[str], window: AggregateWindow | None = None
    ) -> list[AggregateRow]:
        """The pack's durable aggregate rows with any of ``refs``, and those ``window``
        asks for (one statement)."""
        async with self._facts_reading() as db:
            return await aggregates_in(db, self.sql, pack, refs, window)

    async def deferred_of(self, pack: str, partitions: Sequence[Partition]) -> list[list[Deferral]]:
        """The episodes passes of ``pack`` left for a later pass (stamped after their pass
        time), per partition in the order given, in one statement."""
        async with self._facts_reading() as db:
            return await deferred_of(db, self.sql, pack, partitions)

    async def current_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """:meth:`current_facts` of every partition (in the order given), in one statement."""
        keys = [p.key for p in partitions]
        async with self._facts_reading() as db:
            rows = await db.fetch(self.sql.current_of, (self.dialect.ids(keys),))
        return group_current(rows, keys)

    async def archived_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """The archived facts (never restored) of every partition, in the order given, with
        status ``archived``, in one statement."""
        keys = [p.key for p in partitions]
        async with self._facts_reading() as db:
            rows = await db.fetch(self.sql.archived_of, (self.dialect.ids(keys),))
        return group_current(rows, keys, ARCHIVED)

    async def sweep_partitions(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> list[Partition]:
        """Partitions with a current fact a sweep's pre-filter ``where`` selects."""
        async with self._facts_reading() as db:
            return await sweep_partitions(db, self.sql, where, params, archived=archived)

    async def sweep_candidates(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> dict[Partition, int]:
        """Per partition, how many facts a sweep's pre-filter ``where`` selects."""
        async with self._facts_reading() as db:
            return await sweep_candidates(db, self.sql, where, params, archived=archived)

    async def sweep_facts(
        self, where: str, params: Sequence[Any], partitions: Sequence[Partition]
    ) -> list[list[EngineFact]]:
        """The current facts ``where`` selects in each of ``partitions``, in one statement."""
        async with self._facts_reading() as db:
            return await sweep_facts(db, self.sql, where, params, partitions)

    async def ensure_sweep_indexes(self, names: Sequence[str]) -> None:
        """Create the sweep indexes ``names`` the schema does not have yet (one
        transaction, holding :data:`INDEX_LOCK`; a name already made through this store
        costs nothing)."""
        todo = to_make(names, self._indexed)
        if not todo:
            return
        async with self._facts_writing(INDEX_LOCK) as db:
            for _, statement in todo:
                await db.execute(statement)
        self._indexed.update(name for name, _ in todo)


_CURRENT: Final = "valid_until_us IS NULL"
_ACTIVE: Final = "valid_until_us IS NULL AND status IS NULL"
"""Current and not flagged (``challenged`` facts are current, left out of searches)."""
_ORDER: Final = "confidence DESC, valid_from_us DESC, id"
"""How search results that score alike are ranked."""
