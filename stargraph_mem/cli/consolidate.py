"""``consolidate``, and how a pass is reported (one line, or JSON-ready data), which the
scheduler's commands print too."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stargraph_mem.cli.base import (
    DEFAULT_DB,
    DEFAULT_RECONNECT_SECONDS,
    DbOption,
    FactLimitOption,
    Progress,
    ReconnectOption,
    app,
    echo_json,
    echo_lines,
    existing,
    parse_aware,
    printable,
    progress_bar,
    reconnecting,
    run,
)
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES, Limits

if TYPE_CHECKING:
    from stargraph_mem.cli.authoring import Extras
    from stargraph_mem.engine.passes.report import ConsolidationReport, PassReport


def pass_document(report: PassReport) -> dict[str, Any]:
    """One pass as JSON-ready data: what :func:`report_line` and the rejected lines say
    (and ``failed``, the reason, for a partition quarantined for this run)."""
    p = report.partition
    document: dict[str, Any] = {
        "pack": report.pack,
        "pack_hash": report.pack_hash,
        "user": p.user,
        "agent": p.agent,
        "now": report.now.isoformat(),
        "rules": list(report.rules),
        "sweep": report.sweep,
        "episodes": report.episodes,
        "not_yet_due": report.not_yet_due,
        "counts": report.counts,
        "rejected": [
            {"episode_id": r.episode_id, "rule_id": r.rule_id, "reason": r.reason}
            for r in report.rejected
        ],
        "gated": list(report.gated),
        "quarantined": [
            {
                "seq": q.seq,
                "episode_id": q.episode_id,
                "partition_key": q.partition_key,
                "reason": q.reason,
            }
            for q in report.quarantined
        ],
        "applied": report.applied,
    }
    if report.failed is not None:
        document["failed"] = report.failed
    return document


def failure_line(report: PassReport) -> str:
    """``error: <pack> user=… agent=…: pass failed, nothing applied: …`` for a partition
    quarantined for this run."""
    p = report.partition
    return (
        f"error: {printable(report.pack)} user={printable(p.user)} agent={printable(p.agent)}: "
        f"{printable(report.failed or '')}"
    )


def exit_if_failed(report: ConsolidationReport) -> None:
    """Exit with code 1 (after everything else was printed) when a partition was
    quarantined: every other partition was consolidated."""
    failed = len({(r.pack, r.partition) for r in report.failed})
    if failed:
        typer.echo(
            f"error: {failed} partition{'s' if failed > 1 else ''} quarantined for this run "
            "(see above); every other partition was consolidated",
            err=True,
        )
        raise typer.Exit(1)


def report_line(report: PassReport) -> str:
    """One summary line per pass."""
    kinds = " ".join(f"{kind}={n}" for kind, n in report.counts.items())
    p = report.partition
    return (
        f"{printable(report.pack)} user={printable(p.user)} agent={printable(p.agent)} "
        f"episodes={report.episodes} {kinds} "
        f"rejected={len(report.rejected)} gated={len(report.gated)}"
        + (f" quarantined={len(report.quarantined)}" if report.quarantined else "")
        + (f" not_yet_due={report.not_yet_due}" if report.not_yet_due else "")
        + (f" sweep={','.join(report.rules)}" if report.sweep else "")
    )


class WorkerChoice(StrEnum):
    """Values of ``consolidate --worker``."""

    auto = "auto"
    always = "always"
    never = "never"


@app.command()
def consolidate(
    packs: Annotated[
        list[Path], typer.Option("--pack", help="Rule pack YAML (repeatable).", dir_okay=False)
    ],
    db: DbOption = DEFAULT_DB,
    user: Annotated[str | None, typer.Option("--user", help="Only this user.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    now: Annotated[
        str | None, typer.Option("--now", help="Pass time, ISO-8601 with offset (default: now).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the deltas as JSON lines; apply nothing.")
    ] = False,
    trace: Annotated[
        bool, typer.Option("--trace", help="Show each delta's rule, bindings, episodes, facts.")
    ] = False,
    coverage: Annotated[
        bool, typer.Option("--coverage", help="Show how often each rule fired.")
    ] = False,
    worker: Annotated[
        WorkerChoice,
        typer.Option(
            "--worker",
            help="Compute passes in a worker process while this one commits: auto (for a "
            "backlog of several passes), always or never.",
        ),
    ] = WorkerChoice.auto,
    reconnect_seconds: ReconnectOption = DEFAULT_RECONNECT_SECONDS,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON document: the passes (with their deltas under --dry-run, "
            "trace lines under --trace) and the coverage under --coverage.",
        ),
    ] = False,
    max_fact: FactLimitOption = DEFAULT_FACT_BYTES,
) -> None:
    """Consolidate new episodes into facts with the given packs.

    A pass at time T (--now, default: the current time) consumes only episodes stamped at
    or before T, in timestamp order; episodes stamped later stay pending ("not yet due",
    counted in the output and as not_yet_due under --json) and are consumed by the first
    later pass whose time reaches them.

    A progress bar (episodes read by passes) shows on stderr when it is a terminal.

    When the database server goes away mid-run (a restart, a failover), the run waits for
    it (--reconnect-seconds), says so on stderr and goes on; no pass is applied twice.
    """
    from stargraph_mem.cli.authoring import coverage_document, extras
    from stargraph_mem.engine.api import Consolidator

    when = parse_aware(now, "--now")
    policy, warn = reconnecting(reconnect_seconds)

    async def action(
        bar: Progress | None,
    ) -> tuple[ConsolidationReport, Extras]:
        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar("consolidate", done, total)

        async with Consolidator.open(
            existing(db),
            packs,
            keep_deltas=dry_run or trace,
            worker=worker.value,
            reconnect=policy,
            on_outage=warn,
            limits=Limits(fact_bytes=max_fact),
        ) as mem:
            report = await mem.consolidate(
                user=user, agent=agent, now=when, dry_run=dry_run, progress=progress
            )
            return report, await extras(mem, report.passes, trace, coverage)

    with progress_bar() as bar:
        result, extra = run(action(bar))
    reports = result.passes
    if as_json:
        passes = []
        for report, traced in zip(reports, extra.traces, strict=True):
            doc = pass_document(report)
            if dry_run:
                doc["deltas"] = [delta.model_dump(mode="json") for delta in report.deltas]
            if trace:
                doc["trace"] = traced
            passes.append(doc)
        document: dict[str, Any] = {
            "dry_run": dry_run,
            "now": result.now.isoformat(),
            "not_yet_due": result.not_yet_due,
            "passes": passes,
        }
        if coverage:
            document["coverage"] = [coverage_document(c) for c in extra.coverages]
        echo_json(document)
        exit_if_failed(result)
        return
    for report, traced in zip(reports, extra.traces, strict=True):
        if report.failed is not None:
            typer.echo(failure_line(report), err=True)
            continue
        if dry_run:
            for delta in report.deltas:
                typer.echo(delta.model_dump_json())
        for line in traced:
            echo_lines([line], err=dry_run)
        for rejected in report.rejected:
            typer.echo(
                f"rejected {printable(rejected.episode_id or '-')} "
                f"({printable(rejected.rule_id or 'metadata')}): {printable(rejected.reason)}",
                err=True,
            )
        suffix = " (dry run: nothing applied)" if dry_run else ""
        typer.echo(report_line(report) + suffix, err=dry_run)
    for line in extra.coverage:
        echo_lines([line], err=dry_run)
    if result.not_yet_due:
        typer.echo(
            f"not yet due: {result.not_yet_due} episode(s) stamped after "
            f"{result.now.isoformat()} stay pending for a later pass",
            err=dry_run,
        )
    exit_if_failed(result)
