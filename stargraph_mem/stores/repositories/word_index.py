"""BM25 over one partition's episodes, held in process.

Recall's full-text strategy over episodes ranks them by Okapi BM25 (``k1`` 1.2, ``b``
0.75, the IDF ``ln(1 + (N - n + 0.5) / (n + 0.5))``, which is never negative). The
postings live in this process, per partition, brought up to date at each use by reading
only the episodes stored after the highest seq held (as the vector cache does), so a
ranking costs a few array operations over the postings of the query's words instead of a
score computed row by row inside the database. The scores are the same on every backend
(both read the same episodes), rounded to
:data:`~stargraph_mem.embedding.SCORE_DECIMALS` places with ties broken by id.

Words are runs of letters, digits or ``_`` of the case-folded text without accents
(:func:`~stargraph_mem.stores.repositories.search.fold`), in a document and in a query.
"""

from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, overload

import numpy as np
import numpy.typing as npt

from stargraph_mem.embedding import top_scores
from stargraph_mem.stores.repositories.search import fold

__all__ = [
    "BM25_B",
    "BM25_K1",
    "RowIds",
    "WordIndex",
    "WordIndexCache",
    "doc_words",
    "in_window",
]

BM25_K1: Final = 1.2
BM25_B: Final = 0.75
_NEVER: Final = -(2**63)
_ALWAYS: Final = 2**63 - 1


def doc_words(text: str) -> list[str]:
    """The words of ``text`` as the index and its queries see them."""
    return _WORD.findall(fold(text))


_WORD: Final = re.compile(r"\w+")


@dataclass(slots=True)
class _Postings:
    """One word's documents (rows of the index) and counts, in row order."""

    rows: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(8, dtype=np.int32))
    counts: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(8, dtype=np.float32))
    size: int = 0

    def extend(self, rows: list[int], counts: list[int]) -> None:
        end = self.size + len(rows)
        if end > len(self.rows):
            capacity = max(end, 2 * len(self.rows))
            self.rows = np.resize(self.rows, capacity)
            self.counts = np.resize(self.counts, capacity)
        self.rows[self.size : end] = rows
        self.counts[self.size : end] = counts
        self.size = end


@dataclass(slots=True)
class WordIndex:
    """The postings of one partition's episodes as of ``seq`` (the highest episode seq
    held)."""

    seq: int = 0
    ids: list[str] = field(default_factory=list)
    times: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(64, dtype=np.int64))
    lengths: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(64, dtype=np.float32))
    postings: dict[str, _Postings] = field(default_factory=dict)
    total_length: int = 0
    count: int = 0
    """Postings held in all (for the cache's size)."""

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Roughly what the index holds in memory."""
        return int(self.times.nbytes + self.lengths.nbytes + 8 * self.count + 200 * self.size)

    def add(self, docs: Sequence[tuple[int, str, int, str]]) -> None:
        """Add episodes ``(seq, id, ts_us, content)`` stored after :attr:`seq`, in seq
        order."""
        fresh = [doc for doc in docs if doc[0] > self.seq]
        if not fresh:
            return
        first, end = self.size, self.size + len(fresh)
        if end > len(self.times):
            capacity = max(end, 2 * len(self.times))
            self.times = np.resize(self.times, capacity)
            self.lengths = np.resize(self.lengths, capacity)
        grouped: dict[str, tuple[list[int], list[int]]] = {}
        for row, (_, item_id, ts_us, content) in enumerate(fresh, start=first):
            words = doc_words(content)
            self.ids.append(item_id)
            self.times[row] = ts_us
            self.lengths[row] = len(words)
            self.total_length += len(words)
            for word, n in Counter(words).items():
                rows, counts = grouped.setdefault(word, ([], []))
                rows.append(row)
                counts.append(n)
        for word, (rows, counts) in grouped.items():
            postings = self.postings.get(word)
            if postings is None:
                postings = self.postings[word] = _Postings()
            postings.extend(rows, counts)
            self.count += len(rows)
        self.seq = fresh[-1][0]

    def search(
        self,
        words: Sequence[str],
        *,
        limit: int,
        after_us: int | None = None,
        before_us: int | None = None,
    ) -> list[tuple[str, float]]:
        """The ``limit`` best episodes for any of ``words`` as ``(id, BM25 score)``, best
        first, ties by id; ``after_us`` (inclusive) and ``before_us`` (exclusive) bound
        their time."""
        n = self.size
        if not n:
            return []
        average = self.total_length / n if self.total_length else 1.0
        lengths = self.lengths[:n]
        scores = np.zeros(n, dtype=np.float64)
        matched = np.zeros(n, dtype=np.bool_)
        for word in sorted({fold(word) for word in words}):
            postings = self.postings.get(word)
            if postings is None:
                continue
            rows = postings.rows[: postings.size]
            counts = postings.counts[: postings.size].astype(np.float64)
            idf = math.log(1.0 + (n - postings.size + 0.5) / (postings.size + 0.5))
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[rows] / average)
            scores[rows] += idf * counts * (BM25_K1 + 1.0) / (counts + norm)
            matched[rows] = True
        window = in_window(self.times[:n], after_us, before_us)
        if window is not None:
            matched &= window
        found = np.flatnonzero(matched)
        if not len(found):
            return []
        return top_scores(scores[found], RowIds(self.ids, found), limit)


def in_window(
    times: npt.NDArray[np.int64], after: int | None, before: int | None
) -> npt.NDArray[np.bool_] | None:
    """Which ``times`` lie in ``[after, before)`` (``None``: no bound given, all of them)."""
    if after is None and before is None:
        return None
    low = _NEVER if after is None else after
    high = _ALWAYS if before is None else before
    window: npt.NDArray[np.bool_] = (times >= low) & (times < high)
    return window


class RowIds(Sequence[str]):
    """The ids of some rows, without copying them (a ranking reads only its length and
    the ids it keeps)."""

    __slots__ = ("_ids", "_rows")

    def __init__(self, ids: list[str], rows: npt.NDArray[np.intp]) -> None:
        self._ids, self._rows = ids, rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self._ids[int(i)] for i in self._rows[index]]
        return self._ids[int(self._rows[index])]


class WordIndexCache:
    """Word indexes of the partitions recently searched, least recently used out first
    (at most :attr:`max_entries` and about :attr:`max_bytes` in all)."""

    def __init__(self, max_entries: int = 64, max_bytes: int = 256 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, WordIndex] = OrderedDict()

    def get(self, partition_key: str) -> WordIndex:
        entry = self._entries.get(partition_key)
        if entry is None:
            entry = self._entries[partition_key] = WordIndex()
        self._entries.move_to_end(partition_key)
        return entry

    def settle(self) -> None:
        """Evict the least recently used entries until within the caps."""
        while len(self._entries) > self.max_entries or (
            len(self._entries) > 0
            and sum(e.nbytes for e in self._entries.values()) > self.max_bytes
        ):
            self._entries.popitem(last=False)

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    def forget(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
