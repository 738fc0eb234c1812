"""Applying a batch inside a transaction, backend-neutral: one pass (``apply_deltas``) or
many partitions' passes at once (``apply_passes``), and the reads of many partitions.

The transaction bodies both fact stores run: basis and claim checks, run records (the
backend's compare-and-set, passed in), scopes,
:class:`~stargraph_mem.stores.repositories.fact_apply.Batch`
chunk by chunk, watermarks and rejections.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from stargraph_mem.errors import StoreError
from stargraph_mem.stores.fact import ApplyResult, EngineFact, Rejection, WatermarkAdvance
from stargraph_mem.stores.repositories.aggregates import (
    AggregateRow,
    AggregateWindow,
    AggregateWrite,
)
from stargraph_mem.stores.repositories.delta_scope import resolve_scopes
from stargraph_mem.stores.repositories.fact_apply import (
    Batch,
    check_basis,
    check_forward,
    check_pass_scope,
    version,
)
from stargraph_mem.stores.repositories.fact_rows import (
    Delta,
    PassBasis,
    PassWrite,
    engine_fact,
    holder_is_dead,
    validate_deltas,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.repositories.pass_time import (
    resumed_present,
    write_pass_time,
    write_pass_times,
)
from stargraph_mem.stores.repositories.schedule_runs import RuleRun
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "CHUNK",
    "RecordRuns",
    "aggregates_in",
    "apply_batch",
    "apply_passes_in",
    "checked_deltas",
    "claim_many",
    "group_current",
    "marks_of",
    "versions_of",
]

CHUNK: Final = 10_000
"""Deltas handled per ``executemany`` round inside the one transaction of a batch."""

RecordRuns = Callable[[Sequence[RuleRun]], Awaitable[None]]
"""Writes a pass's run records inside the batch's transaction (the backend's compare-and-set)."""


async def apply_batch(
    db: Conn,
    sql: FactStatements,
    batch: Batch,
    deltas: list[Delta],
    *,
    watermarks: tuple[WatermarkAdvance, ...],
    rejections: tuple[Rejection, ...],
    runs: Sequence[RuleRun],
    version_of: Partition | None,
    basis: PassBasis | None,
    record: RecordRuns,
    aggregates: Sequence[AggregateWrite] = (),
) -> ApplyResult:
    """The body of ``apply_deltas`` inside the caller's write transaction: the pass's basis
    (and claim), run records, scopes, the deltas chunk by chunk, watermarks, rejections."""
    if basis is not None:
        check_pass_scope(deltas, basis)
        batch.check_sources = False
        await check_basis(db, sql, basis)
    await record(runs)
    deltas = await resolve_scopes(db, sql, deltas)
    for start in range(0, len(deltas), CHUNK):
        await batch.apply_chunk(start, deltas[start : start + CHUNK])
    advanced = await batch.advance(watermarks)
    await write_aggregates(db, sql, aggregates)
    if basis is not None:
        await write_pass_time(db, sql, basis.pack, basis.partition, basis.time)
    await batch.reject(rejections)
    now_version = None if version_of is None else await version(db, sql, version_of)
    return batch.result(advanced, len(rejections), now_version)


def checked_deltas(write: PassWrite) -> list[Delta]:
    """``write``'s deltas validated, all within its own partition."""
    deltas = validate_deltas(write.deltas)
    check_pass_scope(deltas, write.basis)
    return deltas


async def apply_passes_in(
    db: Conn,
    sql: FactStatements,
    batch: Batch,
    passes: Sequence[PassWrite],
    checked: Sequence[list[Delta]],
    record: RecordRuns,
) -> list[int | None]:
    """The body of ``apply_passes`` inside the caller's write transaction: the passes still
    fresh are applied, the others left out (``None``); each applied partition's version."""
    batch.check_sources = False
    fresh = await fresh_passes(db, sql, passes)
    kept = [p for p, ok in zip(passes, fresh, strict=True) if ok]
    renewed = [(p.basis.expires_us, p.basis.partition.key, p.basis.holder) for p in kept]
    if any(holder for _, _, holder in renewed):  # passes under a lease keep it alive
        await db.executemany(sql.renew_claim, [r for r in renewed if r[2]])
    await record([run for p in kept for run in p.runs])
    deltas = await resolve_scopes(
        db, sql, [d for ds, ok in zip(checked, fresh, strict=True) if ok for d in ds]
    )
    for start in range(0, len(deltas), CHUNK):
        await batch.apply_chunk(start, deltas[start : start + CHUNK])
    await advance_passes(db, sql, kept, batch.now_us)
    await write_aggregates(db, sql, [p.aggregates for p in kept if p.aggregates is not None])
    await write_pass_times(db, sql, [(w.basis.pack, w.basis.partition, w.basis.time) for w in kept])
    await batch.reject([r for p in kept for r in p.rejections])
    versions = await versions_after(db, sql, kept, batch, len(deltas))
    return [
        versions[p.basis.partition.key] if ok else None for p, ok in zip(passes, fresh, strict=True)
    ]


async def claim_many(
    db: Conn, sql: FactStatements, keys: Sequence[str], holder: str, now_us: int, until_us: int
) -> set[str]:
    """Claim each of ``keys`` for ``holder`` until ``until_us`` (renewing its own claims)
    unless another holder's live claim is there; returns the keys now held. Expired
    claims, and claims of processes of this host that no longer run, are taken over."""
    if not keys:
        return set()
    taken: set[str] = set()
    for key, other, expires_us in await db.fetch(sql.claims_of, (sql.ids(list(keys)),)):
        if other != holder and int(expires_us) > now_us and not holder_is_dead(str(other)):
            taken.add(str(key))
    mine = [key for key in dict.fromkeys(keys) if key not in taken]
    await db.run_many(sql.put_claims, [(key, holder, until_us) for key in mine])
    return set(mine)


async def versions_after(
    db: Conn, sql: FactStatements, kept: Sequence[PassWrite], batch: Batch, deltas: int
) -> dict[str, int]:
    """Facts version of each applied pass's partition; for a single pass it is known
    without a read: the last audit seq the batch wrote, or the basis version if none."""
    if len(kept) != 1:
        return await versions_of(db, sql, [p.basis.partition.key for p in kept])
    basis = kept[0].basis
    return {basis.partition.key: batch.last_seq if deltas > batch.skipped else basis.version}


async def write_aggregates(db: Conn, sql: FactStatements, writes: Sequence[AggregateWrite]) -> None:
    """Passes' changes to their partitions' durable aggregates (inside their transaction)."""
    gone = [row for write in writes for row in write.gone()]
    rows = [row for write in writes for row in write.rows()]
    if gone:
        await db.executemany(sql.delete_aggregate, gone)
    if rows:
        await db.executemany(sql.upsert_aggregate, rows)


async def aggregates_in(
    db: Conn,
    sql: FactStatements,
    pack: str,
    refs: Sequence[str],
    window: AggregateWindow | None = None,
) -> list[AggregateRow]:
    """The pack's stored aggregate rows with any of ``refs`` (and those of ``window``)."""
    if window is not None and window.refs:
        params: tuple[Any, ...] = (
            pack,
            sql.ids(list(refs)),
            pack,
            sql.ids(list(window.refs)),
            pack,
            window.low,
            window.newest,
            window.keep,
            sql.ids(list(window.values)),
        )
        rows = await db.fetch(sql.aggregates_window, params)
    elif not refs:
        return []
    else:
        rows = await db.fetch(sql.aggregates_in, (pack, sql.ids(list(refs))))
    return [
        AggregateRow(str(ref), str(value), int(n), int(last_us), str(last_id), str(data))
        for ref, value, n, last_us, last_id, data in rows
    ]


async def versions_of(db: Conn, sql: FactStatements, keys: Sequence[str]) -> dict[str, int]:
    """Facts version (see ``FactStore.version``) of each partition key."""
    rows = await db.fetch(sql.versions_of, (sql.ids(list(keys)),))
    return {str(key): 0 if seq is None else int(seq) for key, seq in rows}


async def marks_of(
    db: Conn, sql: FactStatements, pack: str, keys: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Every rule's watermark for (pack, partition) of each partition key that has one."""
    found: dict[str, dict[str, int]] = {}
    for key, rule_id, seq in await db.fetch(sql.marks_of, (pack, sql.ids(list(keys)))):
        found.setdefault(str(key), {})[str(rule_id)] = int(seq)
    return found


def group_current(
    rows: Sequence[Sequence[Any]], keys: Sequence[str], status: str = "current"
) -> list[list[EngineFact]]:
    """Engine-fact rows (``partition_key`` last) as one list per key, in ``keys`` order,
    each fact with ``status``."""
    found: dict[str, list[EngineFact]] = {key: [] for key in keys}
    for row in rows:
        found[row[-1]].append(engine_fact(row, status))
    return [found[key] for key in keys]


async def fresh_passes(db: Conn, sql: FactStatements, passes: Sequence[PassWrite]) -> list[bool]:
    """Per pass: whether its partition is as it read it and nobody else claims it (an
    expired or dead claim is cleared, as :func:`other_claim` does)."""
    if not passes:
        return []
    if len(passes) == 1:  # a record's pass: plain equalities
        one = passes[0].basis
        key = one.partition.key
        rows = await db.fetch(sql.fresh_one, (one.pack, key, key, key, key))
    else:
        ids = sql.ids([p.basis.partition.key for p in passes])
        packs = sql.ids(sorted({p.basis.pack for p in passes}))
        rows = await db.fetch(sql.fresh_of, (packs, ids, ids, ids))
    marks: dict[tuple[str, str], dict[str, int]] = {}
    versions: dict[str, int] = {}
    claims: list[tuple[str, str, int]] = []
    for kind, pack, key, text, number in rows:
        if kind == 0:
            marks.setdefault((str(pack), str(key)), {})[str(text)] = int(number)
        elif kind == 1:
            versions[str(key)] = 0 if number is None else int(number)
        else:
            claims.append((str(key), str(text), int(number)))
    claimed: set[str] = set()
    for key, holder, expires_us in claims:
        basis = next(p.basis for p in passes if p.basis.partition.key == key)
        if holder == basis.holder:  # the claim the pass runs under
            continue
        if expires_us > basis.now_us and not holder_is_dead(holder):
            claimed.add(key)
        else:
            await db.execute(sql.drop_claim, (key, holder))
    return [
        p.basis.partition.key not in claimed
        and versions[p.basis.partition.key] == p.basis.version
        and marks.get((p.basis.pack, p.basis.partition.key), {}) == p.basis.marks
        and await resumed_present(db, sql, p.basis.pack, p.basis.partition, p.basis.time)
        for p in passes
    ]


async def advance_passes(
    db: Conn, sql: FactStatements, passes: Sequence[PassWrite], now_us: int
) -> None:
    """Move the passes' watermarks forward from the marks their bases checked; a step
    backwards raises :class:`StoreError`."""
    final: dict[tuple[str, str, str], int] = {}
    for write in passes:
        for index, adv in enumerate(write.watermarks):
            key = (adv.pack, adv.rule_id, adv.partition.key)
            prior = final.get(key, write.basis.marks.get(adv.rule_id, 0))
            if adv.pack != write.basis.pack or adv.partition != write.basis.partition:
                raise StoreError(
                    f"watermarks[{index}]: {adv.pack}/{adv.rule_id} at {key[2]} is outside "
                    f"the pass over {write.basis.pack} at {write.basis.partition.key}",
                    index=index,
                )
            check_forward(index, adv, prior)
            final[key] = adv.last_seq
    rows = [(*key, seq, now_us) for key, seq in final.items()]
    if rows:
        await db.run_many(sql.upsert_watermarks, rows)
