"""Embedders and the vector arithmetic recall and similarity share.

An :class:`Embedder` turns texts into unit-length ``float32`` vectors of a fixed
dimension; its :func:`identity` (name, version, dimension) is stored with every vector,
so vectors of two models are never compared. Rankings are exact cosine over one
partition's vectors, rounded to :data:`SCORE_DECIMALS` places and tie-broken by id, so the
same inputs give the same order on every backend and machine.

:func:`load_embedder` builds one from a short spec: ``hash`` (the built-in
:class:`HashingEmbedder`, the default), ``hash:<dim>``, ``minilm`` (all-MiniLM-L6-v2 as
the ``embeddings`` extra bundles it) or ``sentence-transformers:<path-or-name>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from stargraph_mem.embedding.hashing import HashingEmbedder
from stargraph_mem.embedding.sentence import SentenceTransformerEmbedder, minilm
from stargraph_mem.errors import EmbedderError

__all__ = [
    "DEFAULT_EMBEDDER_SPEC",
    "EMBEDDER_SPECS",
    "PREFILTER_FROM",
    "SCORE_DECIMALS",
    "SPARSE_SHARE",
    "Embedder",
    "HashingEmbedder",
    "Matrix",
    "SentenceTransformerEmbedder",
    "column_dot",
    "dot",
    "fast_scores",
    "from_blob",
    "from_blobs",
    "identity",
    "load_embedder",
    "to_blob",
    "top_k",
    "top_scores",
    "with_room",
]

Matrix = npt.NDArray[np.float32]
"""Rows of unit-length ``float32`` vectors (one row per text)."""

SCORE_DECIMALS: Final = 6
"""Cosine scores are rounded to this many places before ranking (ties then break by id),
so summation order inside a BLAS routine cannot change an order."""


@runtime_checkable
class Embedder(Protocol):
    """Texts in, unit-length vectors out; deterministic for a given identity."""

    @property
    def name(self) -> str:
        """The model's name (``stargraph-hash``, ``all-MiniLM-L6-v2``)."""
        ...

    @property
    def version(self) -> str:
        """Changes whenever the same text could get another vector."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """One L2-normalised ``float32`` row per text, in order (shape ``(len(texts),
        dimension)``). CPU-bound and synchronous: async callers run large batches in a
        thread."""
        ...


def identity(embedder: Embedder) -> str:
    """The string stored with every vector: ``name@version/dimension``."""
    return f"{embedder.name}@{embedder.version}/{embedder.dimension}"


def to_blob(row: npt.NDArray[np.floating]) -> bytes:
    """One vector as little-endian ``float32`` bytes (as stored on both backends)."""
    return np.asarray(row, dtype="<f4").tobytes()


def from_blob(blob: bytes, dimension: int) -> Matrix:
    """The vector a :func:`to_blob` stored; ``ValueError`` when its length is not
    ``dimension`` floats."""
    if len(blob) != 4 * dimension:
        raise ValueError(f"a stored vector has {len(blob)} bytes; expected {4 * dimension}")
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def with_room(rows: Matrix, used: int, need: int) -> Matrix:
    """``rows`` when it has ``need`` rows, else a copy with room for at least twice as
    many (its first ``used`` rows kept, the others zero): a matrix that grows by rows."""
    if need <= len(rows):
        return rows
    grown = np.zeros((max(need, 2 * len(rows)), rows.shape[1]), dtype=np.float32)
    grown[:used] = rows[:used]
    return grown


def from_blobs(blobs: Sequence[bytes], dimension: int) -> Matrix:
    """Stored vectors as one matrix (shape ``(len(blobs), dimension)``)."""
    if not blobs:
        return np.zeros((0, dimension), dtype=np.float32)
    joined = b"".join(blobs)
    if len(joined) != 4 * dimension * len(blobs):
        raise ValueError(f"stored vectors are not all {dimension} floats long")
    return np.frombuffer(joined, dtype="<f4").reshape(len(blobs), dimension).astype(np.float32)


def dot(matrix: Matrix, query: npt.NDArray[np.floating]) -> Matrix:
    """Each row's dot product with ``query``, summed in one fixed order on one thread
    (``einsum`` without BLAS: a BLAS matrix-vector product may split the sum by thread,
    and its threads only wait for busy cores at these sizes)."""
    products: Matrix = np.einsum("ij,j->i", matrix, np.asarray(query, dtype=np.float32))
    return products


SPARSE_SHARE: Final = 0.5
"""A query with non-zero components in at most this share of the dimensions is scored
column by column (:func:`column_dot`): the built-in embedder's short queries touch a
tenth of them."""


def column_dot(columns: Matrix, query: npt.NDArray[np.floating]) -> Matrix:
    """Each stored vector's dot product with ``query``, the vectors held as the columns
    of ``columns`` (shape ``(dimension, n)``).

    A sparse query is summed over its non-zero components only, in ascending order of
    component, one ``float32`` multiply and add each (the zero ones add nothing): it reads
    only those rows of ``columns``, a fraction of the matrix. A dense one is one
    ``einsum``. Either way the order of the sums is fixed, so the scores are the same
    on every run."""
    q = np.asarray(query, dtype=np.float32)
    n = columns.shape[1]
    nonzero = np.flatnonzero(q)
    if len(nonzero) > SPARSE_SHARE * len(q):
        dense: Matrix = np.einsum("jn,j->n", columns, q)
        return dense
    scores: Matrix = np.zeros(n, dtype=np.float32)
    if not len(nonzero):
        return scores
    term: Matrix = np.empty(n, dtype=np.float32)
    for j in nonzero:
        np.multiply(columns[j], q[j], out=term)
        scores += term
    return scores


def top_k(
    matrix: Matrix,
    ids: Sequence[str],
    query: npt.NDArray[np.floating],
    k: int,
    *,
    min_score: float | None = None,
    norm: float | None = None,
    fast: Matrix | None = None,
) -> list[tuple[str, float]]:
    """The ``k`` rows most similar to ``query`` as ``(id, cosine)``, best first: scores
    rounded to :data:`SCORE_DECIMALS` places, ties broken by id (ascending); rows below
    ``min_score`` left out. Rows and query are unit length, so cosine is a dot product.

    ``norm``, when given, is at least the largest L2 norm of a row: then the exact scores
    (:func:`dot`) of only the rows that could rank are computed (see
    :func:`_candidates`); the result is the same. ``fast``, when given with ``norm``, is
    each row's fast score (any ``float32`` sum of the ``d`` products of the row and the
    query, made beforehand: see :func:`fast_scores`) in place of the one computed here."""
    if len(ids) != matrix.shape[0]:
        raise ValueError(f"{len(ids)} ids for {matrix.shape[0]} vectors")
    if fast is not None and len(fast) != len(ids):
        raise ValueError(f"{len(fast)} fast scores for {len(ids)} vectors")
    if k <= 0 or not len(ids):
        return []
    q = np.asarray(query, dtype=np.float32)
    rows = None
    if norm is not None and len(ids) > PREFILTER_FROM:
        rows = _candidates(matrix, q, k, min_score, norm, fast)
    if rows is None:
        return top_scores(dot(matrix, q), ids, k, min_score=min_score)
    picked = [ids[i] for i in rows.tolist()]
    return top_scores(dot(matrix[rows], q), picked, k, min_score=min_score)


_rows_dot: Any = getattr(np, "vecdot", None)
"""numpy 2's row-by-row dot product (one thread: a BLAS matrix-vector product of this
size splits across threads, which wait for busy cores); ``@`` on numpy 1."""

PREFILTER_FROM: Final = 64
""":func:`top_k` over more rows than this scores them all with a fast product first and
computes the exact scores of the few that could rank only."""


def fast_scores(matrix: Matrix, queries: Matrix) -> Matrix:
    """The fast scores (see :func:`_candidates`) of every row of ``matrix`` for each of
    ``queries`` (shape ``(len(queries), len(matrix))``), in one call on one thread: each
    query reads the rows while the cache still holds them, where one call per query, made
    between other work, reads them back from memory each time."""
    if _rows_dot is None:  # numpy 1: einsum, not a BLAS product (its threads would spin)
        products: Matrix = np.einsum("bd,nd->bn", queries, matrix)
        return products
    blocked: Matrix = _rows_dot(matrix[None, :, :], queries[:, None, :])
    return blocked


def _candidates(
    matrix: Matrix,
    query: Matrix,
    k: int,
    min_score: float | None,
    norm: float,
    fast: Matrix | None = None,
) -> npt.NDArray[np.intp] | None:
    """The rows whose exact score (:func:`dot`) could make :func:`top_scores` keep them,
    from a fast product (another summation order, so slightly other values); None
    when that product is not finite (then every row is scored exactly).

    Both are ``float32`` sums of the same ``d`` products, so each differs from the true
    dot product by at most ``γ_d · Σ|m_j q_j| ≤ γ_d ‖m‖ ‖q‖`` (``γ_d = d·u / (1 − d·u)``,
    ``u = 2**-24``, whatever the order of the sums), and from each other by at most twice
    that: ``margin``. A row ``top_scores`` keeps has an exact score at least
    ``min_score − _SLACK`` and at least the exact ``k``-th best minus ``_SLACK``; the
    exact ``k``-th best is at least the fast ``k``-th best minus ``margin``; so its fast
    score is at least each bound minus ``2 · margin``. Those rows hold the exact ``k``
    best, so ``top_scores`` over them finds the same ``k``-th best, keeps the same rows
    and returns the same list."""
    if fast is None:
        fast = _rows_dot(matrix, query) if _rows_dot is not None else matrix @ query
    if not math.isfinite(float(np.add.reduce(fast, dtype=np.float64))):
        return None  # a NaN or an infinity among the scores (a finite sum of these is)
    d = matrix.shape[1]
    gamma = d * 2.0**-24 / (1 - d * 2.0**-24) if d < 2**23 else math.inf
    q64 = query.astype(np.float64)
    margin = 2 * gamma * norm * math.sqrt(float(q64 @ q64)) * 1.001
    reach = 2 * margin + _SLACK + 1e-12
    if not math.isfinite(reach):
        return None
    rows = np.flatnonzero(fast >= min_score - reach) if min_score is not None else None
    pool = fast if rows is None else fast[rows]
    if len(pool) > k:
        near = np.flatnonzero(pool >= _kth(pool, k) - reach)
        rows = near if rows is None else rows[near]
    return np.arange(len(fast)) if rows is None else rows


_SLACK: Final = 1e-5
"""Raw scores this far below the k-th best may still round to the same value."""


def _kth(values: npt.NDArray[np.floating], k: int) -> float:
    """The ``k``-th largest of ``values`` (``k`` at most their number)."""
    return float(np.partition(values, len(values) - k)[len(values) - k])


def top_scores(
    scores: npt.NDArray[np.floating],
    ids: Sequence[str],
    k: int,
    *,
    min_score: float | None = None,
) -> list[tuple[str, float]]:
    """The ``k`` best of ``scores`` (one per id) as ``(id, score)``, best first: scores
    rounded to :data:`SCORE_DECIMALS` places, ties broken by id; below ``min_score``
    (after rounding) left out.

    Only the candidates near the top are rounded: rounding is monotone, so a row whose
    raw score is well below the k-th best raw score cannot reach the k-th best rounded
    one."""
    if len(ids) != len(scores):
        raise ValueError(f"{len(ids)} ids for {len(scores)} scores")
    if k <= 0 or not len(ids):
        return []
    raw = np.asarray(scores)
    if min_score is not None and len(raw) <= _FEW:
        return _top_few(raw.tolist(), ids, k, min_score)
    if min_score is None:
        keep = np.flatnonzero(raw >= _kth(raw, k) - _SLACK) if len(raw) > k else np.arange(len(raw))
    else:
        keep = np.flatnonzero(raw >= min_score - _SLACK)
        if len(keep) > k:
            keep = keep[raw[keep] >= _kth(raw[keep], k) - _SLACK]
    rounded = np.round(raw[keep].astype(np.float64), SCORE_DECIMALS)
    if min_score is not None:
        keep, rounded = keep[rounded >= min_score], rounded[rounded >= min_score]
    ranked = sorted(
        (-score, ids[i]) for i, score in zip(keep.tolist(), rounded.tolist(), strict=True)
    )
    return [(item_id, -neg) for neg, item_id in ranked[:k]]


_FEW: Final = 16
""":func:`top_scores` ranks at most this many scores in Python (numpy's calls cost more)."""

_SCALE: Final = 10.0**SCORE_DECIMALS


def _top_few(
    raw: list[float], ids: Sequence[str], k: int, min_score: float
) -> list[tuple[str, float]]:
    """:func:`top_scores` of a few scores with a ``min_score``, the same steps in Python:
    a NaN fails every comparison as it does in numpy, and ``round(x·10⁶) / 10⁶`` of a
    ``float`` is exactly ``np.round(x, 6)`` (both multiply, round half to even and
    divide in binary64)."""
    floor = min_score - _SLACK
    kept = [(score, i) for i, score in enumerate(raw) if score >= floor]
    if len(kept) > k:
        kth = sorted((score for score, _ in kept), reverse=True)[k - 1] - _SLACK
        kept = [(score, i) for score, i in kept if score >= kth]
    ranked = []
    for score, i in kept:
        rounded = round(score * _SCALE) / _SCALE
        if rounded >= min_score:
            ranked.append((-rounded, ids[i]))
    ranked.sort()
    return [(item_id, -neg) for neg, item_id in ranked[:k]]


DEFAULT_EMBEDDER_SPEC: Final = "hash"
"""The embedder used when none is named: :class:`HashingEmbedder` of 256 dimensions."""

EMBEDDER_SPECS: Final = (
    "hash",
    "hash:<dimension>",
    "minilm",
    "sentence-transformers:<model directory or cached name>",
)
"""The forms :func:`load_embedder` accepts."""


def load_embedder(spec: str = DEFAULT_EMBEDDER_SPEC) -> Embedder:
    """The embedder ``spec`` names: ``hash`` / ``hash:<dimension>`` (built in),
    ``minilm`` (the bundled all-MiniLM-L6-v2) or ``sentence-transformers:<path-or-name>``
    (a local model). ``EmbedderError`` (a ``ValueError``) for any other spec;
    ``EmbedderUnavailableError`` when the ``embeddings`` extra or the model is missing."""
    if not isinstance(spec, str):
        raise EmbedderError(f"embedder spec must be a str, got {type(spec).__name__}", spec=spec)
    kind, colon, argument = spec.partition(":")
    if spec == "hash":
        return HashingEmbedder()
    if kind == "hash" and colon:
        if not (argument.isascii() and argument.isdigit()):
            raise _bad_spec(spec, "the dimension is not a positive integer")
        try:
            return HashingEmbedder(int(argument))
        except EmbedderError as exc:
            raise _bad_spec(spec, exc.message) from exc
    if spec == "minilm":
        return minilm()
    if kind == "sentence-transformers" and colon:
        if not argument.strip():
            raise _bad_spec(spec, "no model directory or name after the colon")
        return SentenceTransformerEmbedder(argument)
    raise _bad_spec(spec, "unknown embedder")


def _bad_spec(spec: str, reason: str) -> EmbedderError:
    forms = ", ".join(EMBEDDER_SPECS)
    return EmbedderError(f"embedder spec {spec!r}: {reason}; expected one of: {forms}", spec=spec)
