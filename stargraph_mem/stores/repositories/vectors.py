"""Vectors of episodes and facts, and the episodes' full-text ranking, written once for
every backend.

Tables (both backends; see the SQLite store and PostgreSQL migration 7):

- ``vectors``: one row per (kind, item, embedder identity): the item's partition, a
  monotone ``seq`` of insertion and the ``float32`` vector (little-endian bytes). Unique on
  ``(kind, item_id, embedder)``; indexed on ``(partition_key, embedder, kind, seq)``, which
  every read here follows.
- ``index_marks``: how far each lazy index has got: per (partition, embedder), the
  highest episode seq and the highest facts rowid already embedded (or skipped, for
  closed facts).
- ``episode_text`` (and its ``index_marks`` row of kind ``episode_text``): an earlier
  database-side full-text index of episodes, no longer filled or read; the episodes'
  full-text ranking is BM25 from an in-process index per partition
  (:mod:`~stargraph_mem.stores.repositories.word_index`), the same on both backends.

Nothing here runs on the streaming ``record`` path: an episode or fact is embedded by
:meth:`SQLVectorRepository.catch_up` (or :meth:`~SQLVectorRepository.backfill`), which a
reader calls first. With nothing pending a catch-up is one statement of indexed maxima.
Episode seqs and facts rowids are committed in order on both backends (one writer on
SQLite, advisory locks on PostgreSQL), so a mark never skips a row; vector inserts take
the ``vectors`` lock, so their ``seq`` is committed in order too and a reader's cache
can catch up by reading only the rows above the highest seq it holds.

:meth:`~SQLVectorRepository.nearest` ranks by exact cosine
(:func:`~stargraph_mem.embedding.column_dot`, :func:`~stargraph_mem.embedding.top_scores`)
over one partition's vectors of one embedder identity, from an in-process cache per
(partition, embedder, kind) (see :class:`VectorCache`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from stargraph_mem.errors import SearchError, StoreError
from stargraph_mem.model.deltas import FACT_STATUSES
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.repositories.episode_rows import row_record, split_rows
from stargraph_mem.stores.repositories.episodes import READ_COLUMNS
from stargraph_mem.stores.repositories.search import MAX_LIMIT, MAX_WORDS, check_limit
from stargraph_mem.stores.sql_conn import Conn

if TYPE_CHECKING:  # numpy and the embedders load with the first vector, not with the store
    import numpy as np
    import numpy.typing as npt

    from stargraph_mem.embedding import Embedder, Matrix
    from stargraph_mem.stores.repositories.vector_cache import CacheEntry, VectorCache
    from stargraph_mem.stores.repositories.word_index import WordIndexCache

__all__ = [
    "EMBED_BATCH",
    "KINDS",
    "VECTORS_LOCK",
    "BackfillReport",
    "SQLVectorRepository",
    "fact_text",
]

Kind = Literal["episode", "fact"]
KINDS: Final = ("episode", "fact")
"""What a vector belongs to."""
EMBED_BATCH: Final = 512
"""The most texts one ``embed`` call receives."""
THREAD_FROM: Final = 64
"""Batches of at least this many texts are embedded in a thread (the loop keeps running)."""
VECTORS_LOCK: Final = "vectors"
"""The advisory lock vector writes hold (PostgreSQL), so their seqs commit in order."""
TEXT_MARK_KIND: Final = "episode_text"
"""The ``index_marks`` kind of the episodes' full-text index's (global) mark."""
FACT_VERSION_KIND: Final = "fact_version"
"""The ``index_marks`` kind of the partition's facts version (its highest audit seq) the
fact vectors were last brought up to."""
RANGE_SCAN_MAX: Final = 20_000
"""Facts rowids a catch-up reads by range (above: by the partition's index)."""
_WORD: Final = re.compile(r"\w+")


def fact_text(subject: str, predicate: str, obj: str, payload: bytes | str | None = None) -> str:
    """The text a fact is embedded from: subject, predicate and object, then its payload's
    JSON when it holds anything (``{}`` and ``null`` add nothing)."""
    text = f"{subject} {predicate} {obj}"
    if payload is None:
        return text
    extra = (
        payload.decode("utf-8", errors="replace") if isinstance(payload, bytes) else payload
    ).strip()
    return text if extra in ("", "{}", "null") else f"{text} {extra}"


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What a :meth:`SQLVectorRepository.backfill` did."""

    embedder: str
    """The embedder identity the vectors were stored under."""
    partitions: int
    """Partitions visited (each holding episodes or current facts)."""
    episodes: int
    facts: int

    @property
    def embedded(self) -> int:
        """Items embedded in all."""
        return self.episodes + self.facts


# --- statements ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Statements:
    state: str
    mark: str
    episodes_to_embed: str
    facts_to_embed: str
    facts_in_range: str
    insert_vector: str
    new_episode_vectors: str
    new_fact_vectors: str
    fact_vectors: str
    fact_currency: str
    new_episode_text: str
    pending: str
    partitions: str
    drop_vectors: str
    drop_marks: str
    episodes_in: str
    episode_times_in: str


@cache
def _statements(dialect: Dialect) -> _Statements:
    sql, in_ids = dialect.sql, dialect.in_ids()

    def mark_of(kind: str) -> str:
        return (
            "(SELECT through FROM index_marks WHERE partition_key = ? AND embedder = ? "
            f"AND kind = '{kind}')"
        )

    return _Statements(
        # parameters: partition, embedder (per mark), partition (its last episode, its
        # facts version)
        state=sql(
            "SELECT (SELECT coalesce(max(rowid), 0) FROM facts), "
            f"coalesce({mark_of('episode')}, 0), "
            f"coalesce({mark_of('fact')}, 0), coalesce({mark_of(FACT_VERSION_KIND)}, 0), "
            "(SELECT coalesce(max(seq), 0) FROM episodes WHERE partition_key = ?), "
            "(SELECT coalesce(max(seq), 0) FROM audit WHERE partition_key = ?)"
        ),
        mark=sql(
            "INSERT INTO index_marks (partition_key, embedder, kind, through) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (partition_key, embedder, kind) DO UPDATE "
            f"SET through = {dialect.greatest}(index_marks.through, excluded.through)"
        ),
        episodes_to_embed=sql(
            "SELECT seq, id, content FROM episodes WHERE partition_key = ? AND seq > ? "
            "AND seq <= ? ORDER BY seq LIMIT ?"
        ),
        facts_to_embed=sql(
            "SELECT rowid, id, subject, predicate, object, payload FROM facts "
            "WHERE rowid > ? AND rowid <= ? AND partition_key = ? AND valid_until_us IS NULL "
            "ORDER BY rowid LIMIT ?"
        ),
        # the same by the rowid range (the partition's index left aside): for short ranges
        facts_in_range=sql(
            "SELECT rowid, id, subject, predicate, object, payload FROM facts "
            "WHERE rowid > ? AND rowid <= ? AND partition_key || '' = ? "
            "AND valid_until_us IS NULL ORDER BY rowid LIMIT ?"
        ),
        insert_vector=sql(
            dialect.insert_ignoring("vectors", "kind, item_id, partition_key, embedder, vector", 5)
        ),
        new_episode_vectors=sql(
            "SELECT v.seq, v.item_id, v.vector, e.ts_us FROM vectors v "
            "JOIN episodes e ON e.id = v.item_id WHERE v.partition_key = ? AND "
            "v.embedder = ? AND v.kind = 'episode' AND v.seq > ? ORDER BY v.seq"
        ),
        new_fact_vectors=sql(
            "SELECT v.seq, v.item_id, v.vector, f.valid_from_us, f.valid_until_us, f.status "
            "FROM vectors v JOIN facts f ON f.id = v.item_id WHERE v.partition_key = ? AND "
            "v.embedder = ? AND v.kind = 'fact' AND v.seq > ? ORDER BY v.seq"
        ),
        fact_vectors=sql(
            "SELECT item_id, vector FROM vectors WHERE partition_key = ? AND embedder = ? "
            "AND kind = 'fact'"
        ),
        fact_currency=sql(f"SELECT id, valid_until_us, status FROM facts WHERE id {in_ids}"),
        new_episode_text=sql(
            "SELECT seq, id, ts_us, content FROM episodes WHERE partition_key = ? AND seq > ? "
            "ORDER BY seq"
        ),
        pending=sql(
            "SELECT (SELECT count(*) FROM episodes e WHERE NOT EXISTS (SELECT 1 FROM vectors v "
            "WHERE v.kind = 'episode' AND v.item_id = e.id AND v.embedder = ?)), "
            "(SELECT count(*) FROM facts f WHERE f.valid_until_us IS NULL AND NOT EXISTS ("
            "SELECT 1 FROM vectors v WHERE v.kind = 'fact' AND v.item_id = f.id "
            "AND v.embedder = ?))"
        ),
        partitions=sql(
            "SELECT partition_key FROM episodes UNION SELECT partition_key FROM facts "
            "WHERE valid_until_us IS NULL ORDER BY 1"
        ),
        drop_vectors=sql("DELETE FROM vectors WHERE embedder = ?"),
        drop_marks=sql(
            f"DELETE FROM index_marks WHERE embedder = ? AND kind <> '{TEXT_MARK_KIND}'"
        ),
        episodes_in=sql(f"SELECT {READ_COLUMNS} FROM episodes WHERE id {in_ids}"),
        episode_times_in=sql(f"SELECT id, ts_us, session FROM episodes WHERE id {in_ids}"),
    )


# --- checks -------------------------------------------------------------------------------


def _check_partition(partition_key: object) -> str:
    if not isinstance(partition_key, str) or not partition_key or "\x00" in partition_key:
        raise StoreError(
            f"partition_key must be a non-empty string (a Partition's key), got {partition_key!r}"
        )
    return partition_key


def _check_kind(kind: object) -> Kind:
    if kind == "episode" or kind == "fact":
        return kind
    raise StoreError(f"kind must be 'episode' or 'fact' (got {kind!r})", kind=str(kind))


def _identity_of(embedder: Embedder | str) -> tuple[str, int]:
    """The identity string and dimension of an embedder (or of its stored identity)."""
    if isinstance(embedder, str):
        name, _, size = embedder.rpartition("/")
        if not name or not size.isdigit() or int(size) <= 0:
            raise StoreError(
                f"embedder identity {embedder!r} is not of the form name@version/dimension"
            )
        return embedder, int(size)
    from stargraph_mem.embedding import Embedder, identity

    if not isinstance(embedder, Embedder):
        raise StoreError(f"embedder must be an Embedder or its identity (got {embedder!r})")
    dimension = embedder.dimension
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
        raise StoreError(f"embedder {embedder.name!r} has dimension {dimension!r}")
    return identity(embedder), dimension


def _time_us(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        try:
            return to_us(value, what)
        except ValueError as exc:
            raise StoreError(str(exc), argument=what) from exc
    if isinstance(value, bool) or not isinstance(value, int):
        raise StoreError(f"{what} must be UTC microseconds or an aware datetime (got {value!r})")
    return value


def _check_query(vector: object, dimension: int) -> npt.NDArray[np.float32]:
    import numpy as np

    try:
        query = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"query_vector is not a vector of numbers: {exc}") from exc
    if query.shape != (dimension,):
        raise StoreError(
            f"query_vector has shape {query.shape}; the embedder's vectors have {dimension} floats"
        )
    if not np.all(np.isfinite(query)):
        raise StoreError("query_vector holds NaN or infinite values")
    return query


def _check_statuses(statuses: Iterable[str] | None) -> frozenset[str] | None:
    if statuses is None:
        return None
    if isinstance(statuses, str):
        raise StoreError(f"statuses must be a collection of statuses, not the string {statuses!r}")
    wanted = frozenset(statuses)
    unknown = sorted(str(s) for s in wanted if s not in FACT_STATUSES)
    if unknown or not wanted:
        raise StoreError(
            f"statuses must be among {', '.join(FACT_STATUSES)} (got {sorted(map(str, wanted))})"
        )
    return wanted


def _check_words(words: object) -> list[str]:
    if isinstance(words, str) or not isinstance(words, Sequence) or not words:
        raise SearchError(f"words must be a non-empty list of words (got {words!r})")
    if len(words) > MAX_WORDS:
        raise SearchError(f"{len(words)} words; at most {MAX_WORDS} are allowed")
    for word in words:
        if not isinstance(word, str) or not _WORD.fullmatch(word):
            raise SearchError(
                f"word {word!r} is not one word (letters, digits, _): pass query_words(query)"
            )
    return [w.casefold() for w in words]


def _embedded(embedder: Embedder, texts: list[str], dimension: int) -> Matrix:
    """What ``embedder`` makes of ``texts``, checked (shape, finite values)."""
    import numpy as np

    from stargraph_mem.embedding import identity

    out = np.asarray(embedder.embed(texts), dtype=np.float32)
    if out.shape != (len(texts), dimension):
        raise StoreError(
            f"embedder {identity(embedder)!r} returned shape {out.shape} for {len(texts)} "
            f"texts (expected ({len(texts)}, {dimension})): nothing stored for them"
        )
    if not np.all(np.isfinite(out)):
        raise StoreError(f"embedder {identity(embedder)!r} returned NaN or infinite values")
    return out


# --- the repository -----------------------------------------------------------------------


class SQLVectorRepository:
    """Vectors and the episodes' full-text ranking of one database, mixed into a backend's
    store (which supplies :class:`~stargraph_mem.stores.repositories.access.Access`)."""

    _vector_cache: VectorCache
    _word_index_cache: WordIndexCache

    if TYPE_CHECKING:  # what the backend's store supplies (see Access)
        dialect: ClassVar[Dialect]

        @property
        def read_only_reason(self) -> str | None: ...

    def _vectors_reading(self) -> AbstractAsyncContextManager[Conn]:
        """A connection for reads (autocommit), held by this coroutine."""
        raise NotImplementedError

    def _vectors_writing(self) -> AbstractAsyncContextManager[Conn]:
        """A connection inside one write transaction holding :data:`VECTORS_LOCK`."""
        raise NotImplementedError

    def _cache(self) -> VectorCache:
        try:
            return self._vector_cache
        except AttributeError:
            from stargraph_mem.stores.repositories.vector_cache import VectorCache

            self._vector_cache = VectorCache()
            return self._vector_cache

    def _word_cache(self) -> WordIndexCache:
        try:
            return self._word_index_cache
        except AttributeError:
            from stargraph_mem.stores.repositories.word_index import WordIndexCache

            self._word_index_cache = WordIndexCache()
            return self._word_index_cache

    def _writable(self, action: str) -> None:
        why = self.read_only_reason
        if why is not None:
            raise StoreError(f"DB is read-only ({why}): cannot {action}", read_only=why)

    # --- catching up ------------------------------------------------------------------------

    async def catch_up(self, partition_key: str, embedder: Embedder) -> int:
        """Embed the partition's episodes and current facts that have no vector of
        ``embedder``'s identity (one ``embed`` call per :data:`EMBED_BATCH` texts); return
        how many were embedded.

        Nothing pending costs one statement."""
        key = _check_partition(partition_key)
        ident, dimension = _identity_of(embedder)
        episodes, facts = await self._catch_up(key, embedder, ident, dimension, EMBED_BATCH, None)
        return episodes + facts

    async def _catch_up(
        self,
        key: str,
        embedder: Embedder,
        ident: str,
        dimension: int,
        batch: int,
        done: Callable[[int], None] | None,
    ) -> tuple[int, int]:
        sql = _statements(self.dialect)
        async with self._vectors_reading() as db:
            ((row),) = await db.fetch(sql.state, (key, ident, key, ident, key, ident, key, key))
        last_rowid, ep_mark, fact_mark, seen, part_seq, version = map(int, row)
        if ep_mark >= part_seq and seen >= version:
            return 0, 0
        self._writable("embed pending episodes and facts")
        episodes = facts = 0
        while ep_mark < part_seq:
            async with self._vectors_reading() as db:
                rows = await db.fetch(sql.episodes_to_embed, (key, ep_mark, part_seq, batch))
            through = int(rows[-1][0]) if len(rows) == batch else part_seq
            items = [(str(r[1]), str(r[2])) for r in rows]
            episodes += await self._store(
                key, "episode", embedder, ident, dimension, items, [("episode", through)]
            )
            ep_mark = through
            if done is not None and items:
                done(len(items))
        # the partition's facts changed (its audit moved on): embed its new current facts
        while seen < version:
            read = sql.facts_in_range if last_rowid - fact_mark <= RANGE_SCAN_MAX else None
            rows = []
            if fact_mark < last_rowid:
                async with self._vectors_reading() as db:
                    params = (fact_mark, last_rowid, key, batch)
                    rows = await db.fetch(read or sql.facts_to_embed, params)
            through = int(rows[-1][0]) if len(rows) == batch else last_rowid
            items = [(str(r[1]), fact_text(r[2], r[3], r[4], bytes(r[5]))) for r in rows]
            marks: list[tuple[str, int]] = [("fact", through)]
            if through >= last_rowid:
                marks.append((FACT_VERSION_KIND, version))
                seen = version
            facts += await self._store(key, "fact", embedder, ident, dimension, items, marks)
            fact_mark = through
            if done is not None and items:
                done(len(items))
        return episodes, facts

    async def _store(
        self,
        key: str,
        kind: Kind,
        embedder: Embedder,
        ident: str,
        dimension: int,
        items: list[tuple[str, str]],
        marks: list[tuple[str, int]],
    ) -> int:
        """Embed ``items`` (id, text), store their vectors and move the ``marks`` (kind,
        through) of the partition and embedder (one transaction)."""
        from stargraph_mem.embedding import to_blob

        sql = _statements(self.dialect)
        rows: list[tuple[Any, ...]] = []
        if items:
            texts = [text for _, text in items]
            if len(texts) >= THREAD_FROM:
                matrix = await asyncio.to_thread(_embedded, embedder, texts, dimension)
            else:
                matrix = _embedded(embedder, texts, dimension)
            rows = [
                (kind, item_id, key, ident, to_blob(matrix[i]))
                for i, (item_id, _) in enumerate(items)
            ]
        async with self._vectors_writing() as db:
            if rows:
                await db.executemany(sql.insert_vector, rows)
            for mark_kind, through in marks:
                await db.execute(sql.mark, (key, ident, mark_kind, through))
        return len(rows)

    async def backfill(
        self,
        embedder: Embedder,
        *,
        batch: int = EMBED_BATCH,
        progress: Callable[[int, int], object] | None = None,
    ) -> BackfillReport:
        """Embed every partition's episodes and current facts lacking a vector of
        ``embedder``'s identity (all of them, for a new identity); ``progress(done,
        total)`` after each batch."""
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= EMBED_BATCH:
            raise StoreError(f"batch must be an integer from 1 to {EMBED_BATCH} (got {batch!r})")
        ident, dimension = _identity_of(embedder)
        self._writable("backfill vectors")
        sql = _statements(self.dialect)
        total = await self.pending(embedder)
        async with self._vectors_reading() as db:
            keys = [str(row[0]) for row in await db.fetch(sql.partitions)]
        count = 0

        def done(n: int) -> None:
            nonlocal count
            count += n
            if progress is not None:
                progress(count, max(total, count))

        if progress is not None:
            progress(0, total)
        episodes = facts = 0
        for key in keys:
            e, f = await self._catch_up(key, embedder, ident, dimension, batch, done)
            episodes, facts = episodes + e, facts + f
        return BackfillReport(ident, len(keys), episodes, facts)

    async def pending(self, embedder: Embedder | str) -> int:
        """Episodes and current facts with no vector of ``embedder``'s identity."""
        ident, _ = _identity_of(embedder)
        async with self._vectors_reading() as db:
            ((episodes, facts),) = await db.fetch(_statements(self.dialect).pending, (ident, ident))
        return int(episodes) + int(facts)

    async def drop(self, embedder_identity: str) -> int:
        """Remove every vector (and mark) of one embedder identity; return how many
        vectors went."""
        ident, _ = _identity_of(embedder_identity)
        if not isinstance(embedder_identity, str):
            raise StoreError("drop takes an embedder identity string (see embedding.identity)")
        self._writable("drop vectors")
        sql = _statements(self.dialect)
        async with self._vectors_writing() as db:
            removed = await db.execute(sql.drop_vectors, (ident,))
            await db.execute(sql.drop_marks, (ident,))
        self._cache().forget(ident)
        return removed

    # --- reads ------------------------------------------------------------------------------

    async def nearest(
        self,
        partition_key: str,
        kind: Kind,
        embedder: Embedder | str,
        query_vector: npt.ArrayLike,
        *,
        limit: int,
        after_us: int | datetime | None = None,
        before_us: int | datetime | None = None,
        current_only: bool = True,
        statuses: Iterable[str] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``limit`` vectors of ``kind`` in the partition most similar to
        ``query_vector`` by cosine (only ``embedder``'s identity), best first, ties by id.

        ``after_us`` (inclusive) and ``before_us`` (exclusive) bound an episode's time or
        a fact's ``valid_from``; for facts, ``current_only`` keeps open facts and
        ``statuses`` those of the given statuses. Call :meth:`catch_up` first to include
        what was stored since."""
        key = _check_partition(partition_key)
        kind = _check_kind(kind)
        ident, dimension = _identity_of(embedder)
        check_limit(limit)
        query = _check_query(query_vector, dimension)
        after = _time_us(after_us, "after_us")
        before = _time_us(before_us, "before_us")
        wanted = _check_statuses(statuses)
        if kind == "episode" and wanted is not None:
            raise StoreError("statuses apply to facts only (kind='fact')")
        if current_only and kind == "fact":
            wanted = frozenset({"current"}) if wanted is None else wanted & {"current"}
            if not wanted:
                return []
        cache = self._cache()
        entry = cache.get((key, ident, kind), dimension)
        await self._refresh(entry, key, ident, kind)
        try:
            return await self._rank(entry, query, limit, after, before, wanted)
        finally:
            cache.settle()

    async def fact_vectors(
        self, partition_key: str, embedder: Embedder | str, ids: Sequence[str]
    ) -> tuple[list[str], Matrix]:
        """The stored vectors of ``embedder``'s identity of the facts ``ids`` of the
        partition that have one: their ids (in the order of ``ids``) and their rows, the
        vectors of their :func:`fact_text`, bit for bit as the embedder made them (one
        read of the partition's fact vectors; nothing is embedded, and the cache
        :meth:`nearest` ranks from is left as it is: a nightly run over many partitions
        would fill it with vectors no recall of the run asks for)."""
        from stargraph_mem.embedding import from_blobs

        key = _check_partition(partition_key)
        ident, dimension = _identity_of(embedder)
        async with self._vectors_reading() as db:
            stored = await db.fetch(_statements(self.dialect).fact_vectors, (key, ident))
        blobs = {str(item_id): blob for item_id, blob in stored}
        found = [item_id for item_id in ids if item_id in blobs]
        return found, from_blobs([bytes(blobs[item_id]) for item_id in found], dimension)

    async def keep_fact_vectors(
        self, partition_key: str, embedder: Embedder | str, items: Sequence[tuple[str, Matrix]]
    ) -> int:
        """Store ``items`` (fact id, the vector of its :func:`fact_text` under ``embedder``,
        made elsewhere: by a pass that ranked the facts) for the facts of the partition that
        have no vector of that identity yet; how many rows were offered. A cache fill: a
        vector already stored is left as it is, and a read-only store keeps nothing."""
        from stargraph_mem.embedding import to_blob

        if not items or self.read_only_reason is not None:
            return 0
        key = _check_partition(partition_key)
        ident, dimension = _identity_of(embedder)
        rows = []
        for item_id, vector in items:
            if vector.shape != (dimension,):
                raise StoreError(
                    f"the vector of fact {item_id!r} has shape {vector.shape}; "
                    f"expected ({dimension},) for {ident}"
                )
            rows.append(("fact", item_id, key, ident, to_blob(vector)))
        async with self._vectors_writing() as db:
            await db.executemany(_statements(self.dialect).insert_vector, rows)
        return len(rows)

    async def _refresh(self, entry: CacheEntry, key: str, ident: str, kind: Kind) -> None:
        """Bring ``entry`` up to date: the vectors stored above its seq (one read)."""
        sql = _statements(self.dialect)
        text = sql.new_episode_vectors if kind == "episode" else sql.new_fact_vectors
        async with self._vectors_reading() as db:
            rows = await db.fetch(text, (key, ident, entry.seq))
        from stargraph_mem.embedding import from_blobs

        rows = [row for row in rows if int(row[0]) > entry.seq]  # a concurrent refresh's
        if not rows:
            return
        ids = [str(row[1]) for row in rows]
        vectors = from_blobs([bytes(row[2]) for row in rows], entry.dimension)
        times = [int(row[3]) for row in rows]
        if kind == "episode":
            statuses = ["current"] * len(rows)
        else:
            statuses = [_status(row[4], row[5]) for row in rows]
        entry.append(ids, vectors, times, statuses)
        entry.seq = int(rows[-1][0])

    async def _rank(
        self,
        entry: CacheEntry,
        query: npt.NDArray[np.float32],
        limit: int,
        after: int | None,
        before: int | None,
        wanted: frozenset[str] | None,
    ) -> list[tuple[str, float]]:
        from stargraph_mem.stores.repositories.vector_cache import ranked_rows, scores

        if not entry.size:
            return []
        found = await scores(entry.columns[:, : entry.size], query)
        while True:
            ranked = ranked_rows(entry, found, limit, after, before, wanted)
            if wanted is None or not ranked:
                return ranked
            # a fact may have closed since it was read: check those ranked
            changed = await self._recheck(entry, [item_id for item_id, _ in ranked])
            if not changed:
                return ranked

    async def _recheck(self, entry: CacheEntry, ids: list[str]) -> bool:
        """Read the currency of the facts ``ids``; whether any changed."""
        from stargraph_mem.stores.repositories.vector_cache import status_code

        async with self._vectors_reading() as db:
            rows = await db.fetch(_statements(self.dialect).fact_currency, (self.dialect.ids(ids),))
        now = {str(row[0]): _status(row[1], row[2]) for row in rows}
        changed = False
        for item_id in ids:
            status = now.get(item_id, "deleted")
            at = entry.rows[item_id]
            if entry.statuses[at] != status_code(status):
                entry.statuses[at] = status_code(status)
                changed = True
        return changed

    async def episode_text_hits(
        self,
        partition_key: str,
        words: Sequence[str],
        *,
        limit: int,
        after_us: int | datetime | None = None,
        before_us: int | datetime | None = None,
    ) -> list[tuple[str, float]]:
        """Episodes of the partition matching any of ``words`` (as
        :func:`~stargraph_mem.stores.repositories.search.query_words` returns them), as
        ``(episode id, BM25 score)``, best first, ties by id: the same on every backend
        (:mod:`~stargraph_mem.stores.repositories.word_index`, brought up to date with the
        partition's episodes first)."""
        key = _check_partition(partition_key)
        checked = _check_words(words)
        check_limit(limit)
        after = _time_us(after_us, "after_us")
        before = _time_us(before_us, "before_us")
        words_index = self._word_cache().get(key)
        async with self._vectors_reading() as db:
            rows = await db.fetch(
                _statements(self.dialect).new_episode_text, (key, words_index.seq)
            )
        words_index.add([(int(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows])
        try:
            return words_index.search(checked, limit=limit, after_us=after, before_us=before)
        finally:
            self._word_cache().settle()

    async def episodes(self, ids: Sequence[str]) -> list[EpisodeRecord]:
        """The stored episodes among ``ids``, in the order of ``ids`` (unknown ids and rows
        that cannot be decoded left out)."""
        wanted = _check_ids(ids)
        if not wanted:
            return []
        async with self._vectors_reading() as db:
            rows = await db.fetch(
                _statements(self.dialect).episodes_in, (self.dialect.ids(wanted),)
            )
        records, _ = split_rows(list(rows), row_record)
        by_id = {record.id: record for record in records}
        return [by_id[i] for i in dict.fromkeys(wanted) if i in by_id]

    async def episode_times(self, ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``{episode id: (ts_us, session)}`` of the stored episodes among ``ids``."""
        wanted = _check_ids(ids)
        if not wanted:
            return {}
        async with self._vectors_reading() as db:
            rows = await db.fetch(
                _statements(self.dialect).episode_times_in, (self.dialect.ids(wanted),)
            )
        return {str(row[0]): (int(row[1]), str(row[2])) for row in rows}


def _status(valid_until_us: Any, status: Any) -> str:
    if valid_until_us is None:
        return "current" if status is None else str(status)  # challenged: current, flagged
    return "deleted" if status is None else str(status)


def _check_ids(ids: object) -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise StoreError(f"ids must be a list of episode ids (got {ids!r})")
    if len(ids) > MAX_LIMIT * 10:
        raise StoreError(f"{len(ids)} ids; at most {MAX_LIMIT * 10} per read")
    for item in ids:
        if not isinstance(item, str) or "\x00" in item:
            raise StoreError(f"episode id {item!r} is not a string id")
    return list(ids)
