"""Applying a batch of deltas, backend-neutral: the state machine both fact stores share.

:class:`Batch` runs inside the caller's open transaction on a
:class:`~stargraph_mem.stores.sql_conn.Conn`, with the backend's
:class:`~stargraph_mem.stores.repositories.fact_statements.FactStatements`: chunk by chunk it skips
deltas applied before (exactly once by delta id), resolves what updates, deletes and noops
name, stages facts for the provenance adapter and writes facts, lineage, index, closes,
audit and reinforcements with one bulk write per table (``Conn.insert_many`` and
``Conn.run_many``: ``executemany`` on SQLite, ``COPY`` and array updates on PostgreSQL);
then watermarks and rejections. Fact states are mirrored in memory so later deltas see
earlier ones' effects. :mod:`~stargraph_mem.stores.repositories.fact_passes` runs it in a
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from stargraph_mem.errors import DeltaValidationError, FactConflictError, StalePassError, StoreError
from stargraph_mem.model import lifecycle
from stargraph_mem.model.deltas import DELTA_BY_KIND, DELTA_KINDS, Delta, DeltaBase, FactDelta
from stargraph_mem.model.facts import Fact
from stargraph_mem.model.layers import DEFAULT_LAYER, DEFAULT_MEMORY_TYPE
from stargraph_mem.model.lifecycle import ARCHIVED, Carried, Event, FactState
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.fact import (
    ApplyResult,
    ProvenanceAdapter,
    ProvenanceBundle,
    Rejection,
    WatermarkAdvance,
    aware_utc,
    sanitize_bundle,
    trusted,
)
from stargraph_mem.stores.repositories.fact_rows import (
    PassBasis,
    holder_is_dead,
    json_text,
    key_of,
    write_rows,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.repositories.pass_time import resumed_present
from stargraph_mem.stores.repositories.search import TEXT_LAG_MAX, body_text
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn, Insert, Many

__all__ = [
    "Batch",
    "check_basis",
    "check_forward",
    "check_pass_scope",
    "marks",
    "other_claim",
    "version",
]

_OPEN = (None, None, None, None)
"""``valid_until_us, superseded_by, closed_by, status`` of a fact that is still current."""


def check_forward(index: int, adv: WatermarkAdvance, prior: int) -> None:
    """A watermark never moves backwards: :class:`StoreError` naming it otherwise."""
    if adv.last_seq < prior:
        raise StoreError(
            f"watermarks[{index}]: {adv.pack}/{adv.rule_id} at {adv.partition.key} would go "
            f"backwards from {prior} to {adv.last_seq}",
            index=index,
            stored=prior,
            requested=adv.last_seq,
        )


def _at(index: int, exc: DeltaValidationError) -> DeltaValidationError:
    field = str(exc.context.get("field", ""))
    return DeltaValidationError(f"deltas[{index}].{exc.message}", index=index, field=field)


def check_pass_scope(deltas: Sequence[Delta], basis: PassBasis) -> None:
    """A pass writes only its own partition."""
    partition = basis.partition
    for index, delta in enumerate(deltas):
        if (delta.user, delta.agent) != (partition.user, partition.agent):
            raise DeltaValidationError(
                f"deltas[{index}]: a pass over {partition.key} emitted a delta for "
                f"({delta.user!r}, {delta.agent!r})",
                index=index,
            )


async def check_basis(db: Conn, sql: FactStatements, basis: PassBasis) -> None:
    """Raise :class:`StalePassError` unless the stored state is what the pass read."""
    stored = await marks(db, sql, basis.pack, basis.partition.key)
    now = await version(db, sql, basis.partition)
    if not await resumed_present(db, sql, basis.pack, basis.partition, basis.time):
        raise StalePassError(
            f"pack '{basis.pack}' at {basis.partition.key}: another pass consumed deferred "
            "episodes this pass read",
            pack=basis.pack,
            partition=basis.partition.key,
        )
    if stored != basis.marks or now != basis.version:
        raise StalePassError(
            f"pack '{basis.pack}' at {basis.partition.key}: the partition changed while the "
            f"pass was computed (version {basis.version} → {now})",
            pack=basis.pack,
            partition=basis.partition.key,
        )
    key = basis.partition.key
    if not basis.holder:
        other = await other_claim(db, sql, key, "", basis.now_us)
        if other is not None:
            raise StalePassError(
                f"pack '{basis.pack}' at {key}: the partition is claimed by {other}",
                pack=basis.pack,
                partition=key,
            )
    elif basis.release:
        await db.execute(sql.drop_claim, (key, basis.holder))
    else:
        await db.execute(sql.renew_claim, (basis.expires_us, key, basis.holder))


async def other_claim(
    db: Conn, sql: FactStatements, key: str, holder: str, now_us: int
) -> str | None:
    """Who else holds a live claim on partition ``key`` (None: nobody, or ``holder``).

    A claim that expired, or whose holder ran on this host and no longer runs, is
    cleared here (inside the caller's write transaction).
    """
    rows = await db.fetch(sql.claim_of, (key,))
    if not rows or str(rows[0][0]) == holder:
        return None
    other = str(rows[0][0])
    if int(rows[0][1]) > now_us and not holder_is_dead(other):
        return other
    await db.execute(sql.drop_claim, (key, other))
    return None


async def marks(db: Conn, sql: FactStatements, pack: str, partition_key: str) -> dict[str, int]:
    """Every rule's watermark for (pack, partition), by rule id."""
    rows = await db.fetch(sql.marks, (pack, partition_key))
    return {str(rule_id): int(seq) for rule_id, seq in rows}


async def version(db: Conn, sql: FactStatements, partition: Partition) -> int:
    """The partition's facts version: its highest audit seq (0 when none)."""
    value = await db.scalar(sql.version, (partition.key,))
    return 0 if value is None else int(value)


def _state(row: Sequence[Any]) -> FactState:
    """A :class:`~stargraph_mem.model.lifecycle.FactState` from a ``fact_states_in`` row."""
    (_, user, agent, from_us, until_us, status, successor, reinforced_us, count, observed_us,
     access_count, last_access_us, pinned_at_us, pin_reason) = row  # fmt: skip
    return FactState(
        user,
        agent,
        from_us,
        until_us is not None,
        status,
        successor is not None and status == ARCHIVED,
        int(reinforced_us),
        int(count),
        int(observed_us),
        int(access_count),
        int(last_access_us),
        None if pinned_at_us is None else (int(pinned_at_us), str(pin_reason)),
    )


class Batch:
    """Applies validated deltas inside an open transaction, chunk by chunk.

    Fact states (scope, validity) are mirrored in memory so later deltas see earlier
    ones' effects and conflicts are found before each chunk's rows are written.
    """

    def __init__(
        self,
        db: Conn,
        sql: FactStatements,
        adapter: ProvenanceAdapter,
        pack_hash: str,
        now: datetime,
        episodes_here: bool | None = None,
    ) -> None:
        self.db = db
        self.sql = sql
        self.adapter = adapter
        self.pack_hash = pack_hash
        self.now_us = to_us(now, "clock()")
        self.now = now.astimezone(UTC)
        self.known: dict[str, FactState] = {}
        self.closed_here: set[str] = set()
        self.seen: set[str] = set()
        self.counts = dict.fromkeys(DELTA_KINDS, 0)
        self.skipped = 0
        self.reinforced = 0
        self.created: list[str] = []
        self.closed: list[str] = []
        self._audit: list[tuple[Any, ...]] = []
        self._closes: list[tuple[Any, ...]] = []
        self._reinforcements: list[tuple[Any, ...]] = []
        self._lifecycles: list[tuple[int | None, int, int]] = []
        """Per staged fact: newest observation, reinforcement time and count base."""
        self._carried: list[tuple[Any, ...]] = []
        self._pins: list[tuple[Any, ...]] = []
        self._events: list[tuple[Any, ...]] = []
        self._restores: list[tuple[str, str]] = []
        self._flags: list[tuple[str | None, str]] = []
        """``(status, fact_id)``: current facts whose flag changes (``challenged``)."""
        """Access rows, pin rows and status events new facts carry; restored facts."""
        self._times: dict[str, int] = {}
        """Observation time of the chunk's cited episodes that this database holds."""
        self._made_here: dict[tuple[str, str], list[str]] = {}
        """Facts this batch made, by (partition key, the episode each was made from)."""
        self._event_seq = -1
        self._asserting: list[tuple[Fact, ProvenanceBundle]] = []
        self._asserting_at: list[tuple[int, int]] = []
        """The chunk's new (fact, bundle) pairs for the adapter, and for each the index and
        audit seq of its delta."""
        self._rowid = self._seq = -1
        """Last facts rowid and audit seq used (read when the first chunk starts)."""
        self._text_mark: int | None = None
        """The highest facts rowid the search index holds, when the backend lets it trail
        the facts (see :mod:`~stargraph_mem.stores.sqlite.search`)."""
        self.check_sources: bool | None = None
        """Whether cited episodes are checked against the delta's scope (None: not yet
        known whether this file has an episodes table)."""
        self.episodes_here = episodes_here
        """Whether the database holds the episodes (None: not known yet); a fact's newest
        source observation is read from them."""
        self._last_ts, self._last_us = self.now, self.now_us

    @property
    def last_seq(self) -> int:
        """The audit seq of the last delta this batch wrote (-1: none yet)."""
        return self._seq

    async def apply_chunk(self, start: int, deltas: Sequence[Delta]) -> None:
        """Apply ``deltas`` (indices from ``start``) and write their rows."""
        bodies = [delta.canonical_body() for delta in deltas]
        ids = [delta.delta_id for delta in deltas]
        stored = await self._read(deltas, ids)
        await self._check_sources(start, deltas)
        for offset, (delta, did, body) in enumerate(zip(deltas, ids, bodies, strict=True)):
            if did in stored or did in self.seen:
                self.skipped += 1
                continue
            self.seen.add(did)
            self._seq += 1
            if delta.closed_ids:
                delta = await self._by_episode(start + offset, delta, did)
            try:
                self._apply(start + offset, delta, did)
            except DeltaValidationError as exc:
                raise _at(start + offset, exc) from exc
            self._audit_row(delta, did, body)
        pairs, at = self._asserting, self._asserting_at
        self._asserting, self._asserting_at = [], []
        try:
            self.adapter.assert_many(pairs)
        except DeltaValidationError as exc:
            position = exc.context.get("position")
            if position is None:
                raise
            raise _at(at[position][0], exc) from exc
        await self._flush([seq for _, seq in at])

    async def _by_episode(self, index: int, delta: Delta, did: str) -> Delta:
        """``delta`` with each ``replaces`` id that names no fact but an episode replaced by
        the current fact of the delta's (user, agent) made from that episode (the first of
        its sources), as stargraph 0.8's deltas name what they replace; ``delta`` itself
        when every id names a fact. Its id (``did``) and audit row stay those of ``delta``
        as given. Two current facts made from one episode: :class:`FactConflictError`."""
        unknown = [fid for fid in delta.closed_ids if fid not in self.known]
        if not unknown:
            return delta
        key = key_of(str(delta.user), str(delta.agent))
        resolved: dict[str, str] = {}
        for eid in unknown:
            made = await self._made_from(key, eid)
            if len(made) > 1:
                raise FactConflictError(
                    f"deltas[{index}] ({delta.kind} {did}) cannot replace {eid}: episode "
                    f"{eid!r} made {len(made)} current facts ({', '.join(made)})",
                    fact_ids=[eid],
                    candidates=made,
                    index=index,
                    delta_id=did,
                )
            if made:
                resolved[eid] = made[0]
        if not resolved:
            return delta
        replaces = [resolved.get(fid, fid) for fid in delta.closed_ids]
        return delta.model_copy(update={"replaces": replaces})

    async def _made_from(self, key: str, eid: str) -> list[str]:
        """The current facts of partition ``key`` made from episode ``eid`` (their first
        source), stored or made earlier in this batch, sorted."""
        prefix = json_text([eid])[:-1]  # '["<id>"': the sources' JSON text begins so
        rows = await self.db.fetch(self.sql.made_from, (key, len(prefix), prefix))
        stored = [str(row[0]) for row in rows]
        missing = sorted(set(stored) - self.known.keys())
        if missing:
            for row in await self.db.fetch(self.sql.fact_states_in, (self.sql.ids(missing),)):
                self.known[row[0]] = _state(row)
        here = self._made_here.get((key, eid), [])
        found = {fid for fid in [*stored, *here] if fid in self.known}
        return sorted(fid for fid in found if not self.known[fid].closed)

    async def _read(self, deltas: Sequence[Delta], ids: Sequence[str]) -> set[str]:
        """What the chunk's apply reads before it writes, in one statement (see
        ``FactStatements.chunk_reads``); the ids of ``deltas`` applied before (add and
        update deltas by the fact they made) are returned, the states of the facts they
        name that the batch has not seen yet go to ``known``, the times of the episodes
        their facts come from to ``_times``, and (for the first chunk) the last facts
        rowid and audit seq used. A record's pass, which updates a fact, reads all that in
        one statement (it took four)."""
        made: list[str] = []
        markers: list[str] = []
        for delta, did in zip(deltas, ids, strict=True):
            if delta.creates:
                made.append("f" + did[1:])  # add and update deltas: by the fact they made
            else:
                markers.append(did)
        named: set[str] = set()
        for delta in deltas:
            named.update(delta.named_ids)
        missing = sorted(named - self.known.keys())
        cited = sorted(
            {eid for delta in deltas if delta.observes for eid in delta.source_episode_ids}
        )
        self._times = {}
        if self._seq >= 0 and not (made or markers or missing or cited):
            return set()
        sql, encode = self.sql, self.sql.ids
        params = [encode(missing), encode(made), encode(markers)]
        statement = sql.chunk_reads_no_episodes
        if cited and await self.has_episodes():
            statement = sql.chunk_reads
            params.append(encode(cited))
        stored: set[str] = set()
        for row in await self.db.fetch(statement, params):
            tag = int(row[0])
            if tag == 0:
                stored.add("d" + str(row[1])[1:])
            elif tag == 1:
                stored.add(str(row[1]))
            elif tag == 2:
                self.known[row[1]] = _state(row[1:])
            elif tag == 3:
                self._times[str(row[1])] = int(row[4])
            elif self._seq < 0:  # the first chunk numbers its rows after the stored ones
                rowid, seq, mark = row[4:7]
                self._rowid, self._seq = int(rowid or 0), int(seq or 0)
                if sql.catch_up_text and mark is not None:
                    self._text_mark = int(mark)
        return stored

    async def _check_sources(self, start: int, deltas: Sequence[Delta]) -> None:
        """Refuse a delta citing an episode of another (user, agent) as its source.

        Ids the file does not hold pass (the fact store may stand alone); a pass's own
        deltas are not checked here (it read them from its partition, see ``PassBasis``).
        """
        if self.check_sources is None:
            self.check_sources = await self.has_episodes()
        if not self.check_sources:
            return
        cited = sorted({eid for delta in deltas for eid in delta.source_episode_ids})
        if not cited:
            return
        rows = await self.db.fetch(self.sql.episode_partitions_in, (self.sql.ids(cited),))
        owner = {str(eid): str(key) for eid, key in rows}
        for offset, delta in enumerate(deltas):
            key = key_of(delta.user, delta.agent)
            for position, eid in enumerate(delta.source_episode_ids):
                if owner.get(eid, key) != key:
                    field = f"deltas[{start + offset}].source_episode_ids[{position}]"
                    raise DeltaValidationError(
                        f"{field}: episode {eid!r} belongs to another (user, agent) than "
                        f"the delta's ({delta.user!r}, {delta.agent!r})",
                        index=start + offset,
                        field=field,
                    )

    async def has_episodes(self) -> bool:
        """Whether this database has an episodes table (asked once)."""
        if self.episodes_here is None:
            columns = await self.db.fetch(self.sql.episode_columns)
            self.episodes_here = any(str(row[0]) == "partition_key" for row in columns)
        return self.episodes_here

    def observed(self, ids: Sequence[str]) -> int | None:
        """The time of the newest of ``ids`` (None: none is stored here): when a fact made,
        or reinforced, from them was last observed."""
        times = self._times
        return max((times[e] for e in ids if e in times), default=None)

    def _apply(self, index: int, delta: Delta, did: str) -> None:
        """Stage what ``delta`` does: close what it replaces, make its fact, reinforce."""
        if not isinstance(delta, FactDelta):
            sanitize_bundle(self._bundle(delta, did, ()))
        if delta.closed_ids:
            self._close(index, delta, did, delta.successor_id)
        if isinstance(delta, FactDelta):
            self._assert(index, delta, did, tuple(delta.closed_ids))
        if delta.reinforced_ids:
            self._reinforce(index, delta, did)
        self.counts[delta.kind] += 1

    def _bundle(
        self, delta: DeltaBase, did: str, predecessors: tuple[str, ...]
    ) -> ProvenanceBundle:
        return trusted(
            ProvenanceBundle,
            {
                "rule_id": delta.rule_id,
                "pack_hash": self.pack_hash,
                "delta_id": did,
                "source_episode_ids": tuple(delta.source_episode_ids),
                "promotion_ts": delta.promotion_ts,
                "confidence": delta.confidence,
                "reason": delta.reason,
                "bindings": delta.bindings,
                "predecessor_ids": predecessors,
            },
        )

    def _assert(
        self, index: int, delta: FactDelta, did: str, predecessors: tuple[str, ...]
    ) -> None:
        """Stage the delta's fact for the adapter (which checks the chunk's pairs at once)."""
        fact_id = "f" + did[1:]
        payload = delta.fact
        subject, predicate, obj = payload.triple  # "" for a payload-only fact
        fact = trusted(
            Fact,
            {
                "id": fact_id,
                "user": delta.user,
                "agent": delta.agent,
                "subject": subject,
                "predicate": predicate,
                "object": obj,
                "payload": payload.payload,
                "confidence": delta.confidence,
                "valid_from": delta.promotion_ts,
                "valid_until": None,
                "superseded_by": None,
                "recorded_at": self.now,
                "rule_id": delta.rule_id,
                "delta_id": did,
                "status": "current",
                "layer": delta.layer or DEFAULT_LAYER,
                "memory_type": delta.memory_type or DEFAULT_MEMORY_TYPE,
                "trust": 1.0 if delta.trust is None else delta.trust,
            },
        )
        self._asserting.append((fact, self._bundle(delta, did, predecessors)))
        self._asserting_at.append((index, self._seq))
        user, agent = str(delta.user), str(delta.agent)  # resolved before the batch applies
        from_us = self._us(delta.promotion_ts)
        seen = self.observed(delta.source_episode_ids)
        own = Carried(from_us, 0, from_us if seen is None else seen)
        pin: tuple[int, str] | None = None
        if predecessors:
            own, pin = self._carry(delta, did, fact_id, own, from_us)
            seen = own.observed_us
        self._lifecycles.append((seen, own.reinforced_at_us, own.reinforcement_count))
        state = FactState(
            user,
            agent,
            from_us,
            False,
            reinforced_at_us=own.reinforced_at_us,
            reinforcement_count=own.reinforcement_count,
            observed_us=own.observed_us,
            access_count=own.access_count,
            last_access_us=own.last_access_us,
            pin=pin,
        )
        self.known[fact_id] = state
        self.created.append(fact_id)
        made_from = (key_of(user, agent), delta.source_episode_ids[0])
        self._made_here.setdefault(made_from, []).append(fact_id)

    def _carry(
        self, delta: FactDelta, did: str, fact_id: str, own: Carried, at_us: int
    ) -> tuple[Carried, tuple[int, str] | None]:
        """What a new fact takes from those it replaces (see
        :func:`~stargraph_mem.model.lifecycle.carry`), and the pin it takes over; stages
        its access row, pin row and event."""
        before = [self.known[p] for p in delta.closed_ids]
        made = lifecycle.carry(delta.fact_lifecycle, own, before)
        if made.access_count or made.last_access_us:
            self._carried.append((fact_id, made.access_count, made.last_access_us))
        pin = lifecycle.carried_pin(before, delta.closed_ids)
        if pin is None:
            return made, None
        (pinned_at_us, reason), _ = pin
        self._pins.append((fact_id, pinned_at_us, reason))
        self._event(lifecycle.pin_event(fact_id, at_us, pin), delta, did)
        return made, pin[0]

    def _event(self, event: Event, delta: DeltaBase, did: str) -> None:
        """Stage a status event of ``delta`` (numbered when the chunk is written)."""
        self._events.append(
            (event.fact_id, event.event, event.at_us, delta.rule_id, did, event.reason,
             event.related_id)
        )  # fmt: skip

    def _us(self, ts: datetime) -> int:
        """``to_us`` for delta times: a pass stamps one time on all its deltas."""
        if ts is not self._last_ts:
            if ts != self._last_ts:
                self._last_us = to_us(aware_utc(ts, "promotion_ts"))
            self._last_ts = ts
        return self._last_us

    def _close(self, index: int, delta: Delta, did: str, successor: str | None) -> None:
        """Close what ``delta`` replaces with its status; an archived fact a replacing
        delta names is restored instead (it stays closed, and names its successor)."""
        self._check_refs(index, delta, did, delta.closed_ids, "replace")
        if successor is not None and not delta.creates:  # a merge: into a current fact
            self._check_refs(index, delta, did, [successor], "merge into")
        until_us = self._us(delta.promotion_ts)
        named = [self.known[fid] for fid in delta.closed_ids]
        for close, state in zip(lifecycle.closes(delta, named, until_us), named, strict=True):
            fid = close.fact_id
            if close.flag:
                if state.status != close.status:  # flagged already: nothing changes
                    state.status = close.status
                    self._flags.append((close.status, fid))
                    self._event(
                        lifecycle.Event(fid, close.status, close.at_us, delta.reason, None),
                        delta,
                        did,
                    )
                continue
            if close.restore and successor is not None:  # archived: checked above
                state.restored = True
                self._restores.append((successor, fid))
                self._event(lifecycle.restore_event(close, delta.reason, successor), delta, did)
                continue
            state.closed, state.status = True, close.status
            self.closed_here.add(fid)
            self._closes.append((close.at_us, successor, did, close.status, fid))
            self.closed.append(fid)

    def _reinforce(self, index: int, delta: Delta, did: str) -> None:
        """Confirm the facts ``delta`` reinforces (see
        :func:`~stargraph_mem.model.lifecycle.reinforced`)."""
        ids = delta.reinforced_ids
        self._check_refs(index, delta, did, ids, "reinforce")
        ts_us = to_us(delta.promotion_ts)
        seen = self.observed(delta.source_episode_ids)
        for fid in ids:
            state = self.known[fid]
            state.reinforced_at_us, state.reinforcement_count, state.observed_us = (
                lifecycle.reinforced(state, ts_us, seen)
            )
            self._reinforcements.append((fid, ts_us, did, seen))
        self.reinforced += len(ids)

    def _check_refs(
        self, index: int, delta: Delta, did: str, ids: Sequence[str], verb: str
    ) -> None:
        """Raise :class:`FactConflictError` naming every fact ``ids`` cannot resolve to."""
        problems: dict[str, str] = {}
        for position, fid in enumerate(ids):
            problem = self._problem(fid, delta)
            if fid in ids[:position]:
                problem = "named twice in this delta"
            if problem is not None:
                problems.setdefault(fid, problem)
        if problems:
            detail = "; ".join(f"{fid}: {why}" for fid, why in problems.items())
            raise FactConflictError(
                f"deltas[{index}] ({delta.kind} {did}) cannot {verb} {detail}",
                fact_ids=list(problems),
                problems=problems,
                index=index,
                delta_id=did,
            )

    def _problem(self, fid: str, delta: Delta) -> str | None:
        state = self.known.get(fid)
        if state is None:
            return "unknown fact"
        if (state.user, state.agent) != (delta.user, delta.agent):
            return "fact belongs to another (user, agent)"
        if fid in self.closed_here:
            return "already closed earlier in this batch"
        if not state.closed:
            return None
        return lifecycle.refusal(state.status, state.restored, delta)

    def _audit_row(self, delta: Delta, did: str, body: bytes) -> None:
        self._audit.append(
            (
                self._seq,
                did,
                delta.kind,
                delta.rule_id,
                self.pack_hash,
                delta.user,
                delta.agent,
                key_of(delta.user, delta.agent),
                self.now_us,
                body.decode(),
            )
        )

    async def _flush(self, seqs: list[int]) -> None:
        """Write the chunk: new facts and lineage first, so closes can reach them
        (``seqs``: the audit seq of each staged fact's delta).

        A fact created and closed within the chunk is inserted already closed: same rows,
        one write instead of an insert and an update.
        """
        sql = self.sql
        staged = self.adapter.take_staged()
        first = self._rowid + 1
        self._rowid += len(staged)
        lifecycles, self._lifecycles = self._lifecycles, []
        rows = [
            write_rows(
                first + offset,
                fact,
                bundle,
                seq,
                self._recorded_us(fact),
                self._us(bundle.promotion_ts),
                lifecycle,
            )
            for offset, ((fact, bundle), seq, lifecycle) in enumerate(
                zip(staged, seqs, lifecycles, strict=True)
            )
        ]
        new_ids = {fact_row[1] for fact_row, _ in rows}
        closing = {close[4]: close[:4] for close in self._closes if close[4] in new_ids}
        closes = [close for close in self._closes if close[4] not in closing]
        writes: tuple[tuple[Insert | Many, Sequence[Sequence[Any]]], ...] = (
            (sql.insert_fact, [fact_row + closing.get(fact_row[1], _OPEN) for fact_row, _ in rows]),
            (sql.insert_lineage, [lineage_row for _, lineage_row in rows]),
            (
                sql.index_fact,
                [self._indexed(fact_row) for fact_row, _ in rows]
                if self._text_mark is None
                else (),
            ),
            (sql.close, closes),
            (sql.set_status, self._flags),
            (sql.insert_audit, self._audit),
            (sql.insert_reinforcement, self._reinforcements),
            (sql.insert_access, self._carried),
            (sql.insert_pin, self._pins),
            (sql.insert_event, await self._event_rows()),
            (sql.mark_restored, self._restores),
        )
        for statement, params in writes:
            if not params:
                continue
            if isinstance(statement, Insert):
                await self.db.insert_many(statement, params)
            else:
                await self.db.run_many(statement, params)
        self._audit, self._closes, self._reinforcements = [], [], []
        self._carried, self._pins, self._restores, self._flags = [], [], [], []
        mark = self._text_mark
        if mark is not None and self._rowid - mark >= TEXT_LAG_MAX:
            await self.db.execute(sql.catch_up_text, (mark,))
            await self.db.execute(sql.move_text_mark, (self._rowid,))
            self._text_mark = self._rowid

    async def _event_rows(self) -> list[tuple[Any, ...]]:
        """The chunk's status events, numbered after the stored ones (read once)."""
        events, self._events = self._events, []
        if not events:
            return []
        if self._event_seq < 0:
            self._event_seq = int(await self.db.scalar(self.sql.last_event_seq) or 0)
        first = self._event_seq + 1
        self._event_seq += len(events)
        return [(first + offset, *event) for offset, event in enumerate(events)]

    def _indexed(self, fact_row: tuple[Any, ...]) -> tuple[int, str]:
        """The search index row (rowid, text) of a ``facts`` row built by ``write_rows``."""
        text = body_text(fact_row[5], fact_row[6], fact_row[7], fact_row[8])
        return fact_row[0], self.sql.index_text(text)

    def _recorded_us(self, fact: Fact) -> int:
        return self.now_us if fact.recorded_at is self.now else to_us(fact.recorded_at)

    async def advance(self, advances: Sequence[WatermarkAdvance]) -> tuple[WatermarkAdvance, ...]:
        """Move watermarks forward (in order); any step backwards raises :class:`StoreError`."""
        final: dict[tuple[str, str, str], WatermarkAdvance] = {}
        stored: dict[tuple[str, str], dict[str, int]] = {}
        for index, adv in enumerate(advances):
            key = (adv.pack, adv.rule_id, adv.partition.key)
            if key in final:
                prior = final[key].last_seq
            else:
                group = (adv.pack, adv.partition.key)
                if group not in stored:  # one read per (pack, partition), not per rule
                    stored[group] = await marks(self.db, self.sql, *group)
                prior = stored[group].get(adv.rule_id, 0)
            check_forward(index, adv, prior)
            final[key] = adv
        rows = [(*key, adv.last_seq, self.now_us) for key, adv in final.items()]
        if rows:
            await self.db.executemany(self.sql.upsert_watermark, rows)
        return tuple(final.values())

    async def reject(self, rejections: Sequence[Rejection]) -> None:
        """Record rejected episodes (a repeat of the same rejection is ignored)."""
        rows = [
            (
                r.id,
                r.pack,
                r.rule_id,
                r.partition.key,
                r.partition.user,
                r.partition.agent,
                r.reason,
                self.now_us if r.at is None else to_us(r.at),
            )
            for r in rejections
        ]
        if rows:
            await self.db.executemany(self.sql.insert_rejection, rows)

    def result(
        self, watermarks: tuple[WatermarkAdvance, ...], rejections: int, version: int | None
    ) -> ApplyResult:
        counts = {DELTA_BY_KIND[kind].counted_as: n for kind, n in self.counts.items()}
        return ApplyResult(
            version=version,
            **counts,
            skipped=self.skipped,
            reinforced=self.reinforced,
            rejections=rejections,
            created_fact_ids=tuple(self.created),
            closed_fact_ids=tuple(self.closed),
            watermarks=watermarks,
        )
