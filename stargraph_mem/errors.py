"""Exceptions: one root, one subclass per pipeline stage, structured context fields.

Every error raised on purpose by stargraph_mem derives from :class:`StargraphMemError`.
Causes are chained with ``raise ... from exc`` so the original failure stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class StargraphMemError(Exception):
    """Root of every error stargraph_mem raises on purpose."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context: dict[str, Any] = context

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle the state, not the constructor call: subclasses take other arguments
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(
    cls: type[StargraphMemError], args: tuple[Any, ...], state: dict[str, Any]
) -> StargraphMemError:
    """Unpickle an error (e.g. one raised in a consolidation worker process)."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# --- IR / compiler -------------------------------------------------------------------


@dataclass(frozen=True)
class IRIssue:
    """One problem found in a rule pack, with its source position and IR path."""

    message: str
    file: str = "<string>"
    line: int | None = None
    col: int | None = None
    path: str = ""
    rule_id: str | None = None
    severity: str = "error"

    def format(self) -> str:
        """Render as ``file:line:col: path: message`` (position parts omitted when unknown)."""
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.col is not None:
                where += f":{self.col}"
        prefix = f"{where}: "
        if self.path:
            prefix += f"{self.path}: "
        return prefix + self.message


class IRError(StargraphMemError):
    """A rule pack is malformed: YAML syntax, schema, or a semantic check failed."""

    def __init__(self, issue: IRIssue, issues: list[IRIssue] | None = None) -> None:
        super().__init__(
            issue.format(),
            file=issue.file,
            line=issue.line,
            col=issue.col,
            path=issue.path,
            rule_id=issue.rule_id,
        )
        self.issue = issue
        self.issues: list[IRIssue] = issues if issues is not None else [issue]

    @property
    def file(self) -> str:
        return self.issue.file

    @property
    def line(self) -> int | None:
        return self.issue.line

    @property
    def col(self) -> int | None:
        return self.issue.col

    @property
    def path(self) -> str:
        return self.issue.path

    @property
    def rule_id(self) -> str | None:
        return self.issue.rule_id


class CompileError(StargraphMemError):
    """The compiler or CLIPS rejected generated code (names the rule and its YAML position)."""


class ScaffoldError(StargraphMemError):
    """``new`` refused to write a pack: a file exists already, or the name is not a name."""


# --- embedding --------------------------------------------------------------------


class EmbedderError(StargraphMemError, ValueError):
    """An embedder was asked for with an unusable spec or setting (``spec`` names it and
    the message lists the accepted forms), or ``embed`` was given something not a text."""


class EmbedderUnavailableError(EmbedderError):
    """An embedder's optional packages (the ``embeddings`` extra) or its model files are
    not installed here; nothing is ever downloaded to replace them."""


# --- engine -----------------------------------------------------------------------


class EngineError(StargraphMemError):
    """The CLIPS runtime failed while loading a pack or running a pass."""


class ConsolidationRuleError(StargraphMemError):
    """A consolidation rule (or its legacy ``when_filter``) is invalid or was refused."""


class MalformedRuleError(ConsolidationRuleError, ValueError):
    """A ``ConsolidationRule`` was built with a bad field (named in ``field``); a
    ``ValueError`` too, like the pydantic error it replaces."""


class RecallError(StargraphMemError, ValueError):
    """A recall was asked for with an unusable argument: a time bound (``after``,
    ``before``), a budget, RRF weights or ``k``; ``parameter`` names it and ``value`` holds
    what was given. A ``ValueError`` too: the argument, not the store, is at fault."""


class ScheduleError(StargraphMemError):
    """A cadence could not be evaluated, or a scheduler lease could not be taken."""


class PassConflictError(ScheduleError):
    """Another scheduler applied this (rule, partition) pass first; this one rolled back."""


# --- stores -----------------------------------------------------------------------


class StoreError(StargraphMemError):
    """A store operation failed for a reason that is not the caller's SQLite error."""


class DatabaseUnavailableError(StoreError):
    """The database server dropped a connection or refused a new one (a restart, a
    failover, a network cut), as opposed to refusing a statement.

    The transaction in progress is rolled back by the server, or, when the connection broke
    during its commit, may have committed: a run redoes its work from a fresh read, and the
    checked apply keeps a pass from being applied twice. ``where`` names the database and
    ``reason`` the driver's first line."""


class ForeignDatabaseError(StoreError):
    """A database file is not one of stargraph_mem's: it was left exactly as it was."""


class NewerSchemaError(StoreError):
    """A database was written by a newer stargraph_mem: refused before anything is written."""


class DamagedDatabaseError(StoreError):
    """Tables of stargraph_mem's are missing from an existing database; they are named,
    never recreated empty."""


class MemoryScopeError(StoreError):
    """A scope is empty/invalid, or disagrees with the episode's own user/session/agent."""


class DuplicateEpisodeError(StoreError):
    """An episode id already exists with different content."""


class FactConflictError(StoreError):
    """A delta's ``replaces`` cannot be resolved deterministically (ids in ``fact_ids``)."""


class FactNotFoundError(StoreError):
    """No fact has the requested id (the id is in ``fact_id``), or no fact could: a lone
    surrogate, NUL or a value that is not a string is refused before any query."""


class FactStatusError(StoreError):
    """A pin, unpin or restore was refused: the fact is closed (or, for a restore, not an
    archived fact that was never restored), or its reason cannot be stored as text;
    ``fact_id`` and ``status`` name it."""


class DeltaValidationError(StoreError):
    """A delta failed validation at ``apply_delta`` entry."""


class DeltaProvenanceError(DeltaValidationError, ConsolidationRuleError, ValueError):
    """A delta lacks its provenance (``rule_id``, ``source_episode_ids``, ``promotion_ts``,
    ``confidence``; ``replaces`` on update and delete). Raised by
    ``stores._delta._validate_delta_provenance`` with stargraph 0.8's fields (``rule_id``,
    ``delta_type``, ``violation``) and ours (``field``); it is a ``DeltaValidationError``,
    a ``ConsolidationRuleError`` (what 0.8 raises) and a ``ValueError`` (what 0.8
    documents)."""


class SearchError(StoreError):
    """A fact search was asked for with an unusable query or limit."""


class EntityError(StoreError):
    """An entity was defined or looked up with unusable input (a bad name, alias, type,
    limit or time), or one of its aliases belongs to another entity of the partition."""


class EntityNotFoundError(EntityError):
    """No entity (declared, or named by a current fact) has the name asked for."""


class MigrationNotSupported(StoreError):
    """A migration operation other than a nullable ``add_column`` was requested.

    Names the store, the plan and, when one operation is at fault, its index and kind:
    ``memory store: migration 'm2': operations[0] (drop_column): … is not supported``.
    The context carries stargraph 0.8's fields (``store``; ``operation``, the operation's
    kind such as ``drop_column``; ``reason``, e.g. ``v1-add-column-only`` or
    ``non-nullable-add``) and ours (``plan``, ``index``, ``op``, ``position``,
    ``detail``).
    """

    def __init__(
        self,
        detail: str,
        *,
        store: str,
        plan: str | None = None,
        index: int | None = None,
        op: str | None = None,
        reason: str | None = None,
    ) -> None:
        where = f"{store} store: migration"
        if plan is not None:
            where += f" {plan!r}"
        position = None if index is None else f"operations[{index}]"
        if position is not None:
            where += f": {position} ({op})"
        super().__init__(
            f"{where}: {detail}",
            store=store,
            plan=plan,
            operation=op,
            position=position,
            index=index,
            op=op,
            reason=reason,
            detail=detail,
        )


class StalePassError(StoreError):
    """What a pass read (its watermarks, its partition's facts) changed before the pass
    could be applied: nothing of it was applied, and the engine computes it again."""


class CorruptRowError(StoreError):
    """A stored row could not be decoded (names the table and row id)."""


class StoreConfigError(StoreError):
    """A ``stores:`` mapping names an unknown store or a location that cannot be opened
    (``key`` and ``value`` in the context)."""


class LimitError(StoreError):
    """A value is larger than a size limit allows: an episode's content, metadata or scope
    key at a store's door (``episode_id``, ``limit``, ``size``, ``maximum`` in the
    context, and the line under ``ingest``)."""


def describe(exc: Exception) -> str:
    """One line for a known error, as commands and ingest reports show it: a pydantic
    validation error as ``field: message; …``, any other as its message on one line."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        text = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or exc.title}: {error['msg']}"
            for error in exc.errors()
        )
    else:
        text = str(exc)
    return " ".join(text.splitlines())
