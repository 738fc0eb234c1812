"""Rule-pack authoring commands (``new``, ``test``), and the trace and coverage that
``consolidate --trace/--coverage`` print."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stargraph_mem.cli.base import (
    PackArg,
    aligned,
    app,
    echo_json,
    echo_lines,
    fail,
    known_errors,
    printable,
    run,
)

if TYPE_CHECKING:
    from stargraph_mem.authoring.coverage import Coverage
    from stargraph_mem.authoring.packtest import TestRun
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.engine.passes.report import PassReport


def coverage_lines(coverage: Coverage, minimum: float | None = None) -> list[str]:
    """The per-rule table, then the summary line."""
    return [*aligned(coverage.rows()), coverage.summary(minimum)]


@app.command(name="new")
def new_cmd(
    pack: Annotated[
        Path,
        typer.Argument(
            help="The pack to create: PACK.yaml (its name is the file name) and its "
            "tests in tests/PACK.yaml beside it.",
            dir_okay=False,
        ),
    ],
) -> None:
    """Start a rule pack: PACK.yaml with one example rule and tests/PACK.yaml with a case
    for it. Both pass `validate`, `lint` and `test --coverage` as written and name their
    JSON Schema for editors (yaml-language-server). Existing files are never overwritten.

    Example: `stargraph-mem new rules/my_pack` writes rules/my_pack.yaml and
    rules/tests/my_pack.yaml.
    """
    from stargraph_mem.authoring.scaffold import new_pack

    with known_errors():
        written = new_pack(pack)
    for path in written:
        typer.echo(f"wrote {printable(str(path))}")


@app.command(name="test")
def test_pack(
    pack: PackArg,
    tests: Annotated[
        list[Path] | None,
        typer.Argument(help="Test files (default: tests/<pack file name> beside the pack)."),
    ] = None,
    coverage: Annotated[
        bool,
        typer.Option(
            "--coverage",
            help="Report rule coverage; fail under the file's minimum (not checked with -k).",
        ),
    ] = False,
    trace: Annotated[
        bool, typer.Option("--trace", help="Show each delta's rule, bindings and sources.")
    ] = False,
    keyword: Annotated[
        str | None,
        typer.Option(
            "-k",
            "--keyword",
            metavar="TEXT",
            help="Run only the cases whose name contains TEXT (any case, as pytest -k).",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the results as one JSON document (cases, mismatches, totals, coverage).",
        ),
    ] = False,
    postgres: Annotated[
        str | None,
        typer.Option(
            "--postgres",
            metavar="URL",
            help="Run each case in a fresh schema of this PostgreSQL database (a "
            "postgresql:// URL without schema=), dropped after the case; default: a "
            "temporary SQLite file per case.",
        ),
    ] = None,
) -> None:
    """Run a pack's tests: PASS/FAIL per case, a diff for each failure; exit 1 on failure
    (and when -k selects no case). --json prints the same results as one JSON document.
    --postgres runs the cases on a PostgreSQL server instead of SQLite files."""
    from stargraph_mem.authoring.packtest import check_postgres_url, default_tests_path, run_tests
    from stargraph_mem.compiler.pack import compile_file

    paths = tests or [default_tests_path(pack)]
    with known_errors():
        compiled = compile_file(pack)
        if postgres is not None:
            check_postgres_url(postgres)
    for path in paths:
        if not path.exists():
            fail(f"{path}: no such pack test file")
    result: TestRun = run(
        run_tests(compiled, paths, trace=trace, keyword=keyword, postgres=postgres)
    )
    if keyword is not None and result.selected == 0:
        names = ", ".join(str(p) for p in paths)
        fail(f"-k {keyword!r} selects none of the {result.deselected} cases in {names}")
    if as_json:
        echo_json(result.document(coverage=coverage, trace=trace))
    else:
        echo_results(result, coverage=coverage, trace=trace)
    if result.failed or (coverage and not result.coverage_ok):
        raise typer.Exit(1)


def echo_results(result: TestRun, *, coverage: bool, trace: bool) -> None:
    """PASS/FAIL lines, a summary per file, then the coverage table when asked for."""
    from stargraph_mem.authoring.packtest import case_lines, file_summary

    for file in result.files:
        for case in file.cases:
            echo_lines(case_lines(case, trace=trace))
        echo_lines([file_summary(file, result.pack.name)])
    if not coverage:
        return
    minimum = result.minimum if result.coverage_checked else None
    echo_lines(coverage_lines(result.coverage, minimum))
    if not result.coverage_ok:
        typer.echo(f"FAIL  coverage below the minimum {result.minimum:.0%}")


@dataclass
class Extras:
    """What ``consolidate --trace`` / ``--coverage`` print: trace lines per pass, coverage
    (the table's lines, and per pack the figures, for ``--json``)."""

    traces: list[list[str]]
    coverage: list[str]
    coverages: list[Coverage]


def coverage_document(coverage: Coverage) -> dict[str, Any]:
    """One pack's coverage as JSON-ready data (as in ``test --json``, without a minimum)."""
    return {
        "pack": coverage.pack,
        "rules": [
            {"rule": r.rule_id, "activations": r.activations, "status": r.status}
            for r in coverage.rules
        ],
        "fired": coverage.fired,
        "counted": coverage.counted,
        "ratio": coverage.ratio,
    }


async def extras(
    mem: Consolidator, reports: list[PassReport], trace: bool, coverage: bool
) -> Extras:
    """Trace lines for every pass (empty lists without ``trace``) and the coverage table."""
    from stargraph_mem.authoring.coverage import reports_coverage
    from stargraph_mem.authoring.trace import pass_traces, trace_lines

    traces = [
        [line for t in await pass_traces(mem, r) for line in trace_lines(t)] if trace else []
        for r in reports
    ]
    packs = [c.pack for c in mem.packs]
    found = reports_coverage(packs, reports) if coverage else []
    table = [line for c in found for line in coverage_lines(c)]
    return Extras(traces, table, found)
