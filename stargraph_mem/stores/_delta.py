"""The provenance check on deltas, under the names stargraph 0.8 gives it.

:func:`_validate_delta_provenance` is what the specification says runs "on every emitted
delta": the mandatory provenance (``rule_id``, ``source_episode_ids``, ``promotion_ts``,
``confidence``, and a non-empty ``replaces`` on update and delete), then the whole delta
through the same validation ``apply_delta`` runs at entry. It takes validated delta
models, models built with ``model_construct`` (which skip pydantic) and plain dicts.
:func:`_resolve_replaces` returns the facts a ``replaces`` list names that exist.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from stargraph_mem.errors import DeltaProvenanceError, FactNotFoundError
from stargraph_mem.model.deltas import DELTA_ADAPTER, DELTA_KINDS, kind_takes
from stargraph_mem.model.facts import Fact
from stargraph_mem.stores.fact import DeltaInput, FactStore

__all__ = ["_resolve_replaces", "_validate_delta_provenance"]

_KINDS_WITH_REPLACES = tuple(kind for kind in DELTA_KINDS if kind_takes(kind, "replaces"))


def _field(delta: object, name: str) -> Any:
    """A delta's field, from a model or a dict (``None`` when absent)."""
    if isinstance(delta, Mapping):
        return delta.get(name)
    return getattr(delta, name, None)


def _refuse(delta: object, field: str, violation: str) -> DeltaProvenanceError:
    rule_id = _field(delta, "rule_id")
    kind = _field(delta, "kind")
    return DeltaProvenanceError(
        f"MemoryDelta.{violation}",
        field=field,
        violation=violation,
        rule_id=rule_id if isinstance(rule_id, str) else None,
        delta_type=kind if isinstance(kind, str) else None,
    )


def _provenance_problem(delta: object) -> tuple[str, str] | None:
    """``(field, violation)`` of the first missing or unusable provenance field."""
    rule_id = _field(delta, "rule_id")
    if not isinstance(rule_id, str) or not rule_id:
        return "rule_id", "rule_id must be non-empty"
    sources = _field(delta, "source_episode_ids")
    if not isinstance(sources, Sequence) or isinstance(sources, str) or not sources:
        return "source_episode_ids", "source_episode_ids must be non-empty"
    stamp = _field(delta, "promotion_ts")
    if not isinstance(stamp, datetime | str) or not stamp:
        return "promotion_ts", "promotion_ts must be set"
    confidence = _field(delta, "confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        return "confidence", "confidence must be a number"
    if not math.isfinite(confidence):
        return "confidence", "confidence must be finite"
    if _field(delta, "kind") in _KINDS_WITH_REPLACES and not _field(delta, "replaces"):
        return "replaces", "replaces must be non-empty for update/delete"
    return None


def _validate_delta_provenance(delta: DeltaInput) -> None:
    """Refuse a delta without its provenance, or one ``apply_delta`` would refuse.

    Raises :class:`~stargraph_mem.errors.DeltaProvenanceError` whose message reads
    ``MemoryDelta.<violation>`` (``MemoryDelta.source_episode_ids must be non-empty``) and
    whose context holds ``rule_id``, ``delta_type``, ``violation`` and ``field``.
    """
    problem = _provenance_problem(delta)
    if problem is not None:
        raise _refuse(delta, *problem)
    try:
        body = delta if isinstance(delta, Mapping) else delta.model_dump()
        DELTA_ADAPTER.validate_python(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        parts = [str(part) for part in first["loc"]]
        field = ".".join(parts[1:] if len(parts) > 1 else parts) or "kind"
        detail = str(first["msg"]).removeprefix("Value error, ")
        raise _refuse(delta, field, f"{field}: {detail}") from exc


async def _resolve_replaces(fact_store: FactStore, replaces: Sequence[str]) -> list[Fact]:
    """The stored facts (current or closed) named in ``replaces``, in order, each once;
    ids no fact has are left out."""
    found: list[Fact] = []
    for fact_id in dict.fromkeys(replaces):
        try:
            found.append(await fact_store.get(fact_id))
        except FactNotFoundError:
            continue
    return found
