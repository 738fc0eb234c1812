"""A tiny deterministic embedder for the vector tests and benchmarks: each word adds one
hashed unit to a bucket, plus a constant, normalised (texts sharing words are close)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from stargraph_mem.embedding import Matrix


class WordEmbedder:
    """Bag of hashed words; ``calls`` records each batch's size."""

    def __init__(self, name: str = "test-words", version: str = "1", dimension: int = 16):
        self._name, self._version, self._dimension = name, version, dimension
        self.calls: list[int] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return self._version

    @property
    def dimension(self) -> int:
        return self._dimension

    def vector(self, text: str) -> np.ndarray:
        row = np.zeros(self._dimension, dtype=np.float64)
        row[0] = 0.25
        for word in text.lower().split():
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            row[int.from_bytes(digest, "little") % self._dimension] += 1.0
        return (row / np.linalg.norm(row)).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(len(texts))
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        return np.stack([self.vector(text) for text in texts])
