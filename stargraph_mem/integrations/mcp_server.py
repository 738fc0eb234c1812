"""An MCP server over a :class:`~stargraph_mem.engine.api.Consolidator` (optional extra ``mcp``).

Tools: ``record_episode``, ``search_facts``, ``list_facts``, ``explain_fact`` and
``consolidate``; the agent tools ``remember_fact`` (an explicit statement recorded as an
episode and consolidated at once), ``correct_fact`` (a correcting episode that supersedes
a fact), ``confirm_fact`` (a pin), ``weak_facts`` and ``memory_stats``; the lifecycle
tools ``update_status`` and ``status_history`` (specification 004's). Every argument
is typed (each tool's input schema is closed: ``additionalProperties: false``) and every
result is structured (an output schema per tool; the same JSON is the text content). A
refused call (unknown fact id, a time without a UTC offset, an empty scope, a NUL in a
scope, filter or time, a statement over the size limits, an unknown argument, a read-only
database) is an MCP tool error (``isError``) whose text says what was wrong, and nothing
of it is written (but for the episode of a ``remember_fact`` or ``correct_fact`` that no
pack acted on or that a pass rejected: it stays stored, as every episode does, and the
error names it, with the rejection's reason); the server goes on serving.

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
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final, Literal, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.engine.passes.sweep import swept
from stargraph_mem.errors import StargraphMemError
from stargraph_mem.integrations.mcp_stdio import serve_stdio_lines
from stargraph_mem.model.base import ID_PATTERN
from stargraph_mem.model.canonical import default_episode_id
from stargraph_mem.model.deltas import DELTA_KINDS
from stargraph_mem.model.entities import TimelineEvent
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import Fact, FactHit, FactPattern, StatusChange
from stargraph_mem.model.layers import RecallMode
from stargraph_mem.model.lifecycle import spec_status
from stargraph_mem.model.limits import KEY_BYTES, fact_size_problem, utf8_size
from stargraph_mem.model.time import NaiveTimestampError, parse_iso, with_utc
from stargraph_mem.stores.fact import BindingValue, SourceEpisode
from stargraph_mem.stores.scope import partition_key
from stargraph_mem.stores.sqlite.search import MAX_LIMIT

__all__ = [
    "TOOL_NAMES",
    "Confirmation",
    "ConsolidationResult",
    "Correction",
    "EntityInfo",
    "FactExplanation",
    "FactList",
    "MemorySearch",
    "MemoryStats",
    "RecordResult",
    "Remembered",
    "SearchResult",
    "StatusHistory",
    "StatusUpdate",
    "WeakFacts",
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
    "remember_fact",
    "correct_fact",
    "confirm_fact",
    "weak_facts",
    "memory_stats",
    "search_memory",
    "get_entity_info",
    "update_status",
    "status_history",
)
"""The tools :func:`build_server` registers, in the order ``tools/list`` gives them."""

AGENT_SESSION: Final = "agent-statements"
"""The session of the episodes ``remember_fact`` and ``correct_fact`` record, unless the
call names one."""
REMEMBERED: Final = "agent_statement"
"""``metadata.source`` of an episode ``remember_fact`` records: the agent said it outright."""
CORRECTED: Final = "agent_correction"
"""``metadata.source`` of an episode ``correct_fact`` records."""
SOURCE_NODE: Final = "mcp"
"""``source_node`` of the episodes the agent tools record."""
WEAK_BELOW: Final = 0.3
"""``weak_facts``' default confidence threshold."""

MAX_LISTED: Final = 20
"""Rejected and salience-gated episodes listed in a result (the totals count them all)."""

INSTRUCTIONS: Final = """\
Long-term memory for agents, consolidated by deterministic rules (no LLM decides).
Record what happened as episodes (raw events scoped user/session/agent); rule packs promote
them to facts (subject, predicate, object; scoped user/agent) on their cadence, or when you
call consolidate. search_facts finds current facts by words and filters. Facts are never
deleted: an update or delete closes the old fact, and list_facts with as_of shows what was
believed at a time. explain_fact says why a fact exists: the rule, its bindings, the source
episodes and the chain of facts it replaced. remember_fact saves a statement at once,
correct_fact replaces a wrong fact, confirm_fact pins one so it never fades, weak_facts lists
the facts at risk and memory_stats counts what is stored. update_status challenges a fact
(left out of searches until cleared), or marks it merged, invalidated, deleted, expired or
archived, with a reason; status_history lists its status changes.
Times are ISO 8601 with a UTC offset (2026-11-01T09:00:00+00:00); times without one are
refused."""

KNOWN_ERRORS: Final = (StargraphMemError, ValidationError, sqlite3.Error, OSError)
"""Failures reported to the client with their own message; anything else is a bug, which
the SDK reports as ``Error executing tool <name>`` and logs with its traceback."""


# --- argument types -------------------------------------------------------------------------

_NO_NUL = r"^[^\x00]*$"

Scope = Annotated[str, Field(min_length=1, max_length=256, pattern=_NO_NUL)]
"""A user, session or agent name as the stores accept it."""

Statement = Annotated[str, Field(min_length=1, pattern=_NO_NUL)]
"""A subject, predicate or object an agent states."""

Timestamp = Annotated[
    str,
    Field(
        pattern=_NO_NUL,
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
IncludeChallenged = Annotated[
    bool, Field(description="Also facts challenged for review (left out by default).")
]
ModeParam = Annotated[
    RecallMode,
    Field(
        description="What kinds of memory come back (specification 004): facts_only (facts "
        "of type fact), facts_plus_rules (fact and procedure), full_context (everything, the "
        "default). The first two return no episodes."
    ),
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


class Remembered(_Result):
    """The episode an explicit statement was recorded as, and the facts made from it."""

    episode_id: str = Field(
        description="Id of the recorded episode (its metadata carries the "
        "triple and `source: agent_statement`)."
    )
    facts: list[Fact] = Field(
        description="The current facts whose provenance names the episode (usually one); "
        "when no rule made one because the partition already states it (a pack that "
        "deduplicates records a noop), the current facts stating it."
    )
    already_known: bool = Field(
        description="True when the facts were there before (no new fact was made)."
    )
    consolidation: ConsolidationResult = Field(
        description="What the record and the consolidation of the (user, agent) partition did."
    )


class Correction(_Result):
    """A corrected fact: the one closed and the one that replaced it."""

    episode_id: str = Field(description="Id of the correcting episode.")
    old: Fact = Field(description="The corrected fact, now closed (superseded).")
    new: Fact = Field(description="The fact that replaced it, with the new object.")
    consolidation: ConsolidationResult = Field(
        description="What the record and the consolidation of the (user, agent) partition did."
    )


class Confirmation(_Result):
    """A pinned fact."""

    fact: Fact
    pinned_at: datetime = Field(
        description="When the pin was set (the first pin, if it was pinned already)."
    )
    newly_pinned: bool = Field(
        description="False when the fact was pinned already (nothing changed)."
    )


class StatusUpdate(_Result):
    """A fact after a status change, and its status changes so far."""

    fact: Fact
    old: str = Field(description="Its status before (active for current).")
    new: str = Field(description="Its status now.")
    status_history: list[StatusChange] = Field(
        description="Its status changes, oldest first: {old, new, reason, changed_at}."
    )


class StatusHistory(_Result):
    """A fact's status changes, in specification 004's shape."""

    fact_id: str
    status: str = Field(description="Its status now (active for current).")
    status_history: list[StatusChange] = Field(
        description="Its status changes, oldest first: {old, new, reason, changed_at}."
    )


class WeakFact(_Result):
    """A current fact of low confidence, and what would protect it."""

    fact: Fact
    pinned: bool = Field(description="Whether it is pinned (sweeps leave it alone).")
    access_count: int = Field(description="Access-recording reads that returned it.")
    last_access: datetime | None = Field(description="When one last did (null: never).")
    protect: list[str] = Field(description="What would keep it from fading or being archived.")


class WeakFacts(_Result):
    """The lowest-confidence current facts."""

    facts: list[WeakFact] = Field(description="Lowest confidence first (ties: oldest first).")
    total: int = Field(description="Current facts below the threshold, before the limit.")
    truncated: bool = Field(description="Whether the limit left some out.")
    sweeps: list[str] = Field(
        description="`pack/rule` of the sweeps of this server's packs: rules over facts that "
        "may lower a fact's confidence or close it on their schedule (pinned facts excepted, "
        "unless a rule tests `pinned`)."
    )


class PackBacklog(_Result):
    """Episodes a pack has not consolidated yet."""

    pack: str
    pending: int = Field(
        description="Episodes some rule of the pack has not consumed yet, summed over partitions."
    )


class MemoryStats(_Result):
    """Counts over the memory (or one user's / agent's part of it)."""

    backend: str = Field(description="`sqlite` or `postgresql`.")
    partitions: int = Field(description="(user, agent) partitions with episodes.")
    episodes: int = Field(description="Stored episodes.")
    facts: dict[str, int] = Field(
        description="Facts by status (current, superseded, deleted, expired, archived, "
        "invalidated); statuses with no fact are left out."
    )
    pinned: int = Field(description="Current facts that are pinned.")
    pending: list[PackBacklog] = Field(description="Backlog per pack, in the server's order.")
    storage_bytes: int | None = Field(
        description="Size of the SQLite files (database, WAL, shared memory); null on PostgreSQL."
    )


class MemoryHit(_Result):
    """One recalled fact or episode."""

    rank: int = Field(description="1 for the best hit.")
    kind: Literal["fact", "episode"]
    id: str
    score: float = Field(description="The fused (Reciprocal Rank Fusion) score; higher is better.")
    strategies: dict[str, int] = Field(
        description="Each strategy that found it (fts, vector, graph) and its rank there."
    )
    cosine: float | None = Field(description="The vector strategy's similarity, if it found it.")
    text: str = Field(description="The fact's statement or the episode's content.")
    fact: Fact | None = Field(description="The fact (a fact hit).")
    episode: Episode | None = Field(description="The episode (an episode hit).")


class MemorySearch(_Result):
    """A recall: hits by meaning, words and the graph, fused."""

    query: str
    intent: str = Field(description="why, when, who, what or general (picks the graph strategy).")
    complexity: str = Field(description="simple or complex (sets the default limit).")
    entities: list[str] = Field(description="Entities the query named.")
    embedder: str | None = Field(
        description="Identity of the embedder whose vectors were compared."
    )
    hits: list[MemoryHit] = Field(description="Best first.")
    context: str | None = Field(
        description="With context_budget: the markdown block for a prompt, within that many "
        "tokens (empty when nothing was recalled)."
    )


class EntityInfo(_Result):
    """What memory holds on one entity."""

    name: str = Field(description="The canonical name.")
    type: str
    declared: bool = Field(description="False for an implicit entity (a name facts carry).")
    aliases: list[str]
    facts: list[Fact] = Field(description="Its current facts, newest first.")
    timeline: list[TimelineEvent] = Field(
        description="Its facts' additions and closings and their source episodes, oldest first."
    )
    truncated: bool = Field(description="Whether it has more facts than were listed.")


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
        raise ToolError(
            f"{name} {value!r} has no UTC offset (write e.g. {with_utc(value)})"
        ) from None
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


def _too_large(mem: Consolidator, user: str, agent: str, triple: Sequence[str]) -> str | None:
    """Why a fact stating ``triple`` (subject, predicate, object) in the (user, agent)
    partition could not be made, or ``None``: the limits a pass checks a delta's rendered
    text against (see :meth:`~stargraph_mem.engine.passes.collect.Plan.too_large`), measured
    on the statement alone, so it is refused before its episode is recorded."""
    sizes = dict(zip(("subject", "predicate", "object"), map(utf8_size, triple), strict=True))
    room = KEY_BYTES - utf8_size(partition_key(user, agent))
    return fact_size_problem(
        sizes,
        mem.limits.fact_bytes,
        room,
        whole="the statement",
        key="the subject and predicate",
    )


def _rejections(passes: Sequence[PassReport], episode: Episode) -> str:
    """The reasons the passes refused ``episode`` (or a delta made from it), each once,
    as one text ("" when none did)."""
    reasons = {
        f"{report.pack}/{r.rule_id}: {r.reason}"
        if r.rule_id
        else f"{report.pack}: {r.reason}": None
        for report in passes
        for r in report.rejected
        if r.episode_id == episode.id
    }
    return "; ".join(reasons)


async def _made_from(mem: Consolidator, episode: Episode) -> list[Fact]:
    """The current facts of the episode's partition whose provenance names it."""
    found = await mem.facts(user=episode.user, agent=episode.agent)
    return [
        fact
        for fact in found
        if any(
            episode.id in cast(list[str], step.get("source_episode_ids") or [])
            for step in fact.lineage
        )
    ]


async def _stating(mem: Consolidator, episode: Episode) -> list[Fact]:
    """The current facts of the episode's partition stating its triple."""
    meta = episode.metadata
    found = await mem.fact_store.query(
        FactPattern(
            user=episode.user,
            agent=episode.agent,
            subject=cast(str, meta["subject"]),
            predicate=cast(str, meta["predicate"]),
            object=cast(str, meta["object"]),
        )
    )
    return found


async def _current_successor(mem: Consolidator, fact: Fact) -> Fact | None:
    """The current fact at the end of ``fact``'s supersession chain, if any."""
    seen = {fact.id}
    while fact.superseded_by is not None and fact.superseded_by not in seen:
        seen.add(fact.superseded_by)
        fact = await mem.fact_store.get(fact.superseded_by)
    return fact if fact.is_current and len(seen) > 1 else None


def _weak(fact: Fact, count: int, last: datetime | None) -> WeakFact:
    pinned = fact.pinned_at is not None
    protect = (
        []
        if pinned
        else [
            "confirm_fact: pin it (sweeps leave pinned facts alone)",
            "remember_fact with the same statement: a new observation the rules can "
            "reinforce it with",
        ]
    )
    return WeakFact(fact=fact, pinned=pinned, access_count=count, last_access=last, protect=protect)


def _storage_bytes(mem: Consolidator) -> int | None:
    """The SQLite files' size (database, WAL, shared memory); None on a server."""
    if mem.database.backend != "sqlite":
        return None
    path = Path(mem.location)
    total = 0
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with suppress(OSError):
            total += file.stat().st_size
    return total


async def _stats(mem: Consolidator, user: str | None, agent: str | None) -> MemoryStats:
    partitions = [
        p
        for p in await mem.memory.partitions()
        if (user is None or p.user == user) and (agent is None or p.agent == agent)
    ]
    episodes = 0
    for partition in partitions:
        episodes += await mem.memory.count_since(partition, 0)
    every = await mem.facts(user=user, agent=agent, status="all")
    by_status = Counter(f.status for f in every)
    pinned = sum(1 for f in every if f.is_current and f.pinned_at is not None)
    rows = await mem.status(user=user, agent=agent)
    most: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.sweep or row.partition is None:
            continue
        key = (row.pack, row.partition.key)
        most[key] = max(most.get(key, 0), row.pending)
    pending = [
        PackBacklog(pack=c.name, pending=sum(n for (pack, _), n in most.items() if pack == c.name))
        for c in mem.packs
    ]
    return MemoryStats(
        backend=mem.database.backend,
        partitions=len(partitions),
        episodes=episodes,
        facts=dict(sorted(by_status.items())),
        pinned=pinned,
        pending=pending,
        storage_bytes=_storage_bytes(mem),
    )


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
                pattern=_NO_NUL,
                description="Words to look for in the facts' subject, predicate, object and "
                "payload (case and accents ignored; a fact matching any word is a hit). Empty: "
                "search by the filters alone.",
            ),
        ] = "",
        user: UserFilter = None,
        agent: AgentFilter = None,
        subject: Annotated[
            str | None,
            Field(pattern=_NO_NUL, description="Only facts with exactly this subject."),
        ] = None,
        predicate: Annotated[
            str | None,
            Field(pattern=_NO_NUL, description="Only facts with exactly this predicate."),
        ] = None,
        min_confidence: Annotated[
            float | None,
            Field(ge=0, le=1, description="Only facts with at least this confidence."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Most facts to return.")] = 10,
        include_challenged: IncludeChallenged = False,
        mode: ModeParam = "full_context",
    ) -> SearchResult:
        """Search the currently believed facts: those matching the most and the rarest words
        of `query` come first, then the more confident and the newer ones; an empty query
        lists the facts matching the filters, most confident first. Each returned fact's
        access count and last access time are recorded (not on a read-only database); no
        fact changes. Closed facts are not searched (use list_facts with as_of for the past),
        nor challenged ones unless include_challenged (update_status flags and clears
        them).
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
                include_challenged=include_challenged,
                mode=mode,
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

    async def _record_and_consolidate(episode: Episode) -> list[PassReport]:
        """Record ``episode``, then consolidate its (user, agent) partition now; the passes
        of both (a quarantined partition is a tool error)."""
        with _refused():
            recorded = await mem.record(episode)
            ran = await mem.consolidate(user=episode.user, agent=episode.agent, now=mem.clock())
        _raise_failed(ran.failed)
        return [*recorded.passes, *ran.passes]

    async def remember_fact(
        user: Annotated[Scope, Field(description="User the fact is about or for.")],
        agent: Annotated[Scope, Field(description="Agent that states it.")],
        subject: Annotated[Statement, Field(description="What the fact is about.")],
        predicate: Annotated[Statement, Field(description="The relation, e.g. `likes`.")],
        object: Annotated[Statement, Field(description="The value, e.g. `green tea`.")],
        note: Annotated[
            str | None,
            Field(
                min_length=1,
                pattern=_NO_NUL,
                description="Why or where it was said: the episode's text (default: the "
                "statement itself).",
            ),
        ] = None,
        session: Annotated[
            Scope | None,
            Field(description=f"Session to record the episode in (default: {AGENT_SESSION})."),
        ] = None,
    ) -> Remembered:
        """Explicitly save a fact the agent was told or decided: records an episode carrying
        (subject, predicate, object) in its metadata, marked `source: agent_statement`, then
        consolidates that (user, agent) partition at once, so the rule packs make the fact
        (with the shipped default pack: a new fact, or an update of one stated in the same
        pass). Returns the episode id and the facts made from it, or, when a pack found the
        statement known already (a deduplicating pack), the facts stating it, with
        `already_known`. If no pack turns the episode into a fact and none states it, that
        is an error naming the episode and, when a pass rejected it, why (it stays stored,
        as every episode does). A statement too large for a fact is refused and records
        nothing."""
        problem = _too_large(mem, user, agent, (subject, predicate, object))
        if problem is not None:
            raise ToolError(f"{problem}; nothing was recorded")
        when = mem.clock()
        content = note or f"{subject} {predicate} {object}"
        scope = session or AGENT_SESSION
        with _refused():
            episode = Episode(
                id=default_episode_id(content, user, scope, agent, when),
                content=content,
                timestamp=when,
                source_node=SOURCE_NODE,
                user=user,
                session=scope,
                agent=agent,
                metadata={
                    "subject": subject,
                    "predicate": predicate,
                    "object": object,
                    "source": REMEMBERED,
                },
            )
        passes = await _record_and_consolidate(episode)
        with _refused():
            made = await _made_from(mem, episode)
            known = [] if made else await _stating(mem, episode)
        if not made and known:
            return Remembered(
                episode_id=episode.id,
                facts=known,
                already_known=True,
                consolidation=_summary(passes),
            )
        if not made:
            packs = ", ".join(c.name for c in mem.packs) or "none"
            why = _rejections(passes, episode)
            if why:
                raise ToolError(
                    f"no fact was made from episode {episode.id!r}: it was rejected ({why}); "
                    "the episode stays stored"
                )
            raise ToolError(
                f"no rule pack made a fact from episode {episode.id!r} (packs: {packs}); the "
                "episode stays stored. Serve a pack that promotes metadata subject/predicate/"
                "object, such as rules/default.yaml"
            )
        return Remembered(
            episode_id=episode.id, facts=made, already_known=False, consolidation=_summary(passes)
        )

    async def correct_fact(
        fact_id: Annotated[
            str, Field(pattern=ID_PATTERN, description="The current fact to correct.")
        ],
        object: Annotated[Statement, Field(description="The right value (the new object).")],
        reason: Annotated[
            str,
            Field(
                min_length=1,
                pattern=_NO_NUL,
                description="Why it is corrected: the correcting episode's text.",
            ),
        ],
        session: Annotated[
            Scope | None,
            Field(description=f"Session to record the episode in (default: {AGENT_SESSION})."),
        ] = None,
    ) -> Correction:
        """Correct a current fact: records an episode with the fact's subject and predicate,
        the new object and `intent: update, replaces: [fact_id]` (marked `source:
        agent_correction`), then consolidates the fact's partition, so the rules supersede
        the old fact (it is closed, never erased: explain_fact and list_facts with as_of
        still show it). Returns the old and the new fact. An unknown or closed fact id, the
        object it already has, or an object too large for a fact is an error and records
        nothing."""
        with _refused():
            old = await mem.fact_store.get(fact_id)
        if not old.is_current:
            raise ToolError(
                f"fact {fact_id!r} is {old.status}, not current: only a current fact can be "
                "corrected"
                + (f" (it was replaced by {old.superseded_by!r})" if old.superseded_by else "")
            )
        if not old.has_triple:
            raise ToolError(f"fact {fact_id!r} has no subject/predicate/object to correct")
        if object == old.object:
            raise ToolError(f"fact {fact_id!r} already has object {object!r}: nothing to correct")
        problem = _too_large(mem, old.user, old.agent, (old.subject, old.predicate, object))
        if problem is not None:
            raise ToolError(f"{problem}; nothing was recorded")
        when = mem.clock()
        scope = session or AGENT_SESSION
        with _refused():
            episode = Episode(
                id=default_episode_id(reason, old.user, scope, old.agent, when),
                content=reason,
                timestamp=when,
                source_node=SOURCE_NODE,
                user=old.user,
                session=scope,
                agent=old.agent,
                metadata={
                    "intent": "update",
                    "replaces": [fact_id],
                    "subject": old.subject,
                    "predicate": old.predicate,
                    "object": object,
                    "source": CORRECTED,
                },
            )
        passes = await _record_and_consolidate(episode)
        with _refused():
            closed = await mem.fact_store.get(fact_id)
            new = None if closed.superseded_by is None else await _current_successor(mem, closed)
        if closed.is_current or new is None:
            packs = ", ".join(c.name for c in mem.packs) or "none"
            why = _rejections(passes, episode)
            if why:
                raise ToolError(
                    f"fact {fact_id!r} was not superseded: episode {episode.id!r} was "
                    f"rejected ({why}); the episode stays stored"
                )
            raise ToolError(
                f"no rule pack superseded fact {fact_id!r} with episode {episode.id!r} "
                f"(packs: {packs}); the episode stays stored. Serve a pack that honours "
                "metadata intent update with replaces, such as rules/default.yaml"
            )
        return Correction(
            episode_id=episode.id, old=closed, new=new, consolidation=_summary(passes)
        )

    async def confirm_fact(
        fact_id: Annotated[str, Field(pattern=ID_PATTERN, description="The current fact.")],
        reason: Annotated[
            str,
            Field(pattern=_NO_NUL, max_length=1000, description="Why (kept with the pin)."),
        ] = "",
    ) -> Confirmation:
        """Confirm a fact so it never fades: pins it. Where the specification sets decay
        rate 0 and confidence 1.0, this memory pins the fact: sweeps (decay, archival,
        expiry) leave a pinned fact alone unless a rule tests `pinned`, and the pin carries
        to the facts that replace it; its confidence is left as the rules set it. Confirming
        a pinned fact changes nothing; an unknown or closed fact is an error."""
        with _refused():
            newly = await mem.pin(fact_id, reason=reason)
            fact = await mem.fact_store.get(fact_id)
        assert fact.pinned_at is not None  # a pinned current fact carries its pin time
        return Confirmation(fact=fact, pinned_at=fact.pinned_at, newly_pinned=newly)

    async def weak_facts(
        user: UserFilter = None,
        agent: AgentFilter = None,
        below: Annotated[
            float,
            Field(
                gt=0,
                le=1,
                description=f"Confidence threshold: facts below it are listed (default "
                f"{WEAK_BELOW}).",
            ),
        ] = WEAK_BELOW,
        limit: Annotated[int, Field(ge=1, le=1000, description="Most facts to return.")] = 20,
    ) -> WeakFacts:
        """List the current facts of lowest confidence (below `below`), lowest first, with
        whether each is pinned, how often it was read, and what would protect it:
        confirm_fact pins it (sweeps then leave it alone), and stating it again with
        remember_fact gives the rules an observation to reinforce or restore it with. Also
        names this server's sweeps, the rules that may fade or archive such facts. Reads
        only."""
        with _refused():
            found = await mem.facts(user=user, agent=agent)
            weak = sorted(
                (f for f in found if f.confidence < below),
                key=lambda f: (f.confidence, f.valid_from, f.id),
            )
            listed = []
            for fact in weak[:limit]:
                seen = await mem.access(fact.id)
                listed.append(_weak(fact, seen.count, seen.last_access))
        sweeps = [
            f"{r.pack}/{rule.id}" for r in mem.runners for rule in r.rules_of(None) if swept(rule)
        ]
        return WeakFacts(facts=listed, total=len(weak), truncated=len(weak) > limit, sweeps=sweeps)

    async def memory_stats(
        user: Annotated[
            Scope | None, Field(description="Count only this user's part (default: all).")
        ] = None,
        agent: Annotated[
            Scope | None, Field(description="Count only this agent's part (default: all).")
        ] = None,
    ) -> MemoryStats:
        """Counts over the memory: (user, agent) partitions, episodes, facts by status,
        pinned current facts, the episodes each rule pack has not consolidated yet, and the
        size of the SQLite files. Reads only."""
        with _refused():
            return await _stats(mem, user, agent)

    async def search_memory(
        query: Annotated[
            str,
            Field(min_length=1, max_length=4000, pattern=_NO_NUL, description="What to recall."),
        ],
        user: Annotated[Scope, Field(description="User whose memory is searched.")],
        agent: Annotated[Scope, Field(description="Agent whose memory is searched.")],
        kinds: Annotated[
            Literal["facts", "episodes", "both"], Field(description="What to search.")
        ] = "both",
        after: Annotated[
            str | None,
            Field(
                pattern=_NO_NUL,
                description="Only from this time on: last_week, last_month, today, yesterday, "
                "a UTC day YYYY-MM-DD, or ISO 8601 with a UTC offset.",
            ),
        ] = None,
        before: Annotated[
            str | None,
            Field(pattern=_NO_NUL, description="Only before this time (same forms as after)."),
        ] = None,
        limit: Annotated[
            int | None,
            Field(ge=1, le=100, description="Most hits (default: 5, or 20 for a complex query)."),
        ] = None,
        entity_name: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=256,
                pattern=_NO_NUL,
                description="Only facts about this entity (a name or an alias).",
            ),
        ] = None,
        context_budget: Annotated[
            int | None,
            Field(
                ge=1,
                le=100_000,
                description="Also return a markdown context block within this many tokens.",
            ),
        ] = None,
        include_challenged: IncludeChallenged = False,
        mode: ModeParam = "full_context",
    ) -> MemorySearch:
        """Recall memory by meaning: full-text, vector and graph search (entities, time,
        lineage) fused by Reciprocal Rank Fusion; the query's intent (why, when, who,
        what, general) picks the graph strategy. Each hit says which strategies found it
        and at what rank. With context_budget, a markdown block for a prompt comes too,
        each fact citing its source episodes. Returned facts' accesses are recorded (not
        on a read-only database)."""
        with _refused():
            result = await mem.recall(
                query,
                user=user,
                agent=agent,
                kinds=kinds,
                after=after,
                before=before,
                limit=limit,
                entity=entity_name,
                touch=mem.read_only_reason is None,
                include_challenged=include_challenged,
                mode=mode,
            )
            context = None if context_budget is None else result.context(context_budget)
        hits = [
            MemoryHit(
                rank=rank,
                kind=hit.kind,
                id=hit.id,
                score=hit.score,
                strategies=dict(hit.strategies),
                cosine=hit.cosine,
                text=hit.text,
                fact=hit.fact,
                episode=hit.episode,
            )
            for rank, hit in enumerate(result.hits, 1)
        ]
        return MemorySearch(
            query=result.query,
            intent=result.intent,
            complexity=result.complexity,
            entities=list(result.entities),
            embedder=result.embedder,
            hits=hits,
            context=context,
        )

    async def get_entity_info(
        name: Annotated[
            str,
            Field(
                min_length=1,
                max_length=256,
                pattern=_NO_NUL,
                description="The entity's name or an alias (case and accents ignored).",
            ),
        ],
        user: Annotated[Scope, Field(description="User whose memory is read.")],
        agent: Annotated[Scope, Field(description="Agent whose memory is read.")],
    ) -> EntityInfo:
        """What memory holds on one entity (a person, project, place...): its canonical
        name, type and aliases, its current facts (newest first) and its timeline of facts
        added and closed and the episodes they came from (oldest first). A name nothing
        in the partition has is an error. Reads only."""
        with _refused():
            profile = await mem.entity(name, user=user, agent=agent)
        entity = profile.entity
        return EntityInfo(
            name=entity.canonical_name,
            type=entity.type,
            declared=entity.declared,
            aliases=list(profile.aliases),
            facts=list(profile.facts),
            timeline=list(profile.timeline),
            truncated=profile.truncated,
        )

    async def update_status(
        fact_id: Annotated[str, Field(pattern=ID_PATTERN, description="The fact's id.")],
        status: Annotated[
            Literal[
                "active",
                "challenged",
                "merged",
                "superseded",
                "invalidated",
                "deleted",
                "expired",
                "archived",
            ],
            Field(
                description="The new status: challenged flags a current fact for review (it "
                "stays current, left out of searches); active clears the flag; the others "
                "close the fact for good."
            ),
        ],
        reason: Annotated[
            str,
            Field(
                pattern=_NO_NUL,
                max_length=1000,
                description="Why (kept in its status history; required for challenged and "
                "invalidated).",
            ),
        ] = "",
        merged_into: Annotated[
            str | None,
            Field(
                pattern=ID_PATTERN,
                description="With merged: the current fact of the same user and agent it "
                "was merged into; with superseded: the current fact of the same user and "
                "agent, not older, that replaces it.",
            ),
        ] = None,
        at: Annotated[
            Timestamp | None,
            Field(description="When (ISO 8601 with a UTC offset). Default: now."),
        ] = None,
        user: Annotated[
            Scope | None, Field(description="The fact's user (checked when given).")
        ] = None,
        agent: Annotated[
            Scope | None, Field(description="The fact's agent (checked when given).")
        ] = None,
    ) -> StatusUpdate:
        """Change a fact's lifecycle status, with a reason: challenge a belief that newer
        evidence contradicts, clear a challenge (active), mark it merged into another fact
        or superseded by a newer one (merged_into names it), invalidated (confirmed
        wrong), deleted, expired or archived. Every change is audited and kept in the
        fact's status history. An unknown fact, a closed fact (a closed fact keeps its
        status), a missing reason, or a merged_into that is not a current fact of the same
        user and agent is an error, and nothing changes."""
        when = _aware(at, "at")
        with _refused():
            before = await mem.fact_store.get(fact_id)
            fact = await mem.update_status(
                fact_id,
                status,
                reason=reason,
                merged_into=merged_into,
                at=when,
                user=user,
                agent=agent,
            )
            changes = await mem.status_history(fact_id, shape="spec")
        return StatusUpdate(
            fact=fact,
            old=spec_status(before.status),
            new=spec_status(fact.status),
            status_history=changes,
        )

    async def status_history(
        fact_id: Annotated[str, Field(pattern=ID_PATTERN, description="The fact's id.")],
    ) -> StatusHistory:
        """A fact's status changes, oldest first, as {old, new, reason, changed_at}
        (active is a current fact not challenged). Works for current and closed facts;
        an unknown id is an error. Reads only."""
        with _refused():
            fact = await mem.fact_store.get(fact_id)
            changes = await mem.status_history(fact_id, shape="spec")
        return StatusHistory(
            fact_id=fact_id, status=spec_status(fact.status), status_history=changes
        )

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
        _tool(remember_fact, adds),
        _tool(correct_fact, adds),
        _tool(confirm_fact, catch_up),
        _tool(weak_facts, reads),
        _tool(memory_stats, reads),
        _tool(search_memory, adds),
        _tool(get_entity_info, reads),
        _tool(update_status, adds),
        _tool(status_history, reads),
    ]  # in the order of TOOL_NAMES
    return _Server(name, instructions=INSTRUCTIONS, tools=tools, log_level="WARNING")


async def serve_stdio(db: str | Path, packs: Sequence[str | Path]) -> None:
    """Open the stores at ``db`` with ``packs``, serve MCP on stdin/stdout until stdin
    closes, then close the stores (the call returns; nothing is left running)."""
    async with Consolidator.open(db, packs, keep_deltas=False) as mem:
        await build_server(mem).run_stdio_async()
