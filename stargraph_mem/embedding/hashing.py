"""The built-in embedder: hashed word and character features, no model, no download.

:class:`HashingEmbedder` maps a text to a signed feature-hashing vector (the "hashing
trick"): every feature string is hashed with CRC-32 (``zlib.crc32`` of its UTF-8 bytes,
then MurmurHash3's 32-bit avalanche finaliser); its bucket is the hash's low 31 bits
modulo ``dimension`` and its sign the top bit. Nothing depends on Python's randomised
``hash()``, the process or the machine, so the same text gives the same bytes everywhere.

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
0.2, and are skipped by the pairs. A word's (or pair's) features are scaled by
``1 + ln(tf)`` when it occurs ``tf`` times (sublinear term frequency), then the vector is
L2-normalised. A text without a word (empty, whitespace, punctuation only) gets the zero
vector: its cosine with any vector is 0, so it is never anyone's neighbour.

Any change to these features changes :attr:`HashingEmbedder.version`.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from stargraph_mem.errors import EmbedderError

__all__ = [
    "CACHED_TEXTS",
    "CACHED_WORDS",
    "DEFAULT_DIMENSION",
    "MAX_DIMENSION",
    "STOPWORDS",
    "HashingEmbedder",
]

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

CACHED_TEXTS: Final = 1 << 14
"""How many texts' vectors (by their folded words) an embedder remembers."""

_ONE_BY_ONE: Final = 3
"""Batches of at most this many texts are summed text by text (see ``_sum_one``)."""

_WORD: Final = re.compile(r"\w+")
_STOPWORD_WEIGHT: Final = 0.2
_WORD_WEIGHT: Final = 1.0
_STEM_WEIGHT: Final = 1.0
_PAIR_WEIGHT: Final = 0.7
_GRAM_SIZES: Final = (3, 4, 5)
_DOUBLED: Final = frozenset("bcdfgkmnprtv")  # consonants doubled before -ing, -ed

_Features = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
"""Hashed features: buckets and signed weights."""


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


def _place(groups: list[list[tuple[str, float]]], dimension: int) -> _Features:
    """Hash the (feature, weight) groups, all at once, into (buckets, signed weights),
    group after group."""
    strings = [feature for group in groups for feature, _ in group]
    weights = np.fromiter(
        (weight for group in groups for _, weight in group), dtype=np.float64, count=len(strings)
    )
    h = hash32(strings)
    buckets = ((h & np.uint64(0x7FFFFFFF)) % np.uint64(dimension)).astype(np.int64)
    return buckets, np.where(h & np.uint64(0x80000000), -weights, weights)


_TF_SCALES: list[npt.NDArray[np.float64]] = [np.ones(2, dtype=np.float64)]
"""The table of :func:`_tf_scales` (one item, replaced as it grows)."""


def _tf_scales(most: int) -> npt.NDArray[np.float64]:
    """The sublinear scale ``1 + ln(tf)`` of each term frequency ``tf`` from 0 to at least
    ``most``, by index (1 for 0 and 1), each computed once with ``math.log`` as
    :meth:`HashingEmbedder._features` computes it, so both give the same bits."""
    table = _TF_SCALES[0]
    if most >= len(table):
        size = max(most + 1, 2 * len(table))
        table = np.array([1.0, 1.0] + [1.0 + math.log(tf) for tf in range(2, size)])
        _TF_SCALES[0] = table
    return table


class _Grown:
    """A 1-D array appended to in place, its capacity doubled as it fills."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self.data: npt.NDArray[Any] = np.empty(1024, dtype=dtype)
        self.size = 0

    def extend(self, values: npt.NDArray[Any]) -> None:
        end = self.size + len(values)
        if end > len(self.data):
            grown = np.empty(max(2 * len(self.data), end), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : end] = values
        self.size = end


class HashingEmbedder:
    """The built-in :class:`~stargraph_mem.embedding.Embedder`: deterministic hashed word,
    stem, character n-gram and word-pair features (see the module's description), fast, no
    download. Texts that share words or word stems score high; synonyms without shared
    letters do not (a real model, ``minilm``, does that).

    An instance may be shared by threads (one embeds at a time). Each instance remembers
    the hashed features of up to :data:`CACHED_WORDS` words and word pairs, and the
    vectors of up to :data:`CACHED_TEXTS` texts by their folded words (so
    ``"Tea, please!"`` reuses the vector of ``"tea please"``: a vector depends on those
    words alone; a batch of more than a quarter of that many is not kept), each cache then
    starting afresh: caches only, no vector depends on them."""

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
        self._lock = threading.Lock()
        """One embed at a time: the caches are shared by the threads that embed (a pass's
        worker thread beside a recall on the event loop, say)."""
        self._forget()

    def _forget(self) -> None:
        """Start the cache afresh: a slot per known word (``str``) or pair (``tuple``), and
        the features of slot ``i`` at ``[starts[i], ends[i])`` of the feature arrays."""
        self._slots: dict[str | tuple[str, str], int] = {}
        self._texts: dict[tuple[str, ...], npt.NDArray[np.float32]] = {}
        """A text's vector (a read-only row) by its folded words."""
        self._scaled: dict[tuple[int, int], _Features] = {}
        """A slot's features scaled for one term frequency, made when one text uses it."""
        self._buckets = _Grown(np.int64)
        self._weights = _Grown(np.float64)
        self._starts = _Grown(np.int64)
        self._ends = _Grown(np.int64)

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
        tokenised: list[tuple[str, ...]] = []
        find = _WORD.findall
        for row, text in enumerate(texts):
            if type(text) is not str and not isinstance(text, str):
                raise EmbedderError(
                    f"texts[{row}] is a {type(text).__name__}, not a str", index=row
                )
            if text.isascii():
                text = text.casefold()
                parts = text.split()  # letters and digits between spaces: the words
                tokenised.append(tuple(parts if "".join(parts).isalnum() else find(text)))
            else:
                tokenised.append(tuple(find(fold(text))))
        with self._lock:
            return self._embed(tokenised)

    def _embed(self, tokenised: list[tuple[str, ...]]) -> npt.NDArray[np.float32]:
        """The rows of texts of these folded words (the lock held)."""
        known = self._texts
        if len(tokenised) == 1:  # one text (a streaming record's): no batch to assemble
            found = known.get(tokenised[0])
            if found is None:
                found = self._remember(tokenised)[0]
            return found[None, :].copy()
        missing = list(dict.fromkeys(t for t in tokenised if t not in known))
        if missing and len(missing) == len(tokenised):  # all new and distinct: in order
            made = self._remember(missing)
            return made.copy() if not made.flags.writeable else made
        rows = self._remember(missing) if missing else ()
        fresh = dict(zip(missing, rows, strict=True))
        out = np.empty((len(tokenised), self._dimension), dtype=np.float32)
        for row, tokens in enumerate(tokenised):
            found = fresh.get(tokens)
            out[row] = known[tokens] if found is None else found
        return out

    def _remember(self, tokenised: list[tuple[str, ...]]) -> npt.NDArray[np.float32]:
        """The vectors of texts of these folded words (none of them remembered), now
        remembered: read-only rows (a bulk batch's, not remembered, stay writable)."""
        keys: list[Counter[str | tuple[str, str]]] = []
        for tokens in tokenised:  # the words, then the pairs of content words, in order
            content = [t for t in tokens if t not in STOPWORDS]
            keys.append(Counter([*tokens, *itertools.pairwise(content)]))
        self._learn(keys)
        if len(keys) <= _ONE_BY_ONE:
            matrix = np.concatenate([self._sum_one(counts) for counts in keys])
        else:
            matrix = self._sum(keys)
        if len(keys) > CACHED_TEXTS // 4:
            return matrix  # a bulk batch (a backfill's) is not kept: it would push out the rest
        known = self._texts
        if len(known) + len(keys) > CACHED_TEXTS:
            known = self._texts = {}  # a new dict: a caller may still read the old one
        matrix.flags.writeable = False  # and so each row of it
        known.update(zip(tokenised, matrix, strict=True))
        return matrix

    def _learn(self, keys: list[Counter[str | tuple[str, str]]]) -> None:
        """Hash the features of the words and pairs not met before, in one go."""
        slots = self._slots
        new = list({key: None for counts in keys for key in counts if key not in slots})
        if not new:
            return
        if len(slots) + len(new) > CACHED_WORDS:
            self._forget()  # start afresh, with every word and pair of this batch
            slots = self._slots
            new = list({key: None for counts in keys for key in counts})
        paired = {word for key in new if type(key) is tuple for word in key}
        stems = {word: stem(word) for word in paired}  # a word is in many pairs
        groups = [
            word_features(key)
            if isinstance(key, str)
            else [(f"p\x1f{stems[key[0]]} {stems[key[1]]}", _PAIR_WEIGHT)]
            for key in new
        ]
        buckets, weights = _place(groups, self._dimension)
        ends = np.cumsum([len(group) for group in groups], dtype=np.int64) + self._buckets.size
        self._starts.extend(np.concatenate(([self._buckets.size], ends[:-1])))
        self._ends.extend(ends)
        self._buckets.extend(buckets)
        self._weights.extend(weights)
        first = len(slots)
        slots.update((key, first + i) for i, key in enumerate(new))

    def _features(self, slot: int, tf: int) -> _Features:
        """Slot ``slot``'s buckets and weights, the weights scaled for a term frequency of
        ``tf`` as :meth:`_sum` scales them (made once per slot and frequency)."""
        found = self._scaled.get((slot, tf))
        if found is None:
            start, end = int(self._starts.data[slot]), int(self._ends.data[slot])
            weights = self._weights.data[start:end].copy()
            if tf != 1:
                weights *= 1.0 + math.log(tf)
            found = self._scaled[(slot, tf)] = (self._buckets.data[start:end].copy(), weights)
        return found

    def _sum_one(self, counts: Counter[str | tuple[str, str]]) -> npt.NDArray[np.float32]:
        """:meth:`_sum` of one text from its slots' features kept scaled per term frequency:
        the same weights in the same order into ``np.bincount``, then the same
        normalisation, so the same bits (the batch's index arithmetic costs more than the
        sum itself for one short text)."""
        dimension = self._dimension
        if not counts:
            return np.zeros((1, dimension), dtype=np.float32)
        slots = self._slots
        parts = [self._features(slots[key], tf) for key, tf in counts.items()]
        dense = np.bincount(
            np.concatenate([buckets for buckets, _ in parts]),
            weights=np.concatenate([weights for _, weights in parts]),
            minlength=dimension,
        )
        matrix = dense.reshape(1, dimension)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix.astype(np.float32)

    def _sum(self, keys: list[Counter[str | tuple[str, str]]]) -> npt.NDArray[np.float32]:
        """Each text's features, scaled by their sublinear TF, summed and normalised."""
        chain = itertools.chain.from_iterable
        sizes = [len(counts) for counts in keys]
        total = sum(sizes)
        rows, dimension = len(keys), self._dimension
        if not total:
            return np.zeros((rows, dimension), dtype=np.float32)
        picked = np.fromiter(map(self._slots.__getitem__, chain(keys)), np.int64, total)
        tfs = np.fromiter(chain(counts.values() for counts in keys), np.int64, total)
        repeated = bool((tfs != 1).any())
        starts = self._starts.data[picked]
        lengths = self._ends.data[picked] - starts
        # the feature positions of every chosen slot, in order
        firsts = np.cumsum(lengths) - lengths
        positions = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
            starts - firsts, lengths
        )
        flat = self._buckets.data[positions]
        if rows > 1:
            row_of_slot = np.repeat(np.arange(rows, dtype=np.int64) * dimension, sizes)
            flat += np.repeat(row_of_slot, lengths)
        weights = self._weights.data[positions]
        if repeated:
            weights *= np.repeat(_tf_scales(int(tfs.max()))[tfs], lengths)
        dense = np.bincount(flat, weights=weights, minlength=rows * dimension)
        matrix = dense.reshape(rows, dimension)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix.astype(np.float32)
