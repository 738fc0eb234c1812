"""The in-process side of the vector repository: each (partition, embedder, kind)'s vectors
as columns, their times and fact statuses, and exact cosine over them (numpy, loaded with
the first vector: a store opened to list facts does not load it)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from stargraph_mem.embedding import Matrix, column_dot, top_scores
from stargraph_mem.stores.repositories.word_index import RowIds, in_window

__all__ = [
    "THREAD_WORK",
    "CacheEntry",
    "VectorCache",
    "ranked_rows",
    "scores",
    "status_code",
]


# --- the cache ----------------------------------------------------------------------------


@dataclass(slots=True)
class CacheEntry:
    """One (partition, embedder, kind)'s vectors as the store held them at ``seq``."""

    dimension: int
    seq: int = 0
    ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    columns: Matrix = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    """The vectors as columns (shape ``(dimension, capacity)``): a sparse query reads only
    the rows of its non-zero components (:func:`~stargraph_mem.embedding.column_dot`)."""
    times: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    statuses: npt.NDArray[np.int16] = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    """Each fact's status when last read (``current`` for episodes), as its
    :func:`status_code` (comparing small integers, not strings, over every row)."""

    def __post_init__(self) -> None:
        self.columns = np.zeros((self.dimension, 0), dtype=np.float32)

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Roughly what the entry holds in memory (capacity included)."""
        per_id = 120  # a short str, its dict slot and its list slot
        return int(
            self.columns.nbytes + self.times.nbytes + self.statuses.nbytes + per_id * self.size
        )

    def append(
        self, ids: list[str], vectors: Matrix, times: list[int], statuses: list[str]
    ) -> None:
        """Add rows (an id already held gets its new row instead: a re-embedded item)."""
        fresh: list[int] = []
        for i, item_id in enumerate(ids):
            at = self.rows.get(item_id)
            if at is None:
                fresh.append(i)
                continue
            self.columns[:, at] = vectors[i]
            self.times[at] = times[i]
            self.statuses[at] = status_code(statuses[i])
        if not fresh:
            return
        n, m = self.size, len(fresh)
        if n + m > self.columns.shape[1]:  # grow by doubling: appends stay amortised O(1)
            capacity = max(n + m, 2 * self.columns.shape[1], 64)
            columns = np.zeros((self.dimension, capacity), dtype=np.float32)
            columns[:, :n] = self.columns[:, :n]
            self.columns = columns
            self.times = _grown(self.times, capacity)
            self.statuses = _grown(self.statuses, capacity)
        take = np.asarray(fresh)
        self.columns[:, n : n + m] = vectors[take].T
        self.times[n : n + m] = np.asarray(times, dtype=np.int64)[take]
        self.statuses[n : n + m] = [status_code(statuses[i]) for i in fresh]
        added = [ids[i] for i in fresh]
        self.rows.update(zip(added, range(n, n + m), strict=True))
        self.ids.extend(added)


_STATUS_CODES: dict[str, int] = {}


def status_code(status: str) -> int:
    """A small integer standing for ``status`` in this process (given on first use)."""
    code = _STATUS_CODES.get(status)
    if code is None:
        code = _STATUS_CODES.setdefault(status, len(_STATUS_CODES))
    return code


def _grown(array: Any, capacity: int) -> Any:
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class VectorCache:
    """The vectors :meth:`SQLVectorRepository.nearest` ranks, kept in process per
    (partition, embedder identity, kind), least recently used first out.

    At most :attr:`max_entries` entries and about :attr:`max_bytes` of vectors, ids and
    columns in all (default 64 entries, 256 MiB: 60,000 vectors of 384 floats take about
    100 MiB); an entry larger than the whole cap is used for one call and not kept. An
    entry is brought up to date at each use by reading only the vectors stored after the
    highest seq it holds; facts' currency is checked against the store for every fact a
    ranking returns.
    """

    def __init__(self, max_entries: int = 64, max_bytes: int = 256 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str, str], CacheEntry] = OrderedDict()

    def get(self, key: tuple[str, str, str], dimension: int) -> CacheEntry:
        entry = self._entries.get(key)
        if entry is None or entry.dimension != dimension:
            entry = CacheEntry(dimension)
            self._entries[key] = entry
        self._entries.move_to_end(key)
        return entry

    def settle(self) -> None:
        """Evict the least recently used entries until within the caps."""
        while len(self._entries) > self.max_entries or (
            len(self._entries) > 0 and self.nbytes > self.max_bytes
        ):
            self._entries.popitem(last=False)

    def forget(self, embedder: str | None = None) -> None:
        """Drop every entry (of ``embedder`` only, when given)."""
        for key in list(self._entries):
            if embedder is None or key[1] == embedder:
                del self._entries[key]

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


THREAD_WORK: Final = 1 << 22
"""Scoring that multiplies more floats than this (rows × non-zero query components) runs
in a thread (numpy releases the GIL), so the event loop serves others meanwhile."""


async def scores(columns: Matrix, query: npt.NDArray[np.float32]) -> Matrix:
    """:func:`~stargraph_mem.embedding.column_dot`, in a thread for large work."""
    if columns.shape[1] * int(np.count_nonzero(query)) > THREAD_WORK:
        return await asyncio.to_thread(column_dot, columns, query)
    return column_dot(columns, query)


def ranked_rows(
    entry: CacheEntry,
    found: Matrix,
    limit: int,
    after: int | None,
    before: int | None,
    wanted: frozenset[str] | None,
) -> list[tuple[str, float]]:
    """The ``limit`` best rows of ``entry`` by their ``found`` scores, best first, ties by
    id: only those whose time lies in ``[after, before)`` and, for facts, whose status is
    ``wanted`` (as last read)."""
    n = entry.size
    mask = in_window(entry.times[:n], after, before)
    if wanted is not None:
        statuses = entry.statuses[:n]
        if len(wanted) == 1:
            (only,) = wanted
            keep = statuses == status_code(only)
        else:
            keep = np.isin(statuses, [status_code(status) for status in wanted])
        mask = keep if mask is None else mask & keep
    if mask is None:
        return top_scores(found, entry.ids, limit)
    rows = np.flatnonzero(mask)
    return top_scores(found[rows], RowIds(entry.ids, rows), limit)
