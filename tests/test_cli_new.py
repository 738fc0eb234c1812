"""``stargraph-mem new``: the scaffold passes validate, lint and test; nothing is overwritten;
the README's example runs verbatim."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from stargraph_mem.authoring.schemas import schema_path
from stargraph_mem.cli import app
from stargraph_mem.ir.loader import parse_yaml

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def invoke(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def test_new_writes_a_pack_that_validates_lints_and_tests(tmp_path: Path) -> None:
    pack = tmp_path / "rules" / "my_pack.yaml"
    tests = tmp_path / "rules" / "tests" / "my_pack.yaml"
    code, out, err = invoke("new", tmp_path / "rules" / "my_pack")
    assert (code, out, err) == (0, f"wrote {pack}\nwrote {tests}\n", "")
    assert invoke("validate", pack) == (0, f"ok: {pack}\n", "")
    assert invoke("lint", "--strict", pack) == (0, f"ok: {pack}\n", "")
    code, out, err = invoke("test", pack, "--coverage")
    assert (code, err) == (0, "")
    assert out.endswith("coverage my_pack: 1 of 1 rules fired (100%), minimum 100%\n")


def test_new_files_name_their_schema_and_match_it(tmp_path: Path) -> None:
    code, _, _ = invoke("new", tmp_path / "p.yaml")
    assert code == 0
    for path, kind in ((tmp_path / "p.yaml", "pack"), (tmp_path / "tests" / "p.yaml", "tests")):
        text = path.read_text(encoding="utf-8")
        first = text.splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema=")
        target = (path.parent / first.split("=", 1)[1]).resolve()
        assert target == schema_path(kind).resolve()
        schema = json.loads(target.read_text(encoding="utf-8"))
        data = parse_yaml(text, str(path)).data
        if kind == "tests":
            data["now"] = data["now"].isoformat()
        assert list(Draft202012Validator(schema).iter_errors(data)) == []


def test_new_never_overwrites(tmp_path: Path) -> None:
    pack = tmp_path / "p.yaml"
    pack.write_text("mine\n", encoding="utf-8")
    code, out, err = invoke("new", tmp_path / "p")
    assert (code, out, err) == (1, "", f"error: {pack}: already exists (not overwritten)\n")
    assert pack.read_text(encoding="utf-8") == "mine\n"
    assert not (tmp_path / "tests").exists()

    other = tmp_path / "q.yaml"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "q.yaml").write_text("theirs\n", encoding="utf-8")
    code, out, err = invoke("new", other)
    assert (code, out) == (1, "")
    assert err == f"error: {tmp_path / 'tests' / 'q.yaml'}: already exists (not overwritten)\n"
    assert not other.exists()


@pytest.mark.parametrize("name", ["My-Pack", "9lives", "_x"])
def test_new_refuses_a_name_that_is_not_a_pack_name(name: str, tmp_path: Path) -> None:
    code, out, err = invoke("new", tmp_path / name)
    assert (code, out) == (1, "")
    assert err == (
        f"error: invalid pack name '{name}': use lower-case letters, digits and '_' "
        "(starting with a letter), at most 63 characters\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_new_help() -> None:
    code, out, _ = invoke("new", "--help")
    assert code == 0
    assert "Start a rule pack" in out
    assert "never overwritten" in out


def readme_session() -> list[tuple[str, str]]:
    """The README's ``$ stargraph-mem new my_pack`` block: (command, expected output)."""
    text = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    block = re.search(r"```\n(\$ stargraph-mem new my_pack\n.*?)```", text, re.DOTALL)
    assert block is not None
    steps: list[tuple[str, str]] = []
    for chunk in block.group(1).split("$ ")[1:]:
        command, _, output = chunk.partition("\n")
        steps.append((command, output))
    return steps


def test_readme_new_example_runs_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    steps = readme_session()
    assert len(steps) >= 4
    for command, expected in steps:
        argv = shlex.split(command)
        assert argv[0] == "stargraph-mem"
        code, out, err = invoke(*argv[1:])
        assert out + err == expected, command
        assert code == (1 if err else 0), command
