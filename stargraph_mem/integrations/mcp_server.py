"""An MCP server over a :class:`~stargraph_mem.engine.api.Consolidator` (optional extra ``mcp``).

Tools: ``record_episode``, ``search_facts``, ``list_facts``, ``explain_fact`` and
``consolidate``. Every argument is typed (each tool's input schema is closed:
``additionalProperties: false``) and every result is structured (an output schema per
tool; the same JSON is the text content). A refused call (unknown fact id, a time without
a UTC offset, an empty or NUL-bearing scope, an unknown argument, a read-only database) is
an MCP tool error (``isError``) whose text says what was wrong, and nothing of it is
written; the server goes on serving.

Embed it (the caller owns the Consolidator)::

    async with Consolidator.open("memory.db", ["rules/dedup_against_facts.yaml"]) as mem:
        await build_server(mem).run_stdio_async()

Its stdio transport (:func:`~stargraph_mem.integrations.mcp_stdio.serve_stdio_lines`)
answers every request line, even one no server could read (not JSON, a lone surrogate,
nested too deep), with a JSON-RPC error carrying the request's id.

``stargraph-mem mcp --db PATH --pack PACK`` runs :func:`serve_stdio`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.errors import StargraphMemError
from stargraph_mem.integrations.mcp_stdio import serve_stdio_lines
from stargraph_mem.model.base import ID_PATTERN
from stargraph_mem.model.canonical import default_episode_id
from stargraph_mem.model.deltas import DELTA_KINDS
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import Fact, FactHit
from stargraph_mem.model.time import NaiveTimestampError, parse_iso
from stargraph_mem.stores.fact import BindingValue, SourceEpisode
from stargraph_mem.stores.sqlite.search import MAX_LIMIT

__all__ = [
    "TOOL_NAMES",
    "ConsolidationResult",
    "FactExplanation",
    "FactList",
    "RecordResult",
    "SearchResult",
    "build_server",
    "serve_stdio",
    "serve_stdio_lines",
]

SERVER_NAME: Final = "stargraph-mem"

TOOL_NAMES: Final = (
    "record_episode",
    "search_facts",
    "list_facts",
    "explain_fact",
    "consolidate",
)
"""The tools :func:`build_server` registers, in the order ``tools/list`` gives them."""

MAX_LISTED: Final = 20
"""Rejected and salience-gated episodes listed in a result (the totals count them all)."""

INSTRUCTIONS: Final = """\
Long-term memory for agents, consolidated by deterministic rules (no LLM decides).
Record what happened as episodes (raw events scoped user/session/agent); rule packs promote
them to facts (subject, predicate, object; scoped user/agent) on their cadence, or when you
call consolidate. search_facts finds current facts by words and filters. Facts are never
deleted: an update or delete closes the old fact, and list_facts with as_of shows what was
believed at a time. explain_fact says why a fact exists: the rule, its bindings, the source
episodes and the chain of facts it replaced.
Times are ISO 8601 with a UTC offset (2026-11-01T09:00:00+00:00); times without one are
refused."""

KNOWN_ERRORS: Final = (StargraphMemError, ValidationError, sqlite3.Error, OSError)
"""Failures reported to the client with their own message; anything else is a bug, which
the SDK reports as ``Error executing tool <name>`` and logs with its traceback."""


# --- argument types -------------------------------------------------------------------------

_NO_NUL = r"^[^\x00]*$"

Scope = Annotated[str, Field(min_length=1, max_length=256, pattern=_NO_NUL)]
"""A user, session or agent name as the stores accept it."""

Timestamp = Annotated[
    str,
    Field(
        json_schema_extra={"format": "date-time"},
        examples=["2026-11-01T09:00:00+00:00"],
    ),
]
"""ISO 8601 with a UTC offset; parsed by :func:`_aware` so a naive time gets a clear error."""

UserFilter = Annotated[
    Scope | None, Field(description="Only facts of this user (default: every user).")
]
AgentFilter = Annotated[
    Scope | None, Field(description="Only facts of this agent (default: every agent).")
]


# --- results --------------------------------------------------------------------------------


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeltaCounts(_Result):
    """Deltas applied, by kind."""

    add: int = Field(description="New facts.")
    update: int = Field(description="Facts replaced by a new statement (the old one is closed).")
    delete: int = Field(description="Facts closed without a successor.")
    noop: int = Field(description="Episodes that changed no fact (audit only, or reinforcing).")


class RejectedEpisode(_Result):
    """An episode (or the delta a rule made from it) that could not be used."""

    episode_id: str | None = Field(description="The episode, when one is known.")
    rule_id: str | None = Field(description="The rule, or null when the metadata was refused.")
    reason: str = Field(description="Why it was refused.")


class ConsolidationResult(_Result):
    """What one or more consolidation passes did."""

    counts: DeltaCounts = Field(description="Deltas applied by every pass, by kind.")
    passes: int = Field(description="Passes run (one per pack and (user, agent) partition).")
    episodes: int = Field(description="Episodes the passes read.")
    fired: list[str] = Field(description="`pack/rule` of every rule that took part, each once.")
    rejected: list[RejectedEpisode] = Field(
        description=f"Refused episodes with the reason (the first {MAX_LISTED})."
    )
    rejected_total: int = Field(description="All refused episodes.")
    gated: list[str] = Field(
        description=f"Ids of episodes a salience gate kept from the rules (the first {MAX_LISTED});"
        " they stay stored."
    )
    gated_total: int = Field(description="All salience-gated episodes.")


class RecordResult(_Result):
    """The stored episode and what its cadence check ran."""

    episode_id: str = Field(description="Id of the stored episode.")
    consolidation: ConsolidationResult = Field(
        description="Passes the record triggered: rules with an `every: N` cadence that became"
        " due (`every: 1` rules on every record; `every: N, or_after: T` ones also once their"
        " earliest pending episode is T old). Cron and `idle` rules never run on a record:"
        " they run at their time under a scheduler (`stargraph-mem run`), or when the"
        " consolidate tool is called."
    )


class SearchResult(_Result):
    """Current facts ranked for a search."""

    hits: list[FactHit] = Field(
        description="Best first: each current fact with its score (higher is better; compare "
        "scores within one search only; 0 when searching by filters alone)."
    )


class FactList(_Result):
    """Facts matching a query."""

    facts: list[Fact] = Field(description="The facts, oldest valid_from first.")
    total: int = Field(description="Facts that matched, before the limit.")
    truncated: bool = Field(description="Whether the limit left some out.")


class FactExplanation(_Result):
    """Why a fact exists and what became of it."""

    fact: Fact
    rule_id: str = Field(description="The rule that emitted the delta that made the fact.")
    pack_hash: str = Field(description="sha256 of the compiled rule pack that rule belongs to.")
    reason: str = Field(description="The rule's reason text, with its bindings filled in.")
    delta_id: str = Field(description="The delta that made the fact.")
    bindings: dict[str, BindingValue] = Field(
        description="The rule's variables as bound when it fired."
    )
    source_episodes: list[SourceEpisode] = Field(
        description="The episodes the fact was promoted from (fields null when not stored)."
    )
    predecessors: list[Fact] = Field(description="Facts this one replaced (update deltas).")
    successors: list[Fact] = Field(description="Facts that replaced this one, in order.")
    closed_by: str | None = Field(
        description="The delta that closed the fact (null while it is current)."
    )


# --- helpers --------------------------------------------------------------------------------


@contextmanager
def _refused() -> Iterator[None]:
    """Known failures inside the block become tool errors carrying their own message."""
    try:
        yield
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or exc.title}: {error['msg']}"
            for error in exc.errors()
        )
        raise ToolError(problems) from exc
    except KNOWN_ERRORS as exc:
        raise ToolError(" ".join(str(exc).splitlines())) from exc


def _aware(value: str | None, name: str) -> datetime | None:
    """An optional ISO 8601 argument that must carry a UTC offset."""
    if value is None:
        return None
    try:
        return parse_iso(value)
    except NaiveTimestampError:
        raise ToolError(f"{name} {value!r} has no UTC offset (write e.g. {value}+00:00)") from None
    except ValueError:
        raise ToolError(
            f"{name} {value!r} is not an ISO 8601 time with a UTC offset "
            "(e.g. 2026-11-01T09:00:00+00:00)"
        ) from None


def _raise_failed(failed: Sequence[PassReport]) -> None:
    """A tool error naming the partitions quarantined for this call (every other one was
    consolidated), when there are any."""
    if not failed:
        return
    named = "; ".join(
        f"{r.pack} user={r.partition.user!r} agent={r.partition.agent!r}: {r.failed}"
        for r in failed[:MAX_LISTED]
    )
    raise ToolError(
        f"{len(failed)} partition(s) quarantined for this call, every other one was "
        f"consolidated: {named}"
    )


def _summary(passes: Sequence[PassReport]) -> ConsolidationResult:
    counts: dict[str, int] = dict.fromkeys(DELTA_KINDS, 0)
    fired: dict[str, None] = {}
    rejected: list[RejectedEpisode] = []
    gated: list[str] = []
    for report in passes:
        for kind, n in report.counts.items():
            counts[kind] += n
        fired.update(dict.fromkeys(f"{report.pack}/{rule}" for rule in report.rules))
        rejected += (
            RejectedEpisode(episode_id=r.episode_id, rule_id=r.rule_id, reason=r.reason)
            for r in report.rejected
        )
        gated += report.gated
    return ConsolidationResult(
        counts=DeltaCounts(**counts),
        passes=len(passes),
        episodes=sum(report.episodes for report in passes),
        fired=list(fired),
        rejected=rejected[:MAX_LISTED],
        rejected_total=len(rejected),
        gated=gated[:MAX_LISTED],
        gated_total=len(gated),
    )


def _tool(fn: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    """A tool whose description is ``fn``'s docstring and whose arguments are closed: an
    unknown argument (a misspelt ``users``) is refused instead of silently ignored."""
    description = " ".join((fn.__doc__ or "").split())
    tool = Tool.from_function(fn, description=description, annotations=annotations)
    loose = tool.fn_metadata.arg_model
    closed = {"__module__": loose.__module__, "model_config": ConfigDict(extra="forbid")}
    strict = cast(type[ArgModelBase], type(loose.__name__, (loose,), closed))
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool


# --- the server -----------------------------------------------------------------------------


class _Server(MCPServer[Any]):
    """The SDK's server, served on stdio by :func:`serve_stdio_lines` (every request gets
    an answer, even a line the SDK's own transport would drop)."""

    async def run_stdio_async(self) -> None:
        """Serve on stdin/stdout until stdin closes."""
        await serve_stdio_lines(self)


def build_server(mem: Consolidator, *, name: str = SERVER_NAME) -> MCPServer[Any]:
    """An MCP server whose tools call ``mem`` (open it first; the caller closes it)."""

    async def record_episode(
        content: Annotated[str, Field(description="What happened, as text.")],
        user: Annotated[Scope, Field(description="User the episode belongs to.")],
        session: Annotated[Scope, Field(description="Session (conversation) it happened in.")],
        agent: Annotated[Scope, Field(description="Agent that observed it.")],
        timestamp: Annotated[
            Timestamp | None,
            Field(
                description="When it happened: ISO 8601 with a UTC offset, e.g. "
                "2026-11-01T09:00:00+00:00 (a time without an offset is refused). "
                "Default: now."
            ),
        ] = None,
        id: Annotated[
            str | None,
            Field(
                pattern=ID_PATTERN,
                description="Episode id. Default: a hash of the scope, timestamp and content, "
                "so recording the same episode twice stores it once. Reusing an id with "
                "different fields is refused.",
            ),
        ] = None,
        metadata: Annotated[
            dict[str, JsonValue] | None,
            Field(
                description="Structured fields the rule packs match on. The shipped packs read "
                "`subject`, `predicate` and `object` (strings: the statement to remember), "
                "`intent` (add, update, delete or noop) and `replaces` (a list of fact ids, "
                "for update and delete)."
            ),
        ] = None,
    ) -> RecordResult:
        """Store one episode in the episodic memory, then run the consolidation rules whose
        cadence it makes due (`every: 1` rules fire on every record). Returns the episode id
        and the deltas applied (add, update, delete, noop), the rules that fired and any
        refused or salience-gated episodes. Facts are promoted only by the rules: put the
        statement in `metadata` (subject, predicate, object) for the shipped packs to see it.
        """
        when = _aware(timestamp, "timestamp") or mem.clock()
        with _refused():
            episode = Episode(
                id=id or default_episode_id(content, user, session, agent, when),
                content=content,
                timestamp=when,
                user=user,
                session=session,
                agent=agent,
                metadata=metadata or {},
            )
            report = await mem.record(episode)
        return RecordResult(episode_id=episode.id, consolidation=_summary(report.passes))

    async def search_facts(
        query: Annotated[
            str,
            Field(
                description="Words to look for in the facts' subject, predicate, object and "
                "payload (case and accents ignored; a fact matching any word is a hit). Empty: "
                "search by the filters alone."
            ),
        ] = "",
        user: UserFilter = None,
        agent: AgentFilter = None,
        subject: Annotated[
            str | None, Field(description="Only facts with exactly this subject.")
        ] = None,
        predicate: Annotated[
            str | None, Field(description="Only facts with exactly this predicate.")
        ] = None,
        min_confidence: Annotated[
            float | None,
            Field(ge=0, le=1, description="Only facts with at least this confidence."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Most facts to return.")] = 10,
    ) -> SearchResult:
        """Search the currently believed facts: those matching the most and the rarest words
        of `query` come first, then the more confident and the newer ones; an empty query
        lists the facts matching the filters, most confident first. Each returned fact's
        access count and last access time are recorded (not on a read-only database); no
        fact changes. Closed facts are not searched: use list_facts with as_of for the past.
        """
        with _refused():
            hits = await mem.search(
                query,
                user=user,
                agent=agent,
                subject=subject,
                predicate=predicate,
                min_confidence=min_confidence,
                limit=limit,
                touch=mem.read_only_reason is None,
            )
        return SearchResult(hits=hits)

    async def list_facts(
        user: UserFilter = None,
        agent: AgentFilter = None,
        as_of: Annotated[
            Timestamp | None,
            Field(
                description="List the facts that were current at this time (ISO 8601 with a "
                "UTC offset) instead of the current ones."
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="Most facts to return.")] = 100,
    ) -> FactList:
        """List the facts currently believed (or those believed at `as_of`), optionally for
        one user and/or agent, oldest first. Each fact has subject, predicate, object,
        confidence, validity interval and the rule that made it; pass its id to
        explain_fact to see why it exists."""
        when = _aware(as_of, "as_of")
        with _refused():
            found = await mem.facts(user=user, agent=agent, as_of=when)
        return FactList(facts=found[:limit], total=len(found), truncated=len(found) > limit)

    async def explain_fact(
        fact_id: Annotated[
            str,
            Field(pattern=ID_PATTERN, description="The fact's id (from list_facts)."),
        ],
    ) -> FactExplanation:
        """Explain why a fact exists: the rule and rule pack (by hash) that made it, the
        rule's bindings and reason, the source episodes, the facts it replaced and those that
        replaced it. Works for current and closed facts; an unknown id is an error."""
        with _refused():
            why = await mem.explain(fact_id)
        return FactExplanation(
            fact=why.fact,
            rule_id=why.rule_id,
            pack_hash=why.pack_hash,
            reason=why.reason,
            delta_id=why.provenance.delta_id,
            bindings=why.bindings,
            source_episodes=list(why.source_episodes),
            predecessors=list(why.predecessors),
            successors=list(why.successors),
            closed_by=why.closed_by,
        )

    async def consolidate(
        user: Annotated[
            Scope | None, Field(description="Only this user's partitions (default: all).")
        ] = None,
        agent: Annotated[
            Scope | None, Field(description="Only this agent's partitions (default: all).")
        ] = None,
        now: Annotated[
            Timestamp | None,
            Field(
                description="The pass time (ISO 8601 with a UTC offset): what time-based rules "
                "compare against. Default: now."
            ),
        ] = None,
    ) -> ConsolidationResult:
        """Consolidate now: run every rule pack over the episodes not yet consolidated,
        whatever the rules' cadences, for every (user, agent) partition or the selected ones,
        until caught up. Returns the deltas applied by kind (add, update, delete, noop), the
        passes run, and refused or salience-gated episodes. Running it again with nothing new
        applies nothing."""
        when = _aware(now, "now") or mem.clock()
        with _refused():
            reports = await mem.consolidate(user=user, agent=agent, now=when)
        _raise_failed(reports.failed)
        return _summary(reports.passes)

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    # Writes only add: a fact is closed, never erased. A record with the default time is a
    # new episode, and a search counts an access to each fact it returns: not idempotent.
    adds = ToolAnnotations(destructive_hint=False, idempotent_hint=False, open_world_hint=False)
    catch_up = ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    tools = [
        _tool(record_episode, adds),
        _tool(search_facts, adds),
        _tool(list_facts, reads),
        _tool(explain_fact, reads),
        _tool(consolidate, catch_up),
    ]  # in the order of TOOL_NAMES
    return _Server(name, instructions=INSTRUCTIONS, tools=tools, log_level="WARNING")


async def serve_stdio(db: str | Path, packs: Sequence[str | Path]) -> None:
    """Open the stores at ``db`` with ``packs``, serve MCP on stdin/stdout until stdin
    closes, then close the stores (the call returns; nothing is left running)."""
    async with Consolidator.open(db, packs, keep_deltas=False) as mem:
        await build_server(mem).run_stdio_async()
