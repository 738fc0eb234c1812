"""Models of the store contracts (consolidation rule, health, migrations), and the shared
vocabulary under the names the stores have always exported.

The vocabulary itself lives in :mod:`stargraph_mem.model`; it is re-exported here so
``from stargraph_mem.stores.models import Episode`` keeps working.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, JsonValue, ValidationError, model_validator

from stargraph_mem.errors import MalformedRuleError
from stargraph_mem.model.base import (
    ID_PATTERN,
    FrozenModel,
    Identifier,
    ScopePart,
    StoredDatetime,
    check_storable,
    unicode_problem,
)
from stargraph_mem.model.cadence import SLEEP_CYCLE, Cadence
from stargraph_mem.model.canonical import canonical_json
from stargraph_mem.model.deltas import (
    DELTA_ADAPTER,
    DELTA_KINDS,
    DELTA_LIST_ADAPTER,
    AddDelta,
    BindingScalar,
    BindingValue,
    DeleteDelta,
    DeltaKind,
    FactPayload,
    MemoryDelta,
    NoopDelta,
    UpdateDelta,
    delta_id_of,
)
from stargraph_mem.model.episodes import (
    HONOURED_METADATA_KEYS,
    Episode,
    Intent,
    check_honoured_metadata,
)
from stargraph_mem.model.facts import Fact, FactPattern
from stargraph_mem.model.time import (
    MAX_US,
    MIN_US,
    TIME_RANGE,
    UTC_MAX,
    UTC_MIN,
    TimestampRangeError,
    check_time_range,
    time_range_error,
    to_utc,
    utc_now,
)
from stargraph_mem.stores.mounts import filesystem_of


def _rule_error(exc: ValidationError) -> MalformedRuleError:
    """The first problem pydantic found in a rule, as a :class:`ConsolidationRuleError`
    naming the field (``ConsolidationRule.cadence: …``); every problem is in ``errors``."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    raised = first.get("ctx", {}).get("error")
    if isinstance(raised, MalformedRuleError):  # model_validate runs __init__, which raised
        return raised
    field = ".".join(str(part) for part in first["loc"]) or "(rule)"
    detail = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return MalformedRuleError(
        f"malformed ConsolidationRule: {field}: {detail}{more}",
        field=field,
        violation=detail,
        errors=errors,
    )


class ConsolidationRule(FrozenModel):
    """The specification's rule contract: id, cadence, legacy SQL filter, emitted channels.

    ``then_emits`` holds the fact-channel names the rule promotes into, as specified; a
    name that is a delta kind (``add``, ``update``, ``delete``, ``noop``) is our extension
    and restricts the kinds the rule emits. Channels are accepted and reported
    (:attr:`channels`): all facts live in one table, so a channel selects no storage.

    A malformed rule raises :class:`~stargraph_mem.errors.MalformedRuleError` (a
    ``ConsolidationRuleError`` and a ``ValueError``) naming the field, whether built by
    keywords or by ``model_validate``.
    ``cadence`` reads like stargraph 0.8's dict too (``rule.cadence["every"]``).
    """

    id: Identifier
    cadence: Cadence = SLEEP_CYCLE
    when_filter: str | None = None
    then_emits: tuple[Identifier, ...] = DELTA_KINDS

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _rule_error(exc) from exc

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        **kwargs: Any,
    ) -> Self:
        try:
            return super().model_validate(
                obj, strict=strict, from_attributes=from_attributes, context=context, **kwargs
            )
        except ValidationError as exc:
            raise _rule_error(exc) from exc

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        context: Any | None = None,
        **kwargs: Any,
    ) -> Self:
        try:
            return super().model_validate_json(json_data, strict=strict, context=context, **kwargs)
        except ValidationError as exc:
            raise _rule_error(exc) from exc

    @property
    def kinds(self) -> tuple[DeltaKind, ...]:
        """The delta kinds named in ``then_emits``; every kind when it names none."""
        named = tuple(kind for kind in DELTA_KINDS if kind in self.then_emits)
        return named or DELTA_KINDS

    @property
    def channels(self) -> tuple[str, ...]:
        """The fact-channel names in ``then_emits`` (every name that is not a delta kind)."""
        return tuple(name for name in self.then_emits if name not in DELTA_KINDS)


class StoreHealth(FrozenModel):
    """Real figures read from the database; ``ok=False`` with ``reason`` on failure."""

    ok: bool
    reason: str | None = None
    path: str
    schema_version: int | None = None
    journal_mode: str | None = None
    quick_check: str | None = None
    file_size: int | None = None
    episode_count: int | None = None
    fact_count: int | None = None
    fragment_count: int | None = None
    """The specification's name for the episode count (same figure as ``episode_count``)."""
    warnings: tuple[str, ...] = ()
    """Problems that do not make the store unusable (e.g. WAL on a network filesystem)."""

    # stargraph 0.8's StoreHealth fields, read from ours

    @property
    def version(self) -> int:
        """stargraph 0.8's name for :attr:`schema_version` (0 when unknown)."""
        return self.schema_version or 0

    @property
    def fs_type(self) -> str:
        """The filesystem holding a SQLite file (``ext4``, ``nfs4``, …); ``unknown`` when
        the mount table cannot tell, or for a server database."""
        if "://" in self.path:
            return "unknown"
        return filesystem_of(Path(self.path)) or "unknown"

    @property
    def lock_state(self) -> Literal["free", "held"]:
        """Always ``free``: writers take the database's own lock per transaction, and no
        lock outlives one."""
        return "free"

    @property
    def node_count(self) -> int | None:
        """Not a graph store: ``None``, as stargraph 0.8's memory and fact stores report."""
        return None

    @property
    def embedding_hash(self) -> str | None:
        """``None``, as stargraph 0.8's memory and fact stores report."""
        return None


class MigrationOp(FrozenModel):
    """One schema change. Only nullable ``add_column`` is supported.

    ``options`` keeps the keys of a stargraph 0.8 operation dict that are none of ours
    (``{"op": "rename_column", "from": …, "to": …}``); an ``add_column`` with any is
    refused by ``migrate``.
    """

    op: str
    table: str
    column: str
    type: str = "TEXT"
    nullable: bool = True
    options: dict[str, JsonValue] = Field(default_factory=dict, exclude_if=lambda v: not v)


_OP_FIELDS: frozenset[str] = frozenset(("op", "table", "column", "type", "nullable"))


def _op_from_08(raw: Any) -> Any:
    """A stargraph 0.8 operation dict as our fields: ``nullable`` defaults to False there
    (a non-nullable add is refused), ``name`` may name the column, other keys are kept in
    ``options``; anything but a dict is left for validation to refuse."""
    if not isinstance(raw, Mapping):
        return raw
    known = {key: value for key, value in raw.items() if key in _OP_FIELDS}
    other = {str(key): value for key, value in raw.items() if key not in _OP_FIELDS}
    if "column" not in known and isinstance(other.get("name"), str):
        known["column"] = other.pop("name")
    return {
        "table": "",
        "column": "",
        "nullable": False,
        **known,
        "options": other,
    }


class MigrationPlan(FrozenModel):
    """An ordered list of schema operations applied in one transaction.

    Ours: ``MigrationPlan(name="m1", operations=[MigrationOp(...)])``. stargraph 0.8's form
    is accepted too: ``MigrationPlan(target_version=2, operations=[{"op": "add_column",
    "table": "episodes", "column": "mood", "nullable": True}])`` (operations as dicts, the
    name ``target_version_2``, an empty list allowed). Either way ``migrate`` applies
    nullable ``add_column`` only and refuses type narrowing, renames, drops and
    non-nullable adds with :class:`~stargraph_mem.errors.MigrationNotSupported`.
    """

    name: str = ""
    operations: list[MigrationOp]
    target_version: int | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="before")
    @classmethod
    def _from_08(cls, data: Any) -> Any:
        """stargraph 0.8's ``target_version`` form, in our fields."""
        if not isinstance(data, Mapping) or "target_version" not in data or "name" in data:
            return data
        version = data["target_version"]
        operations = data.get("operations")
        if isinstance(operations, list):
            operations = [_op_from_08(op) for op in operations]
        return {**data, "name": f"target_version_{version}", "operations": operations}

    @model_validator(mode="after")
    def _named_with_operations(self) -> Self:
        if self.target_version is None:
            if not self.name:
                raise ValueError("name: a plan needs a name (or stargraph 0.8's target_version)")
            if not self.operations:
                raise ValueError("operations: a plan needs at least one operation")
        return self


__all__ = [
    "DELTA_ADAPTER",
    "DELTA_KINDS",
    "DELTA_LIST_ADAPTER",
    "HONOURED_METADATA_KEYS",
    "ID_PATTERN",
    "MAX_US",
    "MIN_US",
    "SLEEP_CYCLE",
    "TIME_RANGE",
    "UTC_MAX",
    "UTC_MIN",
    "AddDelta",
    "BindingScalar",
    "BindingValue",
    "Cadence",
    "ConsolidationRule",
    "DeleteDelta",
    "DeltaKind",
    "Episode",
    "Fact",
    "FactPattern",
    "FactPayload",
    "Identifier",
    "Intent",
    "MemoryDelta",
    "MigrationOp",
    "MigrationPlan",
    "NoopDelta",
    "ScopePart",
    "StoreHealth",
    "StoredDatetime",
    "TimestampRangeError",
    "UpdateDelta",
    "canonical_json",
    "check_honoured_metadata",
    "check_storable",
    "check_time_range",
    "delta_id_of",
    "time_range_error",
    "to_utc",
    "unicode_problem",
    "utc_now",
]
