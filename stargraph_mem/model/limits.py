"""Size limits every door checks, the same on both backends, so that what one backend
accepts the other accepts too.

Configurable (:class:`Limits`, passed to the stores, ``open_database`` and the
``Consolidator``): an episode's content, its metadata JSON, and a fact as rendered by a
rule (subject, predicate, object and payload JSON). Fixed, because a backend's indexes
set them: :data:`KEY_BYTES` (PostgreSQL's B-tree row size) and
:data:`SEARCH_TEXT_CHARS` (PostgreSQL's ``tsvector`` size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_CONTENT_BYTES",
    "DEFAULT_FACT_BYTES",
    "DEFAULT_LIMITS",
    "DEFAULT_METADATA_BYTES",
    "KEY_BYTES",
    "LIMIT_MAX",
    "SCOPE_PART_CHARS",
    "SEARCH_HITS_MAX",
    "SEARCH_TEXT_CHARS",
    "TEMPLATE_CHARS_MAX",
    "Limits",
    "fact_size_problem",
    "over",
    "utf8_size",
]

DEFAULT_CONTENT_BYTES: Final = 1 << 20
"""An episode's content: 1 MiB of UTF-8 (a long document; a pass holds up to 50,000)."""
DEFAULT_METADATA_BYTES: Final = 256 << 10
"""An episode's metadata as JSON: 256 KiB (structured fields, not documents)."""
DEFAULT_FACT_BYTES: Final = 64 << 10
"""A fact as rendered by a rule: 64 KiB (subject, predicate, object and payload JSON)."""
KEY_BYTES: Final = 2_600
"""The most UTF-8 bytes of an indexed key: an episode's scope key, or a fact's partition
key, subject and predicate together. PostgreSQL's B-tree rows hold at most 2,704 bytes
(a third of a page); the rest is the row's header and the other columns."""
SCOPE_PART_CHARS: Final = 256
"""The most characters of a user or agent name in a fact pattern (``FactPattern``)."""
SEARCH_HITS_MAX: Final = 1000
"""The most hits one search returns (``limit``), on both backends."""
SEARCH_TEXT_CHARS: Final = 32_768
"""The characters of a fact's text (subject, predicate, object, payload JSON) its search
index holds, on both backends. PostgreSQL's ``tsvector`` holds at most 1 MiB; the most
hostile 32,768 characters measured (three-letter CJK compounds) make 306 KB of it."""

LIMIT_MAX: Final = 64 << 20
"""The largest content or metadata limit a :class:`Limits` accepts (64 MiB)."""
TEMPLATE_CHARS_MAX: Final = 16 << 20
"""The longest text (characters) CLIPS builds for a rendered template with many variable
references; it is also the largest ``fact_bytes`` a :class:`Limits` accepts, so that any
delta the limit lets through was built whole in CLIPS as well."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Configurable size limits, in UTF-8 bytes (see the module)."""

    content_bytes: int = DEFAULT_CONTENT_BYTES
    metadata_bytes: int = DEFAULT_METADATA_BYTES
    fact_bytes: int = DEFAULT_FACT_BYTES

    def __post_init__(self) -> None:
        for name, most in (
            ("content_bytes", LIMIT_MAX),
            ("metadata_bytes", LIMIT_MAX),
            ("fact_bytes", TEMPLATE_CHARS_MAX),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ValueError(
                    f"limit {name} must be an integer from 1 to {most:,} (got {value!r})"
                )


DEFAULT_LIMITS: Final = Limits()


def utf8_size(text: str) -> int:
    """The UTF-8 size of ``text`` in bytes (a lone surrogate counts as 3)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def over(text: str, limit: int) -> int | None:
    """``text``'s UTF-8 size when it exceeds ``limit`` bytes, else ``None`` (short texts
    are not encoded)."""
    if len(text) * 4 <= limit:
        return None
    size = utf8_size(text)
    return size if size > limit else None


def fact_size_problem(
    sizes: Mapping[str, int], most: int, key_room: int, *, whole: str, key: str
) -> str | None:
    """Why a fact of texts of these UTF-8 ``sizes`` (by part: ``subject``, ``predicate``,
    ``object``, and any others it renders) cannot be written, or ``None``: together over
    ``most`` bytes (``fact_bytes``), or subject and predicate over ``key_room`` (what an
    indexed key leaves beside the partition key: ``KEY_BYTES`` less its size). ``whole``
    and ``key`` name the texts measured in each case ("its rendered text", "its subject
    and predicate")."""
    total = sum(sizes.values())
    if total > most:
        biggest = max(sizes, key=lambda what: sizes[what])
        return (
            f"{whole} would be {total:,} bytes (UTF-8; {biggest} {sizes[biggest]:,}), over "
            f"the limit of {most:,} (fact_bytes)"
        )
    both = sizes["subject"] + sizes["predicate"]
    if both > key_room:
        return (
            f"{key} would be {both:,} bytes (UTF-8), over the {key_room:,} an indexed key "
            f"leaves beside the partition key (KEY_BYTES {KEY_BYTES:,})"
        )
    return None
