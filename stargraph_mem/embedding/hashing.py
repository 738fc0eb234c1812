"""The built-in embedder: hashed word and character features, no model, no download.

:class:`HashingEmbedder` maps a text to a signed feature-hashing vector (the "hashing
trick"): every feature string is hashed with CRC-32 (``zlib.crc32`` of its UTF-8 bytes,
then a 32-bit avalanche mix), its bucket is the hash modulo ``dimension`` and its sign a
bit of the hash. Nothing depends on Python's randomised ``hash()``, the process or the
machine, so the same text gives the same bytes everywhere.

Features, after Unicode compatibility decomposition, removal of accents (combining marks)
and case folding, of each word (a run of letters, digits or ``_``):

- the word itself (weight 1);
- its light stem (weight 1): ``ies`` becomes ``y``, or one of the endings ``ing``,
  ``ed``, ``es``, ``s`` (not ``ss``) is removed when at least three characters remain (a
  consonant doubled before ``ing`` / ``ed`` is halved, ``l``, ``s`` and ``z`` excepted),
  then a final ``e`` is dropped from four or more characters, so ``prefers``,
  ``preferred`` and ``preferring`` share ``prefer``, and ``lives``, ``lived`` and
  ``living`` share ``liv``;
- its character 3- to 5-grams, the word wrapped in ``<`` and ``>`` (together weight 1:
  each of the ``g`` grams weighs ``1/sqrt(g)``), so related spellings overlap;
- and, between consecutive content words, the pair of their stems (weight 0.7).

Common English function words (:data:`STOPWORDS`) give only their word feature, at weight
0.2, and are skipped by the pairs. A word's features are scaled by ``1 + ln(tf)`` for a
word that occurs ``tf`` times (sublinear term frequency), then the vector is L2-normalised.
A text without a word (empty, whitespace, punctuation only) gets the zero vector: its cosine
with any vector is 0, so it is never anyone's neighbour.

Any change to these features changes :attr:`HashingEmbedder.version`.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from stargraph_mem.errors import EmbedderError

__all__ = ["CACHED_WORDS", "DEFAULT_DIMENSION", "MAX_DIMENSION", "STOPWORDS", "HashingEmbedder"]

DEFAULT_DIMENSION: Final = 256
"""The vector length of ``hash`` (``hash:<dim>`` chooses another)."""

MAX_DIMENSION: Final = 1 << 16
"""The largest dimension accepted (a hash spreads features over 2**32 values)."""

_STOPWORD_LIST: Final = """
a an the and or but if then than so as of to in on at by for from with without into onto
about over under after before during since until via per i me my mine we us our ours you
your yours he him his she her hers it its they them their theirs this that these those who
whom whose which what when where why how is am are was were be been being do does did done
have has had having will would shall should can could may might must not no nor s t d ll
m re ve don doesn didn isn wasn aren weren also just very too there here all any some each
both
"""
STOPWORDS: Final = frozenset(_STOPWORD_LIST.split())
"""Function words that say little about a text's meaning: they keep a small weight."""

CACHED_WORDS: Final = 1 << 15
"""How many words (and word pairs) an embedder remembers the features of."""

_WORD: Final = re.compile(r"\w+")
_STOPWORD_WEIGHT: Final = 0.2
_WORD_WEIGHT: Final = 1.0
_STEM_WEIGHT: Final = 1.0
_PAIR_WEIGHT: Final = 0.7
_GRAM_SIZES: Final = (3, 4, 5)
_DOUBLED: Final = frozenset("bcdfgkmnprtv")  # consonants doubled before -ing, -ed

_Features = tuple[list[int], list[float]]
"""A word's (or word pair's) hashed features: buckets and signed weights."""


def fold(text: str) -> str:
    """``text`` with compatibility forms decomposed, accents removed and case folded:
    ``"Café ＡＢＣ"`` → ``"cafe abc"``."""
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in decomposed if not unicodedata.combining(c))
    return text.casefold()


def words(text: str) -> list[str]:
    """The folded words of ``text``, in order."""
    return _WORD.findall(fold(text))


def stem(word: str) -> str:
    """A light, deterministic English stem (see the module's description)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for ending in ("ing", "ed", "es", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            if ending == "s" and word.endswith("ss"):
                break
            word = word[: -len(ending)]
            if ending in ("ing", "ed") and word[-1] == word[-2] and word[-1] in _DOUBLED:
                word = word[:-1]  # stopped, running -> stop, run (but called -> call)
            break
    if len(word) >= 4 and word.endswith("e"):
        word = word[:-1]
    return word


def hash32(features: Sequence[str]) -> npt.NDArray[np.uint64]:
    """A 32-bit hash of each feature string, the same on every machine: CRC-32 of its UTF-8
    bytes, then MurmurHash3's avalanche finaliser, so nearby strings land far apart."""
    h = np.fromiter(
        (zlib.crc32(f.encode("utf-8")) for f in features), dtype=np.uint64, count=len(features)
    )
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    return h


def word_features(word: str) -> list[tuple[str, float]]:
    """One folded word's feature strings and weights (before hashing)."""
    if word in STOPWORDS:
        return [("w\x1f" + word, _STOPWORD_WEIGHT)]
    wrapped = f"<{word}>"
    grams = [wrapped[i : i + n] for n in _GRAM_SIZES for i in range(len(wrapped) - n + 1)]
    features = [("w\x1f" + word, _WORD_WEIGHT), ("s\x1f" + stem(word), _STEM_WEIGHT)]
    if grams:
        weight = 1.0 / math.sqrt(len(grams))
        features.extend(("c\x1f" + gram, weight) for gram in grams)
    return features


def _place(groups: list[list[tuple[str, float]]], dimension: int) -> list[_Features]:
    """Hash each group of (feature, weight) into (buckets, signed weights), all at once."""
    strings = [feature for group in groups for feature, _ in group]
    weights = np.fromiter(
        (weight for group in groups for _, weight in group), dtype=np.float64, count=len(strings)
    )
    h = hash32(strings)
    buckets = ((h & np.uint64(0x7FFFFFFF)) % np.uint64(dimension)).tolist()
    signed = np.where(h & np.uint64(0x80000000), -weights, weights).tolist()
    placed: list[_Features] = []
    start = 0
    for group in groups:
        end = start + len(group)
        placed.append((buckets[start:end], signed[start:end]))
        start = end
    return placed


class HashingEmbedder:
    """The built-in :class:`~stargraph_mem.embedding.Embedder`: deterministic hashed word,
    stem, character n-gram and word-pair features (see the module's description), fast, no
    download. Texts that share words or word stems score high; synonyms without shared
    letters do not (a real model, ``minilm``, does that).

    Each instance remembers the hashed features of up to :data:`CACHED_WORDS` words and word
    pairs (then starts afresh): a cache only, no vector depends on it."""

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        if (
            isinstance(dimension, bool)
            or not isinstance(dimension, int)
            or not 1 <= dimension <= MAX_DIMENSION
        ):
            raise EmbedderError(
                f"hashing embedder: dimension must be an integer from 1 to {MAX_DIMENSION}, "
                f"got {dimension!r}",
                dimension=dimension,
            )
        self._dimension = dimension
        self._words: dict[str, _Features] = {}
        self._pairs: dict[tuple[str, str], _Features] = {}

    @property
    def name(self) -> str:
        return "stargraph-hash"

    @property
    def version(self) -> str:
        return "1"

    @property
    def dimension(self) -> int:
        return self._dimension

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self._dimension})"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One unit-length ``float32`` row per text (the zero row for a text without a
        word). ``EmbedderError`` names the first item that is not a ``str``."""
        if isinstance(texts, str):
            raise EmbedderError("embed takes a sequence of texts, not one str")
        tokenised: list[list[str]] = []
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise EmbedderError(
                    f"texts[{row}] is a {type(text).__name__}, not a str", index=row
                )
            tokenised.append(words(text))
        word_counts = [Counter(tokens) for tokens in tokenised]
        pair_counts = [
            Counter(itertools.pairwise(t for t in tokens if t not in STOPWORDS))
            for tokens in tokenised
        ]
        self._learn(word_counts, pair_counts)
        return self._sum(word_counts, pair_counts)

    def _learn(
        self, word_counts: list[Counter[str]], pair_counts: list[Counter[tuple[str, str]]]
    ) -> None:
        """Hash the features of the words and pairs not met before, in one go."""
        known_words, known_pairs = self._words, self._pairs
        new_words = list(
            {w: None for counts in word_counts for w in counts if w not in known_words}
        )
        new_pairs = list(
            {p: None for counts in pair_counts for p in counts if p not in known_pairs}
        )
        if not new_words and not new_pairs:
            return
        if len(known_words) + len(new_words) > CACHED_WORDS:
            known_words.clear()  # start afresh, with every word of this batch
            new_words = list({w: None for counts in word_counts for w in counts})
        if len(known_pairs) + len(new_pairs) > CACHED_WORDS:
            known_pairs.clear()
            new_pairs = list({p: None for counts in pair_counts for p in counts})
        groups = [word_features(w) for w in new_words]
        groups.extend(
            [(f"p\x1f{stem(first)} {stem(second)}", _PAIR_WEIGHT)] for first, second in new_pairs
        )
        placed = _place(groups, self._dimension)
        known_words.update(zip(new_words, placed, strict=False))
        known_pairs.update(zip(new_pairs, placed[len(new_words) :], strict=False))

    def _sum(
        self, word_counts: list[Counter[str]], pair_counts: list[Counter[tuple[str, str]]]
    ) -> npt.NDArray[np.float32]:
        """Each text's features, scaled by their sublinear TF, summed and normalised."""
        known_words, known_pairs = self._words, self._pairs
        buckets: list[int] = []
        weights: list[float] = []
        sizes: list[int] = []
        for words_tf, pairs_tf in zip(word_counts, pair_counts, strict=True):
            before = len(buckets)
            for table, counts in ((known_words, words_tf), (known_pairs, pairs_tf)):
                for key, tf in counts.items():
                    key_buckets, key_weights = table[key]  # type: ignore[index]
                    buckets.extend(key_buckets)
                    if tf == 1:
                        weights.extend(key_weights)
                    else:
                        scale = 1.0 + math.log(tf)
                        weights.extend([w * scale for w in key_weights])
            sizes.append(len(buckets) - before)
        rows, dimension = len(sizes), self._dimension
        if not buckets:
            return np.zeros((rows, dimension), dtype=np.float32)
        flat = np.array(buckets, dtype=np.int64)
        if rows > 1:
            flat += np.repeat(np.arange(rows, dtype=np.int64) * dimension, sizes)
        dense = np.bincount(
            flat, weights=np.array(weights, dtype=np.float64), minlength=rows * dimension
        )
        matrix = dense.reshape(rows, dimension)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix.astype(np.float32)
