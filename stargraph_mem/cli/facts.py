"""Fact commands: list or search them (``facts``), ``explain`` one, ``pin``/``unpin``,
``restore`` an archived one, show its status ``history``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import orjson
import typer

from stargraph_mem.cli.base import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    aligned,
    app,
    echo_json,
    echo_lines,
    opened,
    parse_aware,
    run,
    usage_fail,
)

if TYPE_CHECKING:
    from stargraph_mem.model.facts import Fact, FactHit, FactPattern
    from stargraph_mem.stores.fact import Explanation
    from stargraph_mem.stores.protocols import FactRepository
    from stargraph_mem.stores.sqlite.listing import Listed

T = TypeVar("T")


def parse_confidence(value: float | None) -> float | None:
    """``--min-confidence``: a number from 0 to 1 (NaN and infinities are refused)."""
    if value is not None and not 0.0 <= value <= 1.0:  # False for NaN as well
        raise typer.BadParameter(f"must be a number from 0 to 1, got {value:g}")
    return value


def parse_limit(value: int) -> int:
    """``--limit``: an integer from 1 to the most hits a search returns (1000)."""
    from stargraph_mem.model.limits import SEARCH_HITS_MAX

    if not 1 <= value <= SEARCH_HITS_MAX:
        raise typer.BadParameter(f"must be an integer from 1 to {SEARCH_HITS_MAX}, got {value}")
    return value


def fact_order(fact: Fact | Listed) -> tuple[str, str, str, str, str, str]:
    """How ``facts`` sorts: user, agent, subject, predicate, object, then id."""
    return (fact.user, fact.agent, fact.subject, fact.predicate, fact.object, fact.id)


@app.command()
def facts(
    db: DbOption = DEFAULT_DB,
    user: Annotated[str | None, typer.Option("--user", help="Only this user.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    subject: Annotated[str | None, typer.Option("--subject", help="Only this subject.")] = None,
    predicate: Annotated[
        str | None, typer.Option("--predicate", help="Only this predicate.")
    ] = None,
    min_confidence: Annotated[
        float | None,
        typer.Option(
            "--min-confidence",
            callback=parse_confidence,
            metavar="0..1",
            help="Only facts with at least this confidence (a number from 0 to 1).",
        ),
    ] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="What was believed at this ISO-8601 time.")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--search",
            metavar="WORDS",
            help="Rank current facts by these words (any of them, in subject, predicate, "
            "object or payload; case and accents ignored), best first, with a SCORE column.",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            metavar="1..1000",
            callback=parse_limit,
            help="With --search: at most this many facts.",
        ),
    ] = 10,
    touch: Annotated[
        bool,
        typer.Option(
            "--touch",
            help="With --search: count an access to each fact shown, as an agent's search "
            "does (by default this command reads without a trace).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object per line (with --search: {fact, score} per line)."
        ),
    ] = False,
    include_challenged: Annotated[
        bool,
        typer.Option(
            "--include-challenged",
            help="With --search: challenged facts too (left out by default).",
        ),
    ] = False,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Facts with this status instead of the current ones: current (challenged "
            "ones too), active (current, not challenged), challenged, superseded, merged, "
            "deleted, expired, archived, invalidated, or all.",
        ),
    ] = None,
) -> None:
    """List current facts (or those current at --as-of, or those with --status), sorted by
    user, agent, subject, predicate, object and id; or search them with --search."""
    from stargraph_mem.model.statuses import FACT_STATUSES

    when = parse_aware(as_of, "--as-of")
    if search is None and (touch or limit != 10):
        usage_fail("--limit and --touch go with --search")
    if search is not None and when is not None:
        usage_fail("--search finds current facts; it cannot be combined with --as-of")
    if status is not None and (search is not None or when is not None):
        usage_fail("--status cannot be combined with --search or --as-of")
    if status is not None and status not in (*FACT_STATUSES, "active", "all"):
        usage_fail(
            f"--status must be one of {', '.join(FACT_STATUSES)}, active or all, got {status!r}"
        )
    if search is None and include_challenged:
        usage_fail("--include-challenged goes with --search")
    if search is not None:
        from stargraph_mem.model.facts import FactPattern

        search_facts(
            db,
            search,
            FactPattern(
                user=user,
                agent=agent,
                subject=subject,
                predicate=predicate,
                min_confidence=min_confidence,
                limit=limit,
            ),
            touch,
            as_json,
            include_challenged,
        )
        return

    pattern = ListingPattern(
        user=user,
        agent=agent,
        subject=subject,
        predicate=predicate,
        min_confidence=min_confidence,
        status=status,
    )
    found = quick_listing(db, pattern, when)
    if found is None:
        found = stored_listing(db, pattern, when)
    show_listing(sorted(found, key=fact_order), status, as_json)


@dataclass(frozen=True, slots=True)
class ListingPattern:
    """The filters of a listing, as :class:`~stargraph_mem.model.facts.FactPattern` has
    them, without building one (see :func:`quick_listing`)."""

    user: str | None = None
    agent: str | None = None
    subject: str | None = None
    predicate: str | None = None
    min_confidence: float | None = None
    status: str | None = None
    object: str | None = None
    include_history: bool = False
    limit: int | None = None
    layer: str | None = None
    memory_type: str | None = None


def quick_listing(db: str, pattern: ListingPattern, when: datetime | None) -> list[Listed] | None:
    """The facts of a listing read straight from a SQLite file, without the store stack
    or pydantic (:func:`~stargraph_mem.stores.sqlite.listing.list_facts`); ``None`` when
    the store must answer: another backend, a pattern ``FactPattern`` would refuse, or a
    file that opening would change, refuse or find corrupt."""
    from stargraph_mem.errors import StargraphMemError
    from stargraph_mem.model.limits import SCOPE_PART_CHARS
    from stargraph_mem.model.time import to_us
    from stargraph_mem.stores.sqlite.listing import list_facts
    from stargraph_mem.stores.url import parse_database_url

    for part in (pattern.user, pattern.agent):
        if part is not None and not 1 <= len(part) <= SCOPE_PART_CHARS:
            return None  # FactPattern refuses it: the store's way says how
    try:
        url = parse_database_url(db)
        as_of_us = None if when is None else to_us(when, "as_of time")
    except (StargraphMemError, ValueError):
        return None
    if url.path is None:
        return None
    return list_facts(url.path, pattern, as_of_us=as_of_us)


def stored_listing(db: str, pattern: ListingPattern, when: datetime | None) -> list[Listed]:
    """The facts of a listing as the store's ``query`` (or ``as_of``) returns them, as
    :class:`Listed` rows (the JSON: ``Fact.model_dump_json()``)."""
    from stargraph_mem.model.facts import FactPattern
    from stargraph_mem.stores.sqlite.listing import Listed

    async def action() -> list[Fact]:
        async with opened(db, "facts") as database:
            store = database.facts
            query = FactPattern(
                user=pattern.user,
                agent=pattern.agent,
                subject=pattern.subject,
                predicate=pattern.predicate,
                min_confidence=pattern.min_confidence,
                status=pattern.status,
            )
            if when is not None:
                return await store.as_of(when, query)
            return await store.query(query)

    return [
        Listed(
            f.id,
            f.user,
            f.agent,
            f.subject,
            f.predicate,
            f.object,
            f.payload,
            f.confidence,
            f.status,
            f.model_dump_json(),
        )
        for f in run(action())
    ]


def show_listing(found: list[Listed], status: str | None, as_json: bool) -> None:
    """Print a listing: one JSON object per fact, or a table (with a STATUS column when
    ``--status`` asks for other facts than the active ones, or one is not current)."""
    if as_json:
        for fact in found:
            typer.echo(fact.json)
        return
    head = ["ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "OBJECT"]
    shown = status not in (None, "active") or any(f.status != "current" for f in found)
    rows: list[list[str]] = [[*head[:-1], "STATUS", "OBJECT"] if shown else head]
    for f in found:
        what = object_column(f)
        row = [f.id, f.user, f.agent, f.subject, f.predicate, f"{f.confidence:g}", what]
        rows.append([*row[:-1], f.status, what] if shown else row)
    typer.echo("\n".join(aligned(rows)))


def object_column(fact: Fact | Listed) -> str:
    """A table's OBJECT cell: the object, or a payload-only fact's payload as JSON."""
    if fact.has_triple:
        return fact.object
    return orjson.dumps(fact.payload).decode()


def search_facts(
    db: str,
    query: str,
    pattern: FactPattern,
    touch: bool,
    as_json: bool,
    include_challenged: bool,
) -> None:
    """``facts --search``: ranked hits (``pattern``: the filters and the limit) as a table
    (with SCORE) or JSON lines."""

    async def action() -> list[FactHit]:
        async with opened(db, "facts") as database:
            return await database.facts.search(
                query,
                user=pattern.user,
                agent=pattern.agent,
                subject=pattern.subject,
                predicate=pattern.predicate,
                min_confidence=pattern.min_confidence,
                limit=pattern.limit or 10,
                touch=touch,
                include_challenged=include_challenged,
            )

    hits = run(action())
    if as_json:
        for hit in hits:
            typer.echo(hit.model_dump_json())
        return
    rows = [("ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "SCORE", "OBJECT")]
    rows += [
        (
            h.fact.id,
            h.fact.user,
            h.fact.agent,
            h.fact.subject,
            h.fact.predicate,
            f"{h.fact.confidence:g}",
            f"{h.score:.3f}",
            object_column(h.fact),
        )
        for h in hits
    ]
    typer.echo("\n".join(aligned(rows)))


@app.command()
def explain(
    fact_id: Annotated[str, typer.Argument(help="Fact id (from `facts`).")],
    db: DbOption = DEFAULT_DB,
    as_json: Annotated[
        bool, typer.Option("--json", help="The whole explanation as one JSON document.")
    ] = False,
) -> None:
    """Why a fact exists: rule, bindings, source episodes, what it replaced and what followed."""
    from stargraph_mem.authoring.trace import explanation_lines

    async def action() -> Explanation:
        async with opened(db, "facts") as database:
            return await database.facts.explain(fact_id)

    why = run(action())
    if as_json:
        echo_json(why.model_dump(mode="json"))
        return
    echo_lines(explanation_lines(why))


FactIdArg = Annotated[str, typer.Argument(help="Fact id (from `facts`).")]
ReasonOption = Annotated[
    str, typer.Option("--reason", help="Why, kept in the fact's status history.")
]


def fact_write(db: str, call: Callable[[FactRepository], Awaitable[T]]) -> T:
    """Run one fact-store call on the existing database at ``db``."""

    async def action() -> T:
        async with opened(db, "facts") as database:
            return await call(database.facts)

    return run(action())


@app.command()
def pin(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, reason: ReasonOption = "") -> None:
    """Pin a current fact: sweeps leave pinned facts alone (unless a rule tests pinned);
    the pin carries to the facts that replace it."""
    changed = fact_write(db, lambda store: store.pin(fact_id, reason=reason))
    typer.echo(f"pinned {fact_id}" if changed else f"{fact_id} is already pinned")


@app.command()
def unpin(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, reason: ReasonOption = "") -> None:
    """Take the pin off a current fact."""
    changed = fact_write(db, lambda store: store.unpin(fact_id, reason=reason))
    typer.echo(f"unpinned {fact_id}" if changed else f"{fact_id} is not pinned")


@app.command()
def restore(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, reason: ReasonOption = "") -> None:
    """Make an archived fact current again: a new fact with the same statement, payload
    and confidence, whose predecessor is the archived one (which stays archived)."""
    fact = fact_write(db, lambda store: store.restore(fact_id, reason=reason))
    typer.echo(f"restored {fact_id} as {fact.id}")


@app.command()
def history(
    fact_id: FactIdArg,
    db: DbOption = DEFAULT_DB,
    as_json: JsonOption = False,
    spec: Annotated[
        bool,
        typer.Option(
            "--spec",
            help="Only its status changes, as specification 004 writes them: "
            "{old, new, reason, changed_at} (active for current).",
        ),
    ] = False,
) -> None:
    """A fact's status history, oldest first: created, pinned, unpinned, challenged,
    cleared (current), its closing status (superseded, merged, deleted, expired, archived,
    invalidated), restored."""
    from stargraph_mem.authoring.trace import status_change_text, status_event_text

    if spec:
        changes = fact_write(db, lambda store: store.status_history(fact_id, shape="spec"))
        if as_json:
            echo_json([change.model_dump(mode="json") for change in changes])
            return
        echo_lines([status_change_text(change) for change in changes])
        return
    events = fact_write(db, lambda store: store.status_history(fact_id))
    if as_json:
        echo_json([event.model_dump(mode="json") for event in events])
        return
    echo_lines([status_event_text(event) for event in events])


@app.command("update-status")
def update_status(
    fact_id: FactIdArg,
    status: Annotated[
        str,
        typer.Argument(
            help="The new status: active (clears a challenge), challenged, merged, "
            "superseded, invalidated, deleted, expired or archived.",
            show_default=False,
        ),
    ],
    db: DbOption = DEFAULT_DB,
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            help="Why, kept in the fact's status history (required for challenged and "
            "invalidated).",
        ),
    ] = "",
    merged_into: Annotated[
        str | None,
        typer.Option(
            "--merged-into",
            "--superseded-by",
            metavar="FACT_ID",
            help="With merged: the current fact (same user and agent) it was merged into; "
            "with superseded: the current fact, not older, that replaces it.",
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="When (ISO 8601 with a UTC offset; default now)."),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Refuse unless the fact is this user's.")
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Refuse unless the fact is this agent's.")
    ] = None,
) -> None:
    """Change a fact's status (specification 004's update_status): challenged flags a
    current fact (still current, left out of search and recall), active clears the flag,
    the others close it. Audited and kept in its status history."""
    from stargraph_mem.model.lifecycle import spec_status

    when = parse_aware(at, "--at")
    if (status in ("merged", "superseded")) != (merged_into is not None):  # by its CLI name
        usage_fail(
            "--merged-into (or --superseded-by) names the fact it was merged into, or that "
            "replaces it: it goes with status merged or superseded, and only with them"
        )
    before = fact_write(db, lambda store: store.get(fact_id))
    after = fact_write(
        db,
        lambda store: store.update_status(
            fact_id, status, reason=reason, merged_into=merged_into, at=when, user=user, agent=agent
        ),
    )
    old, new = spec_status(before.status), spec_status(after.status)
    into = {"merged": " into ", "superseded": " by "}.get(after.status, "")
    into = f"{into}{after.superseded_by}" if into else ""
    typer.echo(f"{fact_id}: {old} -> {new}{into}")
