"""The names of fact statuses, without pydantic (the command line checks ``--status``
against them before it loads any model); :mod:`~stargraph_mem.model.lifecycle` says
what each one means and which changes are allowed."""

from __future__ import annotations

__all__ = ["CLOSE_STATUSES", "FACT_STATUSES", "FLAG_STATUSES", "SUCCEEDED_STATUSES"]

CLOSE_STATUSES: tuple[str, ...] = (
    "deleted",
    "expired",
    "archived",
    "invalidated",
    "merged",
    "superseded",
    "challenged",
)
"""What a delete's ``status`` may be (:data:`~stargraph_mem.model.deltas.CloseStatus`)."""
FLAG_STATUSES: tuple[str, ...] = ("challenged",)
"""Statuses of a fact that stays current, flagged: readable by ``get``/``query``, left out
of search and recall unless asked for."""
SUCCEEDED_STATUSES: tuple[str, ...] = ("merged", "superseded")
"""Closing statuses that name the fact that took the closed one's place (its
``superseded_by``): the fact it was merged into, or its successor."""
FACT_STATUSES: tuple[str, ...] = ("current", "challenged", "superseded", *CLOSE_STATUSES[:5])
"""Every status a fact can have: ``current`` (the specification's ``active``) or
``challenged`` while valid, else why it was closed."""
