"""Content normal form: the text exact deduplication compares (specification 002's
"normalised content": lowercase, punctuation stripped, whitespace collapsed), accents
removed as well."""

from __future__ import annotations

import unicodedata

from stargraph_mem.model.entities import fold_entity_name


def content_normal_form(text: str) -> str:
    """``text`` case folded, compatibility-decomposed without accents, its punctuation
    (Unicode category ``P*``) removed and its whitespace collapsed to single spaces:
    ``"  Tea, please!"`` and ``"tea PLEASE"`` both read ``"tea please"``."""
    folded = fold_entity_name(text)
    kept = "".join(ch for ch in folded if not unicodedata.category(ch).startswith("P"))
    return " ".join(kept.split())
