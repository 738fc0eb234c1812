"""The SQL that picks facts by a pattern: filters, status and the ``query``/``as_of``
statement, for every backend.

Kept apart from :mod:`~stargraph_mem.stores.repositories.fact_rows` (which builds the
validated models) so a reader that formats rows itself, such as the command line's
listing of facts (:mod:`~stargraph_mem.stores.sqlite.listing`), selects exactly what the
repository's ``query`` selects without loading pydantic. Anything with the attributes of
:class:`FactFilter` is a pattern: :class:`~stargraph_mem.model.facts.FactPattern` is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final, Protocol

from stargraph_mem.stores.scope import (
    escape_component,
    partition_key,
    prefix_upper_bound,
    user_prefix,
)

__all__ = ["FACT_COLUMNS", "FACT_COLUMN_COUNT", "FactFilter", "fact_select", "pattern_filter"]

FACT_COLUMNS: Final = (
    'id, "user", agent, subject, predicate, object, payload, confidence, valid_from_us, '
    "valid_until_us, superseded_by, recorded_at_us, rule_id, delta_id, status, layer, "
    "memory_type, trust"
)
"""The columns ``fact_from_row`` reads (``user`` quoted: a keyword in PostgreSQL)."""
FACT_COLUMN_COUNT: Final = 18
"""How many columns ``fact_from_row`` reads (:data:`FACT_COLUMNS`): a statement's next
column is at this index."""
assert len(FACT_COLUMNS.split(",")) == FACT_COLUMN_COUNT


class FactFilter(Protocol):
    """What a fact pattern says (see :class:`~stargraph_mem.model.facts.FactPattern`):
    ``None`` matches anything."""

    @property
    def user(self) -> str | None: ...
    @property
    def agent(self) -> str | None: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def predicate(self) -> str | None: ...
    @property
    def object(self) -> str | None: ...
    @property
    def min_confidence(self) -> float | None: ...
    @property
    def include_history(self) -> bool: ...
    @property
    def limit(self) -> int | None: ...
    @property
    def status(self) -> str | None: ...
    @property
    def layer(self) -> str | None: ...
    @property
    def memory_type(self) -> str | Sequence[str] | None: ...


@lru_cache(maxsize=8192)
def key_of(user: str, agent: str) -> str:
    """The partition key of ``(user, agent)`` (cached: batches repeat a few partitions)."""
    return partition_key(user, agent)


def pattern_filter(pattern: FactFilter, mark: str = "?") -> tuple[list[str], list[Any]]:
    """SQL conditions and parameters for a pattern (history aside); ``mark`` is the
    backend's parameter placeholder."""
    where: list[str] = []
    params: list[Any] = []
    if pattern.user is not None and pattern.agent is not None:
        where.append(f"partition_key = {mark}")
        params.append(key_of(pattern.user, pattern.agent))
    elif pattern.user is not None:
        prefix = user_prefix(pattern.user)
        where.append(f"partition_key >= {mark} AND partition_key < {mark}")
        params += [prefix, prefix_upper_bound(prefix)]
    elif pattern.agent is not None:
        escape_component(pattern.agent, "agent")  # a NUL is refused as in a scope key
        where.append(f"agent = {mark}")
        params.append(pattern.agent)
    for column, value in (
        ("subject", pattern.subject),
        ("predicate", pattern.predicate),
        ("object", pattern.object),
    ):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    if pattern.min_confidence is not None:
        where.append(f"confidence >= {mark}")
        params.append(pattern.min_confidence)
    if pattern.layer is not None:
        where.append(f"layer = {mark}")
        params.append(pattern.layer)
    if pattern.memory_type is not None:
        kinds = (
            [pattern.memory_type] if isinstance(pattern.memory_type, str) else pattern.memory_type
        )
        where.append(f"memory_type IN ({', '.join(mark for _ in kinds)})" if kinds else "1 = 0")
        params += kinds
    return where, params


def _status_filter(pattern: FactFilter, mark: str, params: list[Any]) -> list[str]:
    """The condition picking ``pattern``'s statuses (none for ``all``)."""
    status = pattern.status or ("all" if pattern.include_history else "current")
    if status == "all":
        return []
    if status == "current":
        return ["valid_until_us IS NULL"]
    if status == "active":  # current and not flagged
        return ["valid_until_us IS NULL", "status IS NULL"]
    params.append(status)
    return [f"status = {mark}"]


def fact_select(
    pattern: FactFilter,
    *,
    mark: str,
    columns: str,
    no_limit: Any,
    as_of_us: int | None = None,
) -> tuple[str, list[Any]]:
    """The SQL and parameters of ``query`` (or of ``as_of`` when ``as_of_us`` is given):
    ``mark`` the backend's placeholder, ``columns`` what to select, ``no_limit`` the
    parameter that means no limit."""
    where, params = pattern_filter(pattern, mark)
    if as_of_us is not None:
        where.append(
            f"valid_from_us <= {mark} AND (valid_until_us IS NULL OR valid_until_us > {mark})"
        )
        params += [as_of_us, as_of_us]
    else:
        where += _status_filter(pattern, mark, params)
    condition = " AND ".join(where) or "TRUE"
    params.append(no_limit if pattern.limit is None else pattern.limit)
    text = f"SELECT {columns} FROM facts WHERE {condition} ORDER BY valid_from_us, id LIMIT {mark}"
    return text, params
