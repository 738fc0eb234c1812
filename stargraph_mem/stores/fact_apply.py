"""Applying a batch of deltas, backend-neutral: the state machine both fact stores share.

:class:`Batch` runs inside the caller's open transaction on a
:class:`~stargraph_mem.stores.sql_conn.Conn`, with the backend's
:class:`~stargraph_mem.stores.fact_statements.FactStatements`: chunk by chunk it skips
deltas applied before (exactly once by delta id), resolves what updates, deletes and noops
name, stages facts for the provenance adapter and writes facts, lineage, index, closes,
audit and reinforcements with one bulk write per table (``Conn.insert_many`` and
``Conn.run_many``: ``executemany`` on SQLite, ``COPY`` and array updates on PostgreSQL);
then watermarks and rejections. Fact states are mirrored in memory so later deltas see
earlier ones' effects. :mod:`~stargraph_mem.stores.fact_passes` runs it in a transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stargraph_mem.errors import DeltaValidationError, FactConflictError, StalePassError, StoreError
from stargraph_mem.model.deltas import AddDelta, DeleteDelta, NoopDelta, UpdateDelta
from stargraph_mem.model.facts import Fact
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
from stargraph_mem.stores.fact_rows import (
    KINDS,
    Delta,
    PassBasis,
    holder_is_dead,
    json_text,
    key_of,
    write_rows,
)
from stargraph_mem.stores.fact_statements import FactStatements
from stargraph_mem.stores.fact_status import ARCHIVED
from stargraph_mem.stores.pass_time import resumed_present
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.search_common import TEXT_LAG_MAX, body_text
from stargraph_mem.stores.sql_conn import Conn, Insert, Many

_Replacing = UpdateDelta | DeleteDelta

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


@dataclass(slots=True)
class _State:
    """What the batch needs to know about a fact it may close, reinforce or carry on."""

    user: str
    agent: str
    valid_from_us: int
    closed: bool
    status: str | None = None
    """The closing status (None while current)."""
    restored: bool = False
    """An archived fact some fact restores already."""
    reinforced_us: int = 0
    count: int = 0
    observed_us: int = 0
    access_count: int = 0
    last_access_us: int = 0
    pin: tuple[int, str] | None = None
    """``(pinned_at_us, reason)`` when pinned."""


def _state(row: Sequence[Any]) -> _State:
    """A :class:`_State` from a ``fact_states_in`` row."""
    (_, user, agent, from_us, until_us, status, successor, reinforced_us, count, observed_us,
     access_count, last_access_us, pinned_at_us, pin_reason) = row  # fmt: skip
    return _State(
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
        self.known: dict[str, _State] = {}
        self.closed_here: set[str] = set()
        self.seen: set[str] = set()
        self.counts = dict.fromkeys(KINDS, 0)
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
        the facts (see :mod:`~stargraph_mem.stores.sqlite_search`)."""
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
        if self._seq < 0:
            ((rowid, seq, mark),) = await self.db.fetch(self.sql.last_ids)
            self._rowid, self._seq = int(rowid or 0), int(seq or 0)
            if self.sql.catch_up_text and mark is not None:
                self._text_mark = int(mark)
        stored = await self._stored(deltas, ids)
        await self._load(deltas)
        await self._check_sources(start, deltas)
        await self._episode_times(deltas)
        for offset, (delta, did, body) in enumerate(zip(deltas, ids, bodies, strict=True)):
            if did in stored or did in self.seen:
                self.skipped += 1
                continue
            self.seen.add(did)
            self._seq += 1
            if isinstance(delta, UpdateDelta | DeleteDelta):
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

    async def _by_episode(self, index: int, delta: _Replacing, did: str) -> _Replacing:
        """``delta`` with each ``replaces`` id that names no fact but an episode replaced by
        the current fact of the delta's (user, agent) made from that episode (the first of
        its sources), as stargraph 0.8's deltas name what they replace; ``delta`` itself
        when every id names a fact. Its id (``did``) and audit row stay those of ``delta``
        as given. Two current facts made from one episode: :class:`FactConflictError`."""
        unknown = [fid for fid in delta.replaces if fid not in self.known]
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
        replaces = [resolved.get(fid, fid) for fid in delta.replaces]
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

    async def _stored(self, deltas: Sequence[Delta], ids: Sequence[str]) -> set[str]:
        """Ids of ``deltas`` applied before: add and update deltas by the fact they made."""
        made: list[str] = []
        markers: list[str] = []
        for delta, did in zip(deltas, ids, strict=True):
            if isinstance(delta, AddDelta | UpdateDelta):
                made.append("f" + did[1:])
            else:
                markers.append(did)
        stored: set[str] = set()
        if made:
            rows = await self.db.fetch(self.sql.stored_facts_in, (self.sql.ids(made),))
            stored.update("d" + str(row[0])[1:] for row in rows)
        if markers:
            rows = await self.db.fetch(self.sql.stored_markers_in, (self.sql.ids(markers),))
            stored.update(str(row[0]) for row in rows)
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

    async def _episode_times(self, deltas: Sequence[Delta]) -> None:
        """Read the times of the episodes the chunk's facts and reinforcements come from
        (one statement)."""
        cited = sorted(
            {
                eid
                for delta in deltas
                if not isinstance(delta, DeleteDelta)
                for eid in delta.source_episode_ids
            }
        )
        self._times = {}
        if cited and await self.has_episodes():
            rows = await self.db.fetch(self.sql.episode_times_in, (self.sql.ids(cited),))
            self._times = {str(eid): int(ts) for eid, ts in rows}

    def observed(self, ids: Sequence[str]) -> int | None:
        """The time of the newest of ``ids`` (None: none is stored here): when a fact made,
        or reinforced, from them was last observed."""
        times = self._times
        return max((times[e] for e in ids if e in times), default=None)

    async def _load(self, deltas: Sequence[Delta]) -> None:
        """Read the states of referenced facts the batch has not seen yet."""
        wanted: set[str] = set()
        for delta in deltas:
            if isinstance(delta, UpdateDelta | DeleteDelta):
                wanted.update(delta.replaces)
            elif isinstance(delta, NoopDelta):
                wanted.update(delta.reinforces)
        missing = sorted(wanted - self.known.keys())
        if missing:
            rows = await self.db.fetch(self.sql.fact_states_in, (self.sql.ids(missing),))
            for row in rows:
                self.known[row[0]] = _state(row)

    def _apply(self, index: int, delta: Delta, did: str) -> None:
        if isinstance(delta, AddDelta):
            self._assert(index, delta, did, ())
        elif isinstance(delta, UpdateDelta):
            self._close(index, delta, did, "f" + did[1:], "superseded")
            self._assert(index, delta, did, tuple(delta.replaces))
        elif isinstance(delta, DeleteDelta):
            sanitize_bundle(self._bundle(delta, did, ()))
            self._close(index, delta, did, None, delta.status)
        else:
            sanitize_bundle(self._bundle(delta, did, ()))
            self._reinforce(index, delta, did)
        self.counts[delta.kind] += 1

    def _bundle(self, delta: Delta, did: str, predecessors: tuple[str, ...]) -> ProvenanceBundle:
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
        self, index: int, delta: AddDelta | UpdateDelta, did: str, predecessors: tuple[str, ...]
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
            },
        )
        self._asserting.append((fact, self._bundle(delta, did, predecessors)))
        self._asserting_at.append((index, self._seq))
        user, agent = str(delta.user), str(delta.agent)  # resolved before the batch applies
        from_us = self._us(delta.promotion_ts)
        state = _State(user, agent, from_us, False, reinforced_us=from_us, observed_us=from_us)
        seen = self.observed(delta.source_episode_ids)
        if seen is not None:
            state.observed_us = seen
        if predecessors:
            assert isinstance(delta, UpdateDelta)
            self._carry(delta, did, fact_id, state, [self.known[p] for p in predecessors])
            seen = state.observed_us
        self._lifecycles.append((seen, state.reinforced_us, state.count))
        self.known[fact_id] = state
        self.created.append(fact_id)
        made_from = (key_of(user, agent), delta.source_episode_ids[0])
        self._made_here.setdefault(made_from, []).append(fact_id)

    def _carry(
        self, delta: UpdateDelta, did: str, fact_id: str, state: _State, before: list[_State]
    ) -> None:
        """What a new fact takes from those it replaces: reinforcement per the delta's
        ``lifecycle``, access statistics (summed, latest) and a pin (if any had one)."""
        if delta.lifecycle == "inherit":
            state.reinforced_us = max(s.reinforced_us for s in before)
            state.count = max(s.count for s in before)
            state.observed_us = max(s.observed_us for s in before)
        elif delta.lifecycle == "reinforce":
            state.count = 1 + max(s.count for s in before)
        state.access_count = sum(s.access_count for s in before)
        state.last_access_us = max(s.last_access_us for s in before)
        if state.access_count or state.last_access_us:
            self._carried.append((fact_id, state.access_count, state.last_access_us))
        pins = [(s.pin, fid) for s, fid in zip(before, delta.replaces, strict=True) if s.pin]
        if pins:
            (pinned_at_us, reason), origin = min(pins, key=lambda p: (p[0], p[1]))
            state.pin = (pinned_at_us, reason)
            self._pins.append((fact_id, pinned_at_us, reason))
            at_us = state.valid_from_us
            self._events.append((fact_id, "pinned", at_us, delta.rule_id, did, reason, origin))

    def _us(self, ts: datetime) -> int:
        """``to_us`` for delta times: a pass stamps one time on all its deltas."""
        if ts is not self._last_ts:
            if ts != self._last_ts:
                self._last_us = to_us(aware_utc(ts, "promotion_ts"))
            self._last_ts = ts
        return self._last_us

    def _close(
        self,
        index: int,
        delta: UpdateDelta | DeleteDelta,
        did: str,
        successor: str | None,
        status: str,
    ) -> None:
        """Close what ``delta`` replaces with ``status``; an archived fact an update names
        is restored instead (it stays closed, and names its successor)."""
        self._check_refs(index, delta, did, delta.replaces, "replace")
        until_us = self._us(delta.promotion_ts)
        for fid in delta.replaces:
            state = self.known[fid]
            if state.closed and successor is not None:  # archived: checked above
                state.restored = True
                self._restores.append((successor, fid))
                self._events.append(
                    (fid, "restored", until_us, delta.rule_id, did, delta.reason, successor)
                )
                continue
            state.closed, state.status = True, status
            self.closed_here.add(fid)
            self._closes.append((max(until_us, state.valid_from_us), successor, did, status, fid))
            self.closed.append(fid)

    def _reinforce(self, index: int, delta: NoopDelta, did: str) -> None:
        self._check_refs(index, delta, did, delta.reinforces, "reinforce")
        ts_us = to_us(delta.promotion_ts)
        seen = self.observed(delta.source_episode_ids)
        for fid in delta.reinforces:
            state = self.known[fid]
            state.reinforced_us = max(state.reinforced_us, ts_us)
            state.count += 1
            if seen is not None:
                state.observed_us = max(state.observed_us, seen)
            self._reinforcements.append((fid, ts_us, did, seen))
        self.reinforced += len(delta.reinforces)

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
        if state.status != ARCHIVED or not isinstance(delta, UpdateDelta):
            return "fact is already closed"
        return "archived fact already restored" if state.restored else None

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
        self._carried, self._pins, self._restores = [], [], []
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
        return ApplyResult(
            version=version,
            added=self.counts["add"],
            updated=self.counts["update"],
            deleted=self.counts["delete"],
            noops=self.counts["noop"],
            skipped=self.skipped,
            reinforced=self.reinforced,
            rejections=rejections,
            created_fact_ids=tuple(self.created),
            closed_fact_ids=tuple(self.closed),
            watermarks=watermarks,
        )
