"""Commands start with what they need: ``--help``, ``facts`` and ``validate`` of an
unchanged pack load neither CLIPS nor numpy (nor, for ``--help`` and ``validate``, pydantic
or the IR); the shortcuts that make this so answer exactly as the long way does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_probe import loaded
from typer._coercion import build_runtime_param
from typer.testing import CliRunner

from stargraph_mem.cli import app, narrowed
from stargraph_mem.cli.values import PlainValue
from stargraph_mem.compiler import build_cache, validation
from stargraph_mem.compiler import pack as pack_module

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "rules" / "default.yaml"


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def test_help_loads_no_clips_numpy_pydantic_or_markdown(cli_env: dict[str, str]) -> None:
    assert loaded(cli_env, "--help") == ("0", set())
    for command in ("facts", "validate", "consolidate", "recall"):
        assert loaded(cli_env, command, "--help") == ("0", set())


def test_facts_loads_no_clips_numpy_engine_or_embedders(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    db = tmp_path / "memory.db"
    db.touch()
    for args in ((), ("--search", "tea"), ("--json", "--user", "alice")):
        code, modules = loaded(cli_env, "facts", "--db", str(db), *args)
        assert code == "0"
        assert modules <= {"pydantic"}  # a new file: the store makes its schema


def test_a_second_validate_loads_only_what_hashing_needs(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(DEFAULT.read_bytes())
    code, first = loaded(cli_env, "validate", str(pack))
    assert code == "0"
    assert {"clips", "croniter", "stargraph_mem.compiler.pack"} <= first
    assert loaded(cli_env, "validate", str(pack)) == ("0", set())
    assert loaded(cli_env, "validate", "--json", str(pack)) == ("0", set())


def test_an_invalid_pack_fails_the_same_every_time(tmp_path: Path, cli_env: dict[str, str]) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text(DEFAULT.read_text(encoding="utf-8").replace("kind: add", "kind: ad", 1))
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "stargraph_mem.cli", "validate", str(pack)],
            env=cli_env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        outputs.append((done.returncode, done.stdout, done.stderr))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == 1
    assert "kind" in outputs[0][2]


# --- the remembered validation --------------------------------------------------------------


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The pack files the whole validation ran on during the test."""
    ran: list[Path] = []
    real = pack_module.validate_file

    def counting(path: str | Path, **kwargs: Any) -> Any:
        ran.append(Path(path))
        return real(path, **kwargs)

    monkeypatch.setattr(pack_module, "validate_file", counting)
    return ran


def test_an_unchanged_valid_pack_is_validated_once(tmp_path: Path, validations: list[Path]) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(DEFAULT.read_bytes())
    assert validation.validate_file(pack, tmp_path / "cache") == []
    assert validation.validate_file(pack, tmp_path / "cache") == []
    assert validations == [pack]
    pack.write_bytes(DEFAULT.read_bytes().replace(b"confidence: 0.8", b"confidence: 0.7", 1))
    assert validation.validate_file(pack, tmp_path / "cache") == []
    assert validations == [pack, pack]  # a changed file: validated again
    moved = tmp_path / "moved.yaml"
    moved.write_bytes(pack.read_bytes())
    assert validation.validate_file(moved, tmp_path / "cache") == []
    assert validations == [pack, pack, moved]  # the key holds the file's path


def test_an_invalid_pack_is_never_remembered(tmp_path: Path, validations: list[Path]) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text(DEFAULT.read_text(encoding="utf-8").replace("kind: add", "kind: ad", 1))
    first = validation.validate_file(pack, tmp_path / "cache")
    assert first
    assert [i.format() for i in validation.validate_file(pack, tmp_path / "cache")] == [
        i.format() for i in first
    ]
    assert len(validations) == 2
    assert not (tmp_path / "cache" / "valid").exists()
    assert validation.validate_file(tmp_path / "missing.yaml", tmp_path / "cache")


def test_other_code_is_a_miss(
    tmp_path: Path, validations: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(DEFAULT.read_bytes())
    assert validation.validate_file(pack, tmp_path / "cache") == []
    monkeypatch.setattr(build_cache, "code_identity", lambda: "another version")
    assert validation.validate_file(pack, tmp_path / "cache") == []
    assert len(validations) == 2


def test_a_pack_changed_while_validated_is_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(DEFAULT.read_bytes())
    real = pack_module.validate_file

    def editing(path: str | Path, **kwargs: Any) -> Any:
        found = real(path, **kwargs)
        pack.write_text(DEFAULT.read_text(encoding="utf-8").replace("kind: add", "kind: ad", 1))
        return found

    monkeypatch.setattr(pack_module, "validate_file", editing)
    assert validation.validate_file(pack, tmp_path / "cache") == []
    monkeypatch.setattr(pack_module, "validate_file", real)
    assert validation.validate_file(pack, tmp_path / "cache")  # the edit is seen


def test_the_default_cadence_is_the_validated_one() -> None:
    from stargraph_mem.model.cadence import SLEEP_CYCLE, Cadence

    validated = Cadence(cron="0 3 * * *")
    assert validated == SLEEP_CYCLE
    assert SLEEP_CYCLE.model_fields_set == validated.model_fields_set
    assert SLEEP_CYCLE.model_dump() == validated.model_dump()


def test_the_code_identity_follows_the_package_files(tmp_path: Path) -> None:
    module = tmp_path / "pkg" / "mod.py"
    module.parent.mkdir()
    module.write_text("x = 1\n")
    before = build_cache._tree_files(tmp_path / "pkg")
    assert str(module) in before
    os.utime(module, ns=(1, 2))
    assert build_cache._tree_files(tmp_path / "pkg") != before
    assert build_cache.code_identity() == build_cache.code_identity()
    assert str(Path(pack_module.__file__)) in build_cache.code_identity()


# --- values without pydantic ------------------------------------------------------------------


def _params() -> dict[tuple[str, str], Any]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return {
        (name, param.name): param
        for name, command in group.commands.items()
        for param in command.params
    }


PARAMS = _params()
CASES = [
    ("facts", "db", "memory.db"),
    ("facts", "limit", "7"),
    ("facts", "limit", 10),
    ("facts", "limit", "+7"),
    ("facts", "limit", "007"),
    ("facts", "min_confidence", "0.5"),
    ("facts", "min_confidence", "1e-1"),
    ("facts", "min_confidence", ".5"),
    ("facts", "min_confidence", "inf"),  # typer's own (the command refuses it)
    ("put", "max_content", "100"),
    ("put", "max_content", 100),
    ("put", "meta", ("a=1", "b=2")),
    ("recent", "limit", "3"),
    ("consolidate", "reconnect_seconds", 60.0),
    ("consolidate", "reconnect_seconds", "2"),
    ("run", "metrics_port", "9464"),
    ("validate", "packs", ("rules/default.yaml", "missing.yaml")),
    ("ingest", "rejects", "rejects.jsonl"),
    ("compile", "out_dir", "out"),
]
REFUSED = [
    ("recent", "limit", "0"),
    ("recent", "limit", "x"),
    ("facts", "limit", "1.5"),
    ("put", "max_content", "999999999999"),
    ("run", "metrics_port", "70000"),
    ("consolidate", "reconnect_seconds", "-1"),
    ("validate", "packs", ("rules",)),
]


def coercions(command: str, name: str, value: Any) -> tuple[Any, Any]:
    """Calls coercing ``value`` for the parameter ``name`` of ``command``: ours, and
    typer's own (its pydantic adapter)."""
    param = PARAMS[(command, name)]
    assert isinstance(param._runtime_param, PlainValue)
    ctx = typer.Context(typer.main.get_command(app))

    def ours() -> Any:
        return param._runtime_param.coerce(value, param=param, ctx=ctx)

    def theirs() -> Any:
        return build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx)

    return ours, theirs


@pytest.mark.parametrize(("command", "name", "value"), CASES)
def test_plain_values_are_what_typer_makes_of_them(
    command: str, name: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    ours, theirs = (coerce() for coerce in coercions(command, name, value))
    assert ours == theirs
    assert type(ours) is type(theirs)


@pytest.mark.parametrize(("command", "name", "value"), REFUSED)
def test_refused_values_get_typers_own_message(
    command: str, name: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    messages = []
    for coerce in coercions(command, name, value):
        with pytest.raises(typer.BadParameter) as refused:
            coerce()
        messages.append(refused.value.format_message())
    assert messages[0] == messages[1]


# --- one command built alone ------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(typer.main.get_command(app).commands))  # type: ignore[attr-defined]
def test_a_command_built_alone_reads_the_same(command: str) -> None:
    alone = narrowed([command, "--help"])
    assert alone is not app
    assert [info.callback for info in alone.registered_commands] == [
        info.callback
        for info in app.registered_commands
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == command  # type: ignore[union-attr]
    ]
    env = {"COLUMNS": "100"}
    full = CliRunner().invoke(app, [command, "--help"], env=env)
    short = CliRunner().invoke(alone, [command, "--help"], env=env)
    assert (short.exit_code, short.stdout) == (full.exit_code, full.stdout)
    bare_full = CliRunner().invoke(app, [command, "--no-such-option"], env=env)
    bare_short = CliRunner().invoke(alone, [command, "--no-such-option"], env=env)
    assert (bare_short.exit_code, bare_short.output) == (bare_full.exit_code, bare_full.output)


def test_the_whole_app_runs_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    assert narrowed(["valdate"]) is app
    assert narrowed(["--version"]) is app
    assert narrowed(["--help", "validate"]) is app
    monkeypatch.setenv("_STARGRAPH_MEM_COMPLETE", "complete_bash")
    assert narrowed(["validate"]) is app
    assert narrowed(["--help"]) is app


@pytest.mark.parametrize("args", [[], ["--help"]])
@pytest.mark.parametrize("columns", ["60", "100", "200"])
def test_the_group_help_lists_the_commands_without_building_them(
    args: list[str], columns: str
) -> None:
    """The group's help comes from an app whose commands are listed with their names,
    help and panels but have no parameters (reading a command's signature is most of
    typer's work): the very same text, and the same exit code."""
    listed = narrowed(args)
    assert listed is not app
    assert [len(typer.main.get_command(listed).commands[name].params) for name in ("put",)] == [0]  # type: ignore[attr-defined]
    env = {"COLUMNS": columns}
    full = CliRunner().invoke(app, args, env=env)
    short = CliRunner().invoke(listed, args, env=env)
    assert "put" in full.stdout and "validate" in full.stdout
    assert (short.exit_code, short.stdout) == (full.exit_code, full.stdout)


def test_help_formatter_defers_markdown_until_used() -> None:
    code = (
        "import sys\n"
        "from stargraph_mem.cli.help import load_help_formatter\n"
        "load_help_formatter()\n"
        "import typer.rich_utils as r\n"
        "assert 'rich.markdown' not in sys.modules and 'rich.traceback' not in sys.modules\n"
        "from rich.markdown import Markdown\n"
        "assert isinstance(r.Markdown('*x*'), Markdown)\n"
        "from rich.traceback import Traceback\n"
        "assert r.Traceback.from_exception == Traceback.from_exception\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == "ok\n", done.stderr
