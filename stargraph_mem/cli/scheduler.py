"""Commands of the cadence scheduler (``run``, ``status``)."""

from __future__ import annotations

import contextlib
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stargraph_mem.cli.base import (
    DEFAULT_DB,
    DEFAULT_RECONNECT_SECONDS,
    DbOption,
    FactLimitOption,
    PacksOption,
    ReconnectOption,
    aligned,
    app,
    echo_json,
    existing,
    parse_aware,
    printable,
    reconnecting,
    run,
)
from stargraph_mem.cli.consolidate import exit_if_failed, failure_line, pass_document, report_line
from stargraph_mem.cli.packs import cadence_document, cadence_text
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES, Limits
from stargraph_mem.model.time import utc_now

if TYPE_CHECKING:
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.engine.operations import Backlog
    from stargraph_mem.engine.schedule.scheduler import ConsolidationReport, Due, StatusRow

__all__ = ["run_cmd", "status", "status_document", "tick_document", "tick_lines"]


def tick_lines(report: ConsolidationReport) -> list[str]:
    """One line per applied pass (with the rules that fired), then conflicts."""
    lines = [
        f"{report_line(p)} rules={printable(','.join(p.rules))}" for p in report.passes if p.applied
    ]
    lines += [
        f"skipped {printable(d.pack)}/{printable(d.rule_id)} user={printable(d.partition.user)} "
        f"agent={printable(d.partition.agent)}: applied by another scheduler first"
        for d in report.conflicts
    ]
    lines += [
        f"held {printable(d.pack)}/{printable(d.rule_id)} user={printable(d.partition.user)} "
        f"agent={printable(d.partition.agent)}: another scheduler holds the partition's lease"
        for d in report.held
    ]
    return lines


def _dues(dues: list[Due]) -> list[dict[str, str]]:
    return [
        {"pack": d.pack, "rule": d.rule_id, "user": d.partition.user, "agent": d.partition.agent}
        for d in dues
    ]


def tick_document(report: ConsolidationReport) -> dict[str, Any]:
    """A tick as JSON-ready data: the applied passes, the conflicts and the due pairs left
    to another scheduler's lease, as :func:`tick_lines` shows them (``ran`` and
    ``lease_holder`` stay for compatibility: ticks lease partitions, not the database)."""
    document: dict[str, Any] = {
        "now": report.now.isoformat(),
        "ran": report.ran,
        "lease_holder": report.lease_holder,
        "passes": [pass_document(p) for p in report.passes if p.applied],
        "conflicts": _dues(report.conflicts),
        "held": _dues(report.held),
    }
    if report.failed:  # partitions quarantined for this tick
        document["failed"] = [pass_document(p) for p in report.failed]
    return document


def _emit(report: ConsolidationReport) -> None:
    for line in tick_lines(report):
        typer.echo(line)
    for failed in report.failed:
        typer.echo(failure_line(failed), err=True)


async def _loop(mem: Consolidator, interval: float, backlog: Backlog) -> str:
    """Tick every ``interval`` seconds until SIGINT/SIGTERM.

    The first signal lets the current pass finish, then stops; a second one cancels it,
    which rolls its transaction back.
    """
    import asyncio
    import signal

    from stargraph_mem.engine.operations import observed_tick

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    task = asyncio.current_task()
    outcome = "stopped"

    def on_signal() -> None:
        nonlocal outcome
        if stop.is_set() and task is not None:
            outcome = "interrupted: the pass in progress was rolled back"
            task.cancel()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        holder = printable(mem.scheduler.holder)
        typer.echo(f"scheduler {holder} running (interval {interval:g} s)")
        while not stop.is_set():
            _emit(await observed_tick(mem, backlog))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    except asyncio.CancelledError:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return outcome


class LogFormatChoice(StrEnum):
    """Values of ``run --log-format``."""

    text = "text"
    json = "json"


@app.command(name="run")
def run_cmd(
    packs: PacksOption,
    db: DbOption = DEFAULT_DB,
    once: Annotated[bool, typer.Option("--once", help="Run what is due now, then exit.")] = False,
    now: Annotated[
        str | None,
        typer.Option("--now", help="With --once: the time to run at, ISO-8601 with offset."),
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", min=0.01, help="Seconds between ticks.")
    ] = 1.0,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds",
            min=0.1,
            help="How long a partition stays leased to this worker without a pass applied: "
            "a worker that dies holds its partitions this long (one of this host: until "
            "another worker sees it is gone).",
        ),
    ] = 30.0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="With --once: print the tick as one JSON document (ran, lease_holder, "
            "passes, conflicts).",
        ),
    ] = False,
    reconnect_seconds: ReconnectOption = DEFAULT_RECONNECT_SECONDS,
    max_fact: FactLimitOption = DEFAULT_FACT_BYTES,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            help="Serve the worker's metrics in Prometheus' text format on this port "
            "(http://HOST:PORT/metrics; needs the otel extra).",
        ),
    ] = None,
    log_format: Annotated[
        LogFormatChoice | None,
        typer.Option(
            "--log-format",
            help="Log one line per tick, and warnings, to stderr: as text or as JSON objects.",
        ),
    ] = None,
) -> None:
    """Run the cadence scheduler: every N episodes (or after a time), cron times, idle
    partitions; SIGINT/SIGTERM stop it.

    Any number of these may run on one memory (on PostgreSQL, on any number of machines):
    each leases the due partitions it consolidates, so they share the work and no pass is
    applied twice. When the database server goes away (a restart, a failover), a worker
    waits for it (--reconnect-seconds), says so on stderr and goes on.
    """
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.engine.operations import Observing, observed_tick

    when = parse_aware(now, "--now")
    if when is not None and not once:
        raise typer.BadParameter("--now needs --once", param_hint="--now")
    if as_json and not once:
        raise typer.BadParameter("--json needs --once", param_hint="--json")

    policy, warn = reconnecting(reconnect_seconds)
    limits = Limits(fact_bytes=max_fact)
    watch = Observing.start(log_format and log_format.value, metrics_port)

    def opened() -> Consolidator:
        return Consolidator.open(
            existing(db),
            packs,
            lease_seconds=lease_seconds,
            reconnect=policy,
            on_outage=warn,
            limits=limits,
        )

    async def once_action() -> ConsolidationReport:
        async with opened() as mem:
            return await observed_tick(mem, watch.backlog, when or utc_now())

    async def loop_action() -> str:
        async with opened() as mem:
            return await _loop(mem, interval, watch.backlog)

    try:
        if not once:
            typer.echo(run(loop_action()))
            return
        report = run(once_action())
    finally:
        watch.close()
    if as_json:
        echo_json(tick_document(report))
        exit_if_failed(report)
        return
    _emit(report)
    passes = sum(1 for p in report.passes if p.applied)
    typer.echo(f"{passes} pass{'es' if passes != 1 else ''} run" if passes else "nothing due")
    exit_if_failed(report)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def status_document(rows: list[StatusRow]) -> dict[str, Any]:
    """The status table as JSON-ready data (``user``/``agent`` are ``null`` for a rule with
    no partition yet; ``next_run`` is ``null`` for count cadences, and for ``idle`` and
    ``or_after`` ones while nothing is pending; for a sweep, ``sweep`` is true and
    ``pending`` counts its candidate facts)."""
    return {
        "rules": [
            {
                "pack": row.pack,
                "rule": row.rule_id,
                "cadence": cadence_document(row.cadence),
                "user": row.partition.user if row.partition else None,
                "agent": row.partition.agent if row.partition else None,
                "pending": row.pending,
                "not_yet_due": row.not_yet_due,
                "last_run": _iso(row.last_run),
                "next_run": _iso(row.next_run),
                "due": row.due,
                "sweep": row.sweep,
            }
            for row in rows
        ]
    }


def _pending(row: StatusRow, count: int | None = None) -> str:
    """Pending episodes, or a sweep's candidate facts (``3 facts``)."""
    n = row.pending if count is None else count
    return f"{n} fact{'' if n == 1 else 's'}" if row.sweep else str(n)


def status_lines(rows: list[StatusRow]) -> list[str]:
    """The status table: one row per (pack, rule, partition)."""
    table = [("PACK", "RULE", "CADENCE", "USER", "AGENT", "PENDING", "LAST RUN", "NEXT RUN")]
    for row in rows:
        table.append(
            (
                row.pack,
                row.rule_id,
                cadence_text(row.cadence),
                row.partition.user if row.partition else "-",
                row.partition.agent if row.partition else "-",
                _pending(row),
                _when(row.last_run),
                _upcoming(row),
            )
        )
    return aligned(table)


SUMMARY_ROWS = 20
"""``status`` shows one row per rule instead of one per partition beyond this many rows."""


def status_summary(rows: list[StatusRow]) -> list[str]:
    """One row per (pack, rule): its partitions, how many are due, the pending total (a
    sweep's: candidate facts) and the latest run; then how to see every row."""
    groups: dict[tuple[str, str], list[StatusRow]] = {}
    for row in rows:
        groups.setdefault((row.pack, row.rule_id), []).append(row)
    table = [("PACK", "RULE", "CADENCE", "PARTITIONS", "DUE", "PENDING", "LAST RUN")]
    for (pack, rule), group in groups.items():
        runs = [r.last_run for r in group if r.last_run is not None]
        table.append(
            (
                pack,
                rule,
                cadence_text(group[0].cadence),
                str(sum(1 for r in group if r.partition is not None)),
                str(sum(1 for r in group if r.due)),
                _pending(group[0], sum(r.pending for r in group)),
                _when(max(runs) if runs else None),
            )
        )
    partitions = len({r.partition.key for r in rows if r.partition is not None})
    hint = (
        f"{len(rows)} rows for {partitions} partitions, summed per rule; narrow them with "
        "--user, --agent or --rule, or show every row with --all"
    )
    return [*aligned(table), hint]


def _upcoming(row: StatusRow) -> str:
    """When the rule next runs for the row's partition: ``due``, ``after 3 more`` (or at
    the ``or_after`` time), a time (cron, idle) with `` (due)`` once reached, or ``-``."""
    if row.cadence.every is not None:
        if row.due:
            return "due"
        left = max(0, row.cadence.every - row.pending)
        timer = "" if row.next_run is None else f" or at {_when(row.next_run)}"
        return f"after {left} more{timer}"
    return _when(row.next_run) + (" (due)" if row.due else "")


@app.command()
def status(
    db: DbOption = DEFAULT_DB,
    packs: Annotated[
        list[Path] | None,
        typer.Option(
            "--pack",
            help="Also show this pack (default: the packs schedulers registered).",
            dir_okay=False,
        ),
    ] = None,
    now: Annotated[
        str | None, typer.Option("--now", help="Status as of this ISO-8601 time.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Only the partitions of this user.")
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Only the partitions of this agent.")
    ] = None,
    rules: Annotated[
        list[str] | None,
        typer.Option("--rule", metavar="RULE", help="Only this rule (repeatable)."),
    ] = None,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help=f"One row per rule and partition even beyond {SUMMARY_ROWS} rows (which are "
            "otherwise summed per rule).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help='Print one JSON document: {"rules": [...]} (empty when none).'),
    ] = False,
) -> None:
    """Each rule's cadence, pending episodes, last and next run per partition (idle and
    or_after rules: when the partition is next due by time). A sweep shows its candidate
    facts (e.g. 3 facts), not episodes: it never consumes them.

    Beyond 20 rows the table is summed per rule (partitions, due, pending, last run);
    --user, --agent and --rule narrow it, --all shows every row, --json has every row.
    """
    from stargraph_mem.engine.api import Consolidator

    when = parse_aware(now, "--now")

    async def action() -> list[StatusRow]:
        async with Consolidator.open(
            existing(db), packs or [], clock=lambda: when or utc_now()
        ) as mem:
            return await mem.status(registered=True, user=user, agent=agent, rule_ids=rules)

    rows = run(action())
    if as_json:
        echo_json(status_document(rows))
        return
    if not rows:
        if user is not None or agent is not None or rules:
            typer.echo("no rows match --user, --agent or --rule")
            return
        typer.echo("no scheduled rules: run `stargraph-mem run --pack …` first")
        return
    if len(rows) > SUMMARY_ROWS and not show_all:
        typer.echo("\n".join(status_summary(rows)))
        return
    typer.echo("\n".join(status_lines(rows)))
