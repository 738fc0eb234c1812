"""Every example of the documentation (``docs/`` and the README) runs and shows what it
prints: ``python`` blocks run as scripts and are compared with the block after
``prints``; shell blocks of ``$ command`` lines run in a scratch directory and each
command's output is compared; YAML packs and pack tests are validated by the library's
loader; JSON blocks parse. A block that cannot run carries a visible line before it,
``*Not run by the tests: why.*``, and such blocks stay few."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_RUN = "*Not run by the tests:"
SAVED = re.compile(r"Saved as `([\w./-]+)`:$")
MAX_NOT_RUN = 12
COPIED = ["rules", "examples", "ir_schemas", "tests/fixtures"]
PG_EXAMPLE = "postgresql://postgres@127.0.0.1:5432/test?schema=readme_example"
PG_SERVER = "postgresql://postgres@127.0.0.1:5432/test"
"""The test server as shell examples name it; they run on ``$STARGRAPH_TEST_PG``."""


@dataclass
class Block:
    """One fenced block: its page, line, language, text and the prose line before it."""

    page: Path
    line: int
    lang: str
    text: str
    before: str
    output: str | None = None
    kind: str = ""
    saved: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fenced(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with the last prose line before it."""
    blocks: list[Block] = []
    before = ""
    lines = page.read_text(encoding="utf-8").splitlines()
    n = 0
    while n < len(lines):
        line = lines[n]
        if line.startswith("```"):
            start, body = n, []
            n += 1
            while not lines[n].startswith("```"):
                body.append(lines[n])
                n += 1
            text = "\n".join(body) + "\n"
            blocks.append(Block(page, start + 1, line[3:].strip(), text, before))
        elif line.strip():
            before = line.strip()
        n += 1
    return blocks


def classified(page: Path) -> list[Block]:
    """The blocks of ``page`` with their kind: python, shell, yaml, json, output, text,
    not-run, or unknown (a failure); saved files are attached to every shell block."""
    blocks = fenced(page)
    saved: dict[str, str] = {}
    for n, block in enumerate(blocks):
        if block.kind:
            continue
        nxt = blocks[n + 1] if n + 1 < len(blocks) else None
        if block.before.startswith(NOT_RUN):
            block.kind = "not-run"
        elif block.lang == "python":
            block.kind = "python"
            if nxt is not None and nxt.before == "prints" and nxt.lang == "":
                block.output, nxt.kind = nxt.text, "output"
        elif block.lang == "" and block.text.startswith("$ "):
            block.kind = "shell"
        elif block.lang in ("yaml", "json", "text"):
            block.kind = block.lang
        else:
            block.kind = "unknown"
        match = SAVED.search(block.before)
        if match and block.kind == "yaml":
            saved[match.group(1)] = block.text
    for block in blocks:
        block.saved = saved
    return blocks


ALL = [block for page in PAGES for block in classified(page)]


def of_kind(kind: str) -> list[pytest.ParameterSet]:
    """The blocks of one kind as test parameters named by page and line."""
    return [pytest.param(b, id=b.name) for b in ALL if b.kind == kind]


def test_every_block_is_an_example_an_output_or_marked() -> None:
    unknown = [f"{b.name} ({b.lang or 'no language'})" for b in ALL if b.kind == "unknown"]
    assert unknown == []


def test_few_blocks_are_not_run() -> None:
    assert len([b for b in ALL if b.kind == "not-run"]) <= MAX_NOT_RUN


def scratch(tmp_path: Path, block: Block) -> Path:
    """A working directory with the repository's packs, examples, schemas and fixtures,
    and the files the page saves."""
    for name in COPIED:
        shutil.copytree(ROOT / name, tmp_path / name)
    for name, text in block.saved.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def steps(text: str) -> list[tuple[str, str]]:
    """The ``$ command`` / shown output pairs of a shell block (continuation lines and
    here-documents belong to their command)."""
    found: list[tuple[str, str]] = []
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        command = lines[n].removeprefix("$ ")
        while command.endswith("\\"):
            n += 1
            command += "\n" + lines[n]
        heredoc = re.search(r"<<'(\w+)'", command)
        if heredoc:
            while lines[n] != heredoc.group(1):
                n += 1
                command += "\n" + lines[n]
        n += 1
        shown = []
        while n < len(lines) and not lines[n].startswith("$ "):
            shown.append(lines[n] + "\n")
            n += 1
        found.append((command, "".join(shown)))
    return found


def run_command(command: str, cwd: Path) -> tuple[int, str]:
    """Run one shown command: ``stargraph-mem`` in process, anything else in bash."""
    from stargraph_mem.cli import app

    if command.startswith("stargraph-mem "):
        words = shlex.split(command.replace("\\\n", " "))[1:]
        args = [w for word in words for w in (sorted(glob.glob(word)) if "*" in word else [word])]
        result = CliRunner().invoke(app, args, env={"STARGRAPH_MEM_DB": None})
        return result.exit_code, result.output
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("block", of_kind("shell"))
def test_shell_example(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command prints what the page shows; it fails only when the page shows it."""
    monkeypatch.chdir(scratch(tmp_path, block))
    server = os.environ.get("STARGRAPH_TEST_PG", PG_SERVER)
    for command, shown in steps(block.text):
        code, output = run_command(command.replace(PG_SERVER, server), tmp_path)
        assert output == shown, command
        failing = "error:" in shown or "FAIL " in shown
        assert (code != 0) == failing, (command, code)


def fresh_schema(code: str) -> tuple[str, str | None]:
    """``code`` with its PostgreSQL example schema replaced by a new, unique one."""
    if PG_EXAMPLE not in code:
        return code, None
    name = f"docs_{uuid.uuid4().hex[:12]}"
    url = os.environ["STARGRAPH_TEST_PG"]
    return code.replace(PG_EXAMPLE, f"{url}?schema={name}"), name


def drop_schema(name: str) -> None:
    """Drop a schema an example made."""
    import psycopg

    with psycopg.connect(os.environ["STARGRAPH_TEST_PG"], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.mark.parametrize("block", of_kind("python"))
def test_python_example(block: Block, tmp_path: Path) -> None:
    """The script runs from a clone's root and prints what the page shows after it."""
    code, schema = fresh_schema(block.text)
    (scratch(tmp_path, block) / "example.py").write_text(code, encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("STARGRAPH_MEM_DB", None)
    try:
        done = subprocess.run(
            [sys.executable, "example.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    finally:
        if schema is not None:
            drop_schema(schema)
    assert (done.returncode, done.stderr) == (0, "")
    if block.output is not None:
        assert done.stdout == block.output


SNIPPET_PACK = """ir_version: 1
pack: snippet
version: "1"
fields: {subject: string, predicate: string, object: string}
rules:
"""
WHEN_ITEMS = """  - id: snippet
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
%s    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""


def as_pack(text: str) -> str:
    """A YAML block as a whole pack: a pack as it is, a list of rules or of ``when``
    patterns inside a minimal one."""
    if "ir_version:" in text:
        return text
    body = textwrap.dedent(text)
    if body.startswith("- id:"):
        return SNIPPET_PACK + textwrap.indent(body, "  ")
    return SNIPPET_PACK + WHEN_ITEMS % textwrap.indent(body, "      ")


@pytest.mark.parametrize("block", of_kind("yaml"))
def test_yaml_snippet(block: Block, tmp_path: Path) -> None:
    """Pack tests load; packs and pack fragments validate without a problem."""
    from stargraph_mem.authoring.packtest import load_tests_text
    from stargraph_mem.compiler.pack import validate_file

    if re.search(r"^cases:", block.text, re.MULTILINE):
        load_tests_text(block.text, block.name)
        return
    path = tmp_path / "snippet.yaml"
    path.write_text(as_pack(block.text), encoding="utf-8")
    assert [issue.format() for issue in validate_file(path)] == []


@pytest.mark.parametrize("block", of_kind("json"))
def test_json_snippet(block: Block) -> None:
    json.loads(block.text)
