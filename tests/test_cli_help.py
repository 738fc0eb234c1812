"""``--help`` for a terminal: paragraphs reflow to its width, values have readable names,
and every command shows examples that run."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.cli.help import EXAMPLES, reflow

ROOT = Path(__file__).resolve().parents[1]
_GROUP = typer.main.get_command(app)
assert isinstance(_GROUP, typer.core.TyperGroup)
GROUP: typer.core.TyperGroup = _GROUP
COMMANDS = sorted(GROUP.commands)
TYPED = re.compile(
    r"<(str|bool|int|float|file|path|dir|text|list\[[^>]*\]|[a-z]+ range)>|\{[a-z_]+\}"
)
"""typer's type names (``<str>``, ``<list[Path]>``) and its braced argument names."""


def help_at(columns: int, *args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_has_examples() -> None:
    assert set(COMMANDS) <= set(EXAMPLES)
    assert all(EXAMPLES[name] for name in COMMANDS)


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_names_values_readably_and_shows_examples(name: str, columns: int) -> None:
    text = help_at(columns, *([name] if name else []))
    assert TYPED.search(text) is None, TYPED.search(text)
    lines = [line.strip() for line in text.splitlines()]
    assert "Examples:" in lines
    for example in EXAMPLES[name]:
        assert example in lines  # one line each, even at 80 columns


def test_flags_show_no_metavar_and_values_do() -> None:
    cells = [
        line.replace("│", " ").replace("*", " ").split()
        for line in help_at(200, "consolidate").splitlines()
    ]
    rows = {cell[0]: cell[1] for cell in cells if len(cell) > 2 and cell[0].startswith("--")}
    assert rows["--pack"] == "PATH"
    assert rows["--db"] == "PATH|URL"
    assert rows["--user"] == "USER"
    assert rows["--now"] == "TIME"
    assert rows["--worker"] == "auto|always|never"
    assert rows["--dry-run"] == "Print"  # the help text follows the flag directly
    assert rows["--help"] == "Show"
    assert "Usage: stargraph-mem test [OPTIONS] PACK [TESTS...]" in help_at(80, "test")
    assert "Usage: stargraph-mem lint [OPTIONS] PACKS..." in help_at(80, "lint")


def _paragraphs(name: str) -> list[str]:
    command = GROUP.commands[name]
    text = reflow(command.help) or ""
    return [p.replace("\\[", "[") for p in text.split("\n\n") if p]  # rich's escape


def _description(text: str) -> list[list[str]]:
    """The paragraphs printed between the usage line and the first panel, as lines."""
    body = text.split("Usage:", 1)[1].split("\n", 1)[1].split("╭", 1)[0]
    paragraphs: list[list[str]] = [[]]
    for line in body.splitlines():
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("name", COMMANDS)
def test_paragraphs_are_not_broken_by_the_source(name: str) -> None:
    """At 200 columns a paragraph is one line; at 80, each line is filled before the
    next begins (the terminal breaks lines, not the docstring)."""
    wide = [" ".join(lines) for lines in _description(help_at(200, name))]
    expected = [" ".join(p.split()) for p in _paragraphs(name)]
    assert wide == expected
    for paragraph, lines in zip(expected, _description(help_at(200, name)), strict=True):
        if len(paragraph) < 190:
            assert lines == [paragraph]
    for lines in _description(help_at(80, name)):
        for line, after in itertools.pairwise(lines):
            assert len(line) + 1 + len(after.split()[0]) > 78, (line, after)


def test_a_known_sentence_reads_unbroken() -> None:
    wide = help_at(200, "consolidate")
    assert (
        "A pass at time T (--now, default: the current time) consumes only episodes stamped "
        "at or before T, in timestamp order;" in wide
    )
    assert "(exit 1 when any)" in help_at(200, "validate")
    listed = help_at(200)
    assert "print every problem as file:line:col: path: message (exit 1 when any)." in listed


# --- the examples run ---------------------------------------------------------------------

EPISODES = [
    {
        "id": f"j{n}",
        "content": text,
        "user": "bob",
        "session": "s1",
        "agent": "chat",
        "timestamp": f"2026-03-01T0{n}:00:00+00:00",
        "metadata": {"subject": "bob", "predicate": "likes", "object": text},
    }
    for n, text in enumerate(["jazz", "tea"], start=1)
]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory: the shipped packs, the schemas, the operator table's page, an
    episodes file, and memory.db with facts of alice."""
    root = tmp_path_factory.mktemp("template")
    shutil.copytree(ROOT / "rules", root / "rules")
    shutil.copytree(ROOT / "ir_schemas", root / "ir_schemas")
    (root / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "rule-packs.md", root / "docs" / "rule-packs.md")
    lines = [json.dumps(e) for e in EPISODES]
    (root / "episodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = str(root / "memory.db")
    runner = CliRunner()
    for n, obj in enumerate(["tea", "coffee"]):
        meta = ["--meta", "subject=alice", "--meta", "predicate=likes", "--meta", f"object={obj}"]
        scope = ["--user", "alice", "--session", f"s{n}", "--agent", "chat"]
        stamp = ["--timestamp", f"2026-02-0{n + 1}T09:00:00+00:00"]
        done = runner.invoke(app, ["put", "--db", db, *scope, *stamp, *meta, f"likes {obj}"])
        assert done.exit_code == 0, done.output
    done = runner.invoke(
        app,
        ["consolidate", "--db", db, "--pack", "rules/default.yaml", "--now", "2026-03-01T00:00Z"],
    )
    assert done.exit_code == 0, done.output
    return root


def _fact_id(db: Path) -> str:
    done = CliRunner().invoke(app, ["facts", "--db", str(db), "--user", "alice", "--json"])
    return str(json.loads(done.stdout.splitlines()[0])["id"])


PARSE_ONLY = {
    "stargraph-mem mcp --pack rules/default.yaml --db memory.db": "serves until stdin closes",
    "stargraph-mem run --pack rules/default.yaml": "runs until stopped",
    "stargraph-mem run --pack rules/default.yaml --metrics-port 9464": "runs until stopped",
    'stargraph-mem restore FACT_ID --reason "archived too early"': "needs an archived fact",
}
"""Examples that are parsed but not run (why)."""


def _parses(args: list[str]) -> None:
    """The command line parses (options, arguments, their types) without running."""
    command = GROUP.commands[args[0]]
    parent = GROUP.make_context("stargraph-mem", [], resilient_parsing=True)
    with command.make_context(args[0], args[1:], parent=parent):
        pass


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_examples_run(
    name: str, template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example of a command, in order, in a copy of the template directory with
    ``$STARGRAPH_MEM_DB`` on its memory.db; ``FACT_ID`` is a current fact's id."""
    work = tmp_path / "work"
    shutil.copytree(template, work)
    monkeypatch.chdir(work)
    env = {"STARGRAPH_MEM_DB": "memory.db"}
    for example in EXAMPLES[name]:
        args = shlex.split(example.replace("FACT_ID", _fact_id(work / "memory.db")))
        assert args[0] == "stargraph-mem"
        _parses(args[1:])
        if example in PARSE_ONLY:
            continue
        done = CliRunner().invoke(app, args[1:], env=env)
        assert done.exit_code == 0, (example, done.output)
