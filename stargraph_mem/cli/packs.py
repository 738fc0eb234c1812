"""Rule-pack commands: ``validate``, ``compile``, ``info``, and ``schema --path`` (where
the installed JSON Schemas are, for an editor)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from stargraph_mem.cli.base import (
    JsonOption,
    PackArg,
    aligned,
    app,
    echo_json,
    echo_lines,
    fail,
    issue_document,
    known_errors,
    printable,
)

if TYPE_CHECKING:
    from stargraph_mem.model.cadence import Cadence


@app.command()
def validate(
    packs: Annotated[list[Path], typer.Argument(help="Rule pack YAML files.", dir_okay=False)],
    as_json: JsonOption = False,
) -> None:
    """Check rule packs; print every problem as file:line:col: path: message (exit 1 when
    any). --json prints {"ok", "packs": [{"file", "ok", "problems": [...]}]} instead."""
    from stargraph_mem.compiler.validation import validate_file

    checked = [(pack, validate_file(pack)) for pack in packs]
    failed = any(issues for _, issues in checked)
    if as_json:
        echo_json(
            {
                "ok": not failed,
                "packs": [
                    {
                        "file": str(pack),
                        "ok": not issues,
                        "problems": [issue_document(issue) for issue in issues],
                    }
                    for pack, issues in checked
                ],
            }
        )
    else:
        for pack, issues in checked:
            for issue in issues:
                echo_lines([issue.format()], err=True)
            if not issues:
                typer.echo(f"ok: {printable(str(pack))}")
    if failed:
        raise typer.Exit(1)


@app.command(name="compile")
def compile_cmd(
    pack: PackArg,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write <pack>.clp and <pack>.manifest.json here."),
    ] = None,
    show: Annotated[bool, typer.Option("--print", help="Print the CLIPS program.")] = False,
) -> None:
    """Compile a rule pack to CLIPS (byte-identical output for identical input)."""
    from stargraph_mem.compiler.pack import compile_file

    with known_errors():
        compiled = compile_file(pack)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{compiled.name}.clp").write_text(compiled.clips, encoding="utf-8")
            manifest = orjson.dumps(
                compiled.manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
            )
            (out_dir / f"{compiled.name}.manifest.json").write_bytes(manifest + b"\n")
    if show:
        typer.echo(compiled.clips, nl=False)
        return
    typer.echo(
        f"compiled {printable(compiled.name)} {printable(compiled.pack.version)}: "
        f"{len(compiled.rules)} rules, sha256 {compiled.sha256}"
    )
    if out_dir is not None:
        typer.echo(f"wrote {printable(str(out_dir / (compiled.name + '.clp')))}")
        typer.echo(f"wrote {printable(str(out_dir / (compiled.name + '.manifest.json')))}")


class SchemaKind(StrEnum):
    """Values of ``schema --path``: what the schema describes."""

    pack = "pack"
    tests = "tests"
    episode = "episode"


@app.command()
def schema(
    path: Annotated[
        SchemaKind,
        typer.Option(
            "--path",
            help="Print where the installed schema of a rule pack, a pack test file or an "
            "episode line is (for an editor's yaml-language-server setting).",
        ),
    ],
) -> None:
    """Print where the installed JSON Schema of rule packs, pack test files or episode lines
    is; the file itself is never written here."""
    from stargraph_mem.authoring.schemas import schema_path

    found = schema_path(path.value)
    if not found.exists():
        fail(f"{found}: schema file not found")
    typer.echo(printable(str(found)))


def cadence_text(cadence: Cadence) -> str:
    """``every 10``, ``every 10 or after 1h``, ``idle 30m`` or ``cron 0 3 * * * (UTC)``."""
    from stargraph_mem.model.cadence import trigger_text

    return trigger_text(cadence) or f"cron {cadence.cron} ({cadence.tz})"


def cadence_document(cadence: Cadence) -> dict[str, Any]:
    """``{"every": 10}``, ``{"every": 10, "or_after": "1h"}``, ``{"idle": "30m"}`` or
    ``{"cron": "0 3 * * *", "tz": "UTC"}``."""
    from stargraph_mem.model.cadence import duration_text

    if cadence.every is not None:
        if cadence.or_after is not None:
            return {"every": cadence.every, "or_after": duration_text(cadence.or_after)}
        return {"every": cadence.every}
    if cadence.idle is not None:
        return {"idle": duration_text(cadence.idle)}
    return {"cron": cadence.cron, "tz": cadence.tz}


@app.command()
def info(pack: PackArg, as_json: JsonOption = False) -> None:
    """Show a pack's rules: priority, cadence, what they emit, whether they claim."""
    from stargraph_mem.compiler.pack import compile_file

    with known_errors():
        compiled = compile_file(pack)
    p = compiled.pack
    if as_json:
        echo_json(
            {
                "pack": p.pack,
                "version": p.version,
                "ir_version": p.ir_version,
                "sha256": compiled.sha256,
                "rules": [
                    {
                        "id": rule.id,
                        "priority": rule.priority,
                        "cadence": cadence_document(rule.cadence or p.defaults.cadence),
                        "emits": rule.emit.kind,
                        "claim": rule.claim,
                        "enabled": rule.enabled,
                    }
                    for rule in p.rules
                ],
            }
        )
        return
    head = f"{printable(p.pack)} {printable(p.version)} (ir_version {p.ir_version})"
    typer.echo(f"{head} sha256 {compiled.sha256}")
    rows = [("RULE", "PRIORITY", "CADENCE", "EMITS", "CLAIM", "ENABLED")]
    for rule in p.rules:
        rows.append(
            (
                rule.id,
                str(rule.priority),
                cadence_text(rule.cadence or p.defaults.cadence),
                rule.emit.kind,
                "yes" if rule.claim else "no",
                "yes" if rule.enabled else "no",
            )
        )
    typer.echo("\n".join(aligned(rows)))
