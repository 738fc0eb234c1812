"""The in-process BM25 index of episodes and the column-wise cosine ranking."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.embedding import SCORE_DECIMALS, column_dot, dot, top_k, top_scores
from stargraph_mem.embedding.hashing import HashingEmbedder
from stargraph_mem.stores.repositories.word_index import BM25_B, BM25_K1, WordIndex, doc_words

DOCS = [
    (1, "e1", 100, "green tea in the morning"),
    (2, "e2", 200, "black coffee, black tea"),
    (3, "e3", 300, "Crème brûlée after dinner"),
]


def bm25(term_counts: list[int], lengths: list[int], tf: int, length: int) -> float:
    n, df = len(lengths), sum(1 for c in term_counts if c)
    idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    average = sum(lengths) / n
    return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average))


def test_scores_are_okapi_bm25_over_the_partitions_episodes() -> None:
    index = WordIndex()
    index.add(DOCS)
    lengths = [len(doc_words(text)) for *_, text in DOCS]
    assert lengths == [5, 4, 4]
    hits = index.search(["tea"], limit=5)
    expected = {
        "e1": bm25([1, 1, 0], lengths, 1, 5),
        "e2": bm25([1, 1, 0], lengths, 1, 4),
    }
    assert [i for i, _ in hits] == ["e2", "e1"]  # the shorter text first
    for item_id, score in hits:
        assert score == round(expected[item_id], SCORE_DECIMALS)
    black = index.search(["black", "tea"], limit=5)
    assert black[0][0] == "e2"
    assert black[0][1] == round(bm25([0, 2, 0], lengths, 2, 4) + expected["e2"], SCORE_DECIMALS)


def test_accents_and_case_fold_on_both_sides_and_windows_bound_time() -> None:
    index = WordIndex()
    index.add(DOCS)
    assert [i for i, _ in index.search(["CREME", "brulée"], limit=5)] == ["e3"]
    assert index.search(["nothing"], limit=5) == []
    assert [i for i, _ in index.search(["tea"], limit=5, after_us=150)] == ["e2"]
    assert [i for i, _ in index.search(["tea"], limit=5, before_us=200)] == ["e1"]
    assert WordIndex().search(["tea"], limit=5) == []


def test_adding_only_takes_episodes_after_the_seq_held() -> None:
    index = WordIndex()
    index.add(DOCS[:2])
    index.add(DOCS)  # e1 and e2 again: left out
    assert index.ids == ["e1", "e2", "e3"]
    assert index.seq == 3


WORDS = ["tea", "coffee", "green", "black", "cake", "rain", "dog", "walk"]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1, max_size=25
    ),
    cut=st.integers(min_value=0, max_value=25),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
)
def test_the_ranking_does_not_depend_on_how_episodes_arrived(
    texts: list[list[str]], cut: int, query: list[str]
) -> None:
    docs = [(i + 1, f"e{i:03d}", i, " ".join(words)) for i, words in enumerate(texts)]
    whole = WordIndex()
    whole.add(docs)
    parts = WordIndex()
    parts.add(docs[:cut])
    parts.add(docs[cut:])
    first = whole.search(query, limit=10)
    assert first == parts.search(query, limit=10)
    assert first == sorted(first, key=lambda hit: (-hit[1], hit[0]))


def test_column_scores_agree_with_row_scores_for_sparse_and_dense_queries() -> None:
    embedder = HashingEmbedder()
    texts = [f"episode {i} about {WORDS[i % 8]} and {WORDS[(i * 3) % 8]}" for i in range(300)]
    matrix = embedder.embed(texts)
    columns = np.ascontiguousarray(matrix.T)
    sparse = embedder.embed(["green tea"])[0]
    assert np.count_nonzero(sparse) < len(sparse) / 2
    rng = np.random.default_rng(7)
    drawn = rng.standard_normal(matrix.shape[1])
    dense: npt.NDArray[np.float32] = np.asarray(drawn / np.linalg.norm(drawn), dtype=np.float32)
    for query in (sparse, dense):
        np.testing.assert_allclose(column_dot(columns, query), dot(matrix, query), atol=1e-5)
        ids = [f"e{i:03d}" for i in range(300)]
        by_columns = top_scores(column_dot(columns, query), ids, 10)
        by_rows = top_k(matrix, ids, query, 10)
        assert len(by_columns) == len(by_rows) == 10
        for (_, a), (_, b) in zip(by_columns, by_rows, strict=True):
            assert abs(a - b) <= 2e-6  # the same scores but for the sums' order
        # the same columns in a wider array (a cache grown by doubling): the same scores
        wide = np.zeros((matrix.shape[1], 512), dtype=np.float32)
        wide[:, :300] = columns
        assert np.array_equal(column_dot(wide[:, :300], query), column_dot(columns, query))
    assert not column_dot(columns, np.zeros(matrix.shape[1], dtype=np.float32)).any()


@settings(max_examples=100, deadline=None)
@given(
    scores=st.lists(
        st.sampled_from([0.1, 0.2, 0.2000004, 0.3, 0.30000001, 0.5, -0.2, 0.9999996, 1.0]),
        min_size=0,
        max_size=40,
    ),
    k=st.integers(min_value=1, max_value=12),
    floor=st.none() | st.sampled_from([0.2, 0.3, 0.0]),
)
def test_top_scores_equals_rounding_everything_then_sorting(
    scores: list[float], k: int, floor: float | None
) -> None:
    raw = np.asarray(scores, dtype=np.float32)
    ids = [f"i{j:02d}" for j in range(len(scores))]
    rounded = [round(float(s), SCORE_DECIMALS) for s in raw]
    reference = sorted(
        (-r, item) for r, item in zip(rounded, ids, strict=True) if floor is None or r >= floor
    )
    expected = [(item, -neg) for neg, item in reference[:k]]
    assert top_scores(raw, ids, k, min_score=floor) == expected
