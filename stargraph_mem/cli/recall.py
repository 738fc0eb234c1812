"""Recall commands: ``recall`` (a partition's facts and episodes by words, meaning and the
graph), ``entity`` (what memory holds on one entity), ``define-entity`` (a name with its
aliases and type) and ``embed`` (fill the vectors recall compares)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from stargraph_mem.cli.base import (
    DEFAULT_DB,
    DbOption,
    aligned,
    app,
    echo_json,
    echo_lines,
    existing,
    printable,
    progress_bar,
    run,
    usage_fail,
)
from stargraph_mem.model.layers import RECALL_MODES

if TYPE_CHECKING:
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.engine.recall.models import RecallHit, RecallResult
    from stargraph_mem.model.entities import Entity, EntityProfile
    from stargraph_mem.stores.repositories.vectors import BackfillReport

UserOption = Annotated[str, typer.Option("--user", help="The user whose memory is read.")]
AgentOption = Annotated[str, typer.Option("--agent", help="The agent whose memory is read.")]
EmbedderOption = Annotated[
    str,
    typer.Option(
        "--embedder",
        help="What texts are embedded with: hash (built in), hash:DIM, minilm (the "
        "`embeddings` extra) or sentence-transformers:PATH.",
    ),
]
PackOption = Annotated[
    list[str] | None,
    typer.Option("--pack", help="A pack whose declared entities the partition knows (repeat)."),
]
KINDS = ("facts", "episodes", "both")
TEXT_WIDTH = 72
"""Characters of a hit's text the table shows (``--json`` has all of it)."""


@asynccontextmanager
async def _memory(db: str, embedder: str, packs: list[str] | None) -> AsyncIterator[Consolidator]:
    from stargraph_mem.engine.api import Consolidator

    async with Consolidator.open(db, packs or [], embedder=embedder) as mem:
        yield mem


def _shown(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= TEXT_WIDTH else one[: TEXT_WIDTH - 1] + "…"


def _entity_head(name: str, kind: str, aliases: Sequence[str]) -> str:
    """``name (type; aliases: a, b)``, name and aliases made :func:`printable`."""
    shown = ", ".join(printable(alias) for alias in aliases) or "-"
    return f"{printable(name)} ({kind}; aliases: {shown})"


def hit_document(rank: int, hit: RecallHit) -> dict[str, Any]:
    """One ``--json`` line of ``recall``."""
    item = hit.fact if hit.fact is not None else hit.episode
    assert item is not None
    return {
        "rank": rank,
        "kind": hit.kind,
        "id": hit.id,
        "score": hit.score,
        "strategies": dict(hit.strategies),
        "cosine": hit.cosine,
        "text": hit.text,
        hit.kind: item.model_dump(mode="json"),
    }


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="What to look for, in plain words.")],
    user: UserOption,
    agent: AgentOption,
    db: DbOption = DEFAULT_DB,
    kinds: Annotated[
        str, typer.Option("--kinds", help="What to search: facts, episodes or both.")
    ] = "both",
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            help="Only from then on: last_week, last_month, today, yesterday, YYYY-MM-DD "
            "or an ISO time with an offset.",
        ),
    ] = None,
    before: Annotated[
        str | None, typer.Option("--before", help="Only before then (same forms as --after).")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", help="Hits at most (default: 5, or 20 for a complex query)."),
    ] = None,
    history: Annotated[
        bool, typer.Option("--history", help="Closed facts too (not only current ones).")
    ] = False,
    entity: Annotated[
        str | None, typer.Option("--entity", help="Only facts of this entity.")
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode", help="facts_only, facts_plus_rules or full_context (memory types kept)."
        ),
    ] = "full_context",
    context: Annotated[
        int | None,
        typer.Option("--context", help="Print the markdown context block of this many tokens."),
    ] = None,
    embedder: EmbedderOption = "hash",
    pack: PackOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per hit, best first.")
    ] = False,
) -> None:
    """Facts and episodes of one partition relevant to a query, best first: full-text,
    vector and graph strategies fused by Reciprocal Rank Fusion; each hit shows the
    strategies that ranked it and where. Records the returned facts' access."""
    if kinds not in KINDS:
        usage_fail(f"--kinds must be one of {', '.join(KINDS)} (got {kinds!r})")
    if context is not None and context < 1:
        usage_fail(f"--context must be a positive number of tokens (got {context})")
    if mode not in RECALL_MODES:
        usage_fail(f"--mode must be one of {', '.join(RECALL_MODES)} (got {mode!r})")
    db = existing(db)

    async def action() -> RecallResult:
        async with _memory(db, embedder, pack) as mem:
            return await mem.recall(
                query,
                user=user,
                agent=agent,
                kinds=kinds,  # type: ignore[arg-type]
                after=after,
                before=before,
                limit=limit,
                include_history=history,
                entity=entity,
                mode=mode,  # type: ignore[arg-type]
            )

    result = run(action())
    if context is not None:
        echo_lines(result.context(budget_tokens=context).split("\n"))
        return
    if as_json:
        for rank, hit in enumerate(result.hits, 1):
            typer.echo(orjson.dumps(hit_document(rank, hit)).decode())
        return
    typer.echo(f"intent: {result.intent}, {result.complexity} query, {len(result.hits)} hits")
    rows = [("RANK", "KIND", "ID", "SCORE", "STRATEGIES", "TEXT")]
    for rank, hit in enumerate(result.hits, 1):
        strategies = ",".join(f"{name}#{place}" for name, place in sorted(hit.strategies.items()))
        rows.append((str(rank), hit.kind, hit.id, f"{hit.score:.4f}", strategies, _shown(hit.text)))
    typer.echo("\n".join(aligned(rows)))


def profile_document(profile: EntityProfile) -> dict[str, Any]:
    """``entity --json``: the profile as one JSON document."""
    return profile.model_dump(mode="json")


@app.command()
def entity(
    name: Annotated[str, typer.Argument(help="A name, an alias, or a fact's subject/object.")],
    user: UserOption,
    agent: AgentOption,
    db: DbOption = DEFAULT_DB,
    limit: Annotated[int, typer.Option("--limit", help="Facts in the timeline at most.")] = 50,
    pack: PackOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="The profile as JSON.")] = False,
) -> None:
    """What one partition holds on an entity: its aliases, current facts and timeline
    (case and accents ignored)."""
    db = existing(db)

    async def action() -> EntityProfile:
        async with _memory(db, "hash", pack) as mem:
            return await mem.entity(name, user=user, agent=agent, limit=limit)

    profile = run(action())
    if as_json:
        echo_json(profile_document(profile))
        return
    found = profile.entity
    typer.echo(_entity_head(found.canonical_name, found.type, profile.aliases))
    rows = [("FACT", "SUBJECT", "PREDICATE", "OBJECT")]
    rows += [(f.id, f.subject, f.predicate, f.object) for f in profile.facts]
    typer.echo("\n".join(aligned(rows)))
    for event in profile.timeline:
        typer.echo(f"{event.at.isoformat()}  {event.kind}  {printable(_shown(event.text))}")


@app.command("define-entity")
def define_entity(
    name: Annotated[str, typer.Argument(help="The entity's canonical name.")],
    user: UserOption,
    agent: AgentOption,
    db: DbOption = DEFAULT_DB,
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Another name for it (repeat).")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option("--type", help="person, project, organization, place, concept or tool."),
    ] = None,
) -> None:
    """Declare an entity of one partition, or add aliases to it (an alias another entity
    has is refused)."""
    db = existing(db)

    async def action() -> Entity:
        async with _memory(db, "hash", None) as mem:
            return await mem.define_entity(
                name,
                user=user,
                agent=agent,
                aliases=alias or [],
                type=kind,  # type: ignore[arg-type]
            )

    made = run(action())
    typer.echo(_entity_head(made.canonical_name, made.type, made.aliases))


@app.command()
def embed(
    db: DbOption = DEFAULT_DB,
    embedder: EmbedderOption = "hash",
    batch: Annotated[int, typer.Option("--batch", help="Texts per embedding call.")] = 512,
) -> None:
    """Embed every episode and current fact that has no vector of the embedder yet (all of
    them after a change of embedder), with a progress bar; recall would otherwise do it
    partition by partition."""
    if not 1 <= batch <= 512:
        usage_fail(f"--batch must be an integer from 1 to 512 (got {batch})")
    db = existing(db)

    async def action() -> BackfillReport:
        async with _memory(db, embedder, None) as mem:
            with progress_bar() as bar:

                def progress(done: int, total: int) -> None:
                    if bar is not None:
                        bar("embedding", done, total)

                return await mem.embed_backfill(batch=batch, progress=progress)

    report = run(action())
    typer.echo(
        f"embedded {report.episodes} episodes and {report.facts} facts of "
        f"{report.partitions} partitions with {report.embedder}"
    )
