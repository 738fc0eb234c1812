"""Review commands for pack changes (``replay``, ``lint``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stargraph_mem.cli.base import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    aligned,
    app,
    echo_json,
    echo_lines,
    existing,
    issue_document,
    known_errors,
    parse_aware,
    printable,
    progress_bar,
    run,
)
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES

if TYPE_CHECKING:
    from stargraph_mem.authoring.lint import LintReport, LintWarning
    from stargraph_mem.authoring.replay import FactChange, ReplayResult

# --- replay -------------------------------------------------------------------------------


def _confidence(change: FactChange) -> str:
    before, after = change.before, change.after
    if before is not None and after is not None and before.confidence != after.confidence:
        return f"{before.confidence:g} -> {after.confidence:g}"
    side = after or before
    assert side is not None
    return f"{side.confidence:g}"


def _object(change: FactChange) -> str:
    before, after = change.before, change.after
    if before is not None and after is not None and before.object != after.object:
        return f"{printable(before.object)} -> {printable(after.object)}"
    side = after or before
    assert side is not None
    return side.object


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _times(result: ReplayResult) -> str:
    """When the replay's passes ran, for the header."""
    times = result.times
    if times is None or times.mode == "now":
        return f"now {result.now.isoformat()}"
    if times.mode == "recorded":
        return f"at the {_count(times.count(), 'pass time')} the database recorded"
    return (
        f"at {_count(times.count(), 'fire time')} of {printable(times.cadence or '')} "
        f"up to {result.now.isoformat()}"
    )


def replay_lines(result: ReplayResult) -> list[str]:
    """A header, the differences as aligned columns (when any) and a summary line."""
    packs = ", ".join(f"{printable(p.name)} {printable(p.pack.version)}" for p in result.packs)
    header = (
        f"replayed {_count(result.episodes, 'episode')} "
        f"({_count(result.partitions, 'partition')}) of {printable(str(result.db))} "
        f"with {packs}, {_times(result)}"
    )
    if result.as_of is not None:
        header += f", as of {result.as_of.isoformat()}"
    lines = [header]
    if result.changes:
        rows = [("CHANGE", "USER", "AGENT", "SUBJECT", "PREDICATE", "OBJECT", "CONFIDENCE", "RULE")]
        rows += [
            (
                c.change,
                c.user,
                c.agent,
                c.subject,
                c.predicate,
                _object(c),
                _confidence(c),
                c.rule,
            )
            for c in result.changes
        ]
        lines += aligned(rows)
    n = result.counts()
    lines.append(
        f"{n['appear']} would appear, {n['disappear']} would disappear, "
        f"{n['change']} would change, {n['unchanged']} unchanged"
    )
    return lines


@app.command()
def replay(
    packs: Annotated[
        list[Path],
        typer.Option("--pack", help="Rule pack YAML to replay with (repeatable).", dir_okay=False),
    ],
    db: DbOption = DEFAULT_DB,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help="Replay episodes up to this ISO-8601 time; compare with the facts current then.",
        ),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="Replay in one pass at this ISO-8601 time (with --cadence: the last time "
            "to fire at; default: --as-of, or now).",
        ),
    ] = None,
    cadence: Annotated[
        str | None,
        typer.Option(
            "--cadence",
            help="Replay with one pass at each fire time of this cron expression (UTC) or "
            "'nightly' (0 3 * * *), from the first episode to --now.",
        ),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    max_episodes: Annotated[
        int, typer.Option("--max-episodes", min=1, help="Episodes per consolidation pass.")
    ] = DEFAULT_MAX_EPISODES,
    scratch: Annotated[
        Path | None,
        typer.Option(
            "--scratch", help="Keep the rebuilt database at this new path.", dir_okay=False
        ),
    ] = None,
    as_json: JsonOption = False,
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit 1 when there are differences (as git diff).")
    ] = False,
) -> None:
    """Rebuild facts from the episode log under --pack in a scratch database and diff them
    against the current facts (the database is only read).

    Pass times: by default the passes run at the pass times the database recorded (every
    applied consolidation pass records its time and how far it had read), partition by
    partition, each seeing only the episodes stored before the real pass read; a pack
    name with no recorded times there uses the times of all packs. A database with no
    recorded pass time is replayed in one pass at --as-of, else now. --now T replays in
    one pass at T; --cadence C at each fire time of C from the first episode to --now.
    Every pass consumes only episodes stamped at or before its time. --json reports the
    choice under "times": {"mode": "recorded"|"now"|"cadence", "cadence", "pass_times"}.
    """
    from stargraph_mem.authoring.replay import replay as replay_facts
    from stargraph_mem.compiler.pack import compile_file

    when_as_of = parse_aware(as_of, "--as-of")
    when_now = parse_aware(now, "--now")
    with known_errors():
        compiled = [compile_file(p) for p in packs]
    with progress_bar() as progress:
        result = run(
            replay_facts(
                existing(db),
                compiled,
                now=when_now,
                as_of=when_as_of,
                user=user,
                agent=agent,
                max_episodes=max_episodes,
                scratch=scratch,
                progress=progress,
                cadence=cadence,
            )
        )
    if as_json:
        echo_json(result.document())
    else:
        typer.echo("\n".join(replay_lines(result)))
    if exit_code and result.changes:
        raise typer.Exit(1)


# --- lint ---------------------------------------------------------------------------------


def _warning_document(warning: LintWarning) -> dict[str, Any]:
    return {"check": warning.check, **issue_document(warning.issue)}


def lint_document(report: LintReport, *, strict: bool) -> dict[str, Any]:
    """One pack's lint report as JSON-ready data (``ok`` as the exit code sees it)."""
    return {
        "file": report.file,
        "ok": not report.errors and not (strict and report.warnings),
        "errors": [issue_document(issue) for issue in report.errors],
        "warnings": [_warning_document(w) for w in report.warnings],
        "suppressed": [_warning_document(w) for w in report.suppressed],
    }


@app.command()
def lint(
    packs: Annotated[list[Path], typer.Argument(help="Rule pack YAML files.", dir_okay=False)],
    strict: Annotated[
        bool, typer.Option("--strict", help="Report warnings as errors (exit 1).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Warn about shadowed rules, select clauses that never match and rules that fight over
    the same facts on different cadences; exit 1 on invalid packs (and on warnings with
    --strict). A rule silences a check with a reason: lint: {ignore: {CHECK: "why"}}.
    --json prints {"ok", "strict", "packs": [{"file", "ok", "errors", "warnings",
    "suppressed"}]}."""
    from stargraph_mem.authoring.lint import lint_file

    reports = [lint_file(pack) for pack in packs]
    documents = [lint_document(report, strict=strict) for report in reports]
    failed = not all(doc["ok"] for doc in documents)
    if as_json:
        echo_json({"ok": not failed, "strict": strict, "packs": documents})
    else:
        for pack, report in zip(packs, reports, strict=True):
            for issue in report.errors:
                echo_lines([issue.format()], err=True)
            for warning in report.warnings:
                echo_lines([warning.format(strict=strict)])
            if not report.errors and not report.warnings:
                typer.echo(f"ok: {printable(str(pack))}{_silenced(len(report.suppressed))}")
    if failed:
        raise typer.Exit(1)


def _silenced(count: int) -> str:
    """`` (2 warnings silenced)`` after an ``ok:`` line; nothing when none were."""
    if not count:
        return ""
    return f" ({count} warning{'s' if count > 1 else ''} silenced)"
