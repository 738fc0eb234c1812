"""``validate`` remembers the programs CLIPS built: a second validation of an unchanged
pack builds nothing (and, as a command, never imports CLIPS); a change, a corrupt entry or
an unwritable cache directory means a build; a failing build is never remembered."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cli_probe
import pytest

from stargraph_mem.compiler import build_cache
from stargraph_mem.compiler import pack as pack_module
from stargraph_mem.compiler.pack import compile_file, validate_file
from stargraph_mem.errors import CompileError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "rules" / "default.yaml"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache directory for the test; the path its entries go under."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "stargraph-mem" / "builds"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The programs built in CLIPS during the test, in order."""
    built: list[str] = []
    real = pack_module.build_environment

    def counting(text: str) -> Any:
        built.append(text)
        return real(text)

    monkeypatch.setattr(pack_module, "build_environment", counting)
    return built


def copy_pack(tmp_path: Path, edit: Callable[[str], str] = lambda text: text) -> Path:
    path = tmp_path / "pack.yaml"
    path.write_text(edit(DEFAULT.read_text(encoding="utf-8")), encoding="utf-8")
    return path


def test_a_second_validation_builds_nothing(tmp_path: Path, cache: Path, builds: list[str]) -> None:
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    assert len(builds) == 1
    assert [p.suffix for p in cache.iterdir()] == [".json"]
    assert validate_file(pack) == []
    assert len(builds) == 1  # the hit
    assert validate_file(pack, cached_build=False) == []
    assert len(builds) == 2  # asked not to use the cache


def test_compiling_always_builds(tmp_path: Path, cache: Path, builds: list[str]) -> None:
    """A compiled pack carries its environment for the runtime: the cache is validation's."""
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    compiled = compile_file(pack)
    assert len(builds) == 2
    assert compiled.take_environment() is not None


def test_a_changed_pack_is_built_again(tmp_path: Path, cache: Path, builds: list[str]) -> None:
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    pack.write_text(
        pack.read_text(encoding="utf-8").replace("confidence: 0.8", "confidence: 0.75", 1),
        encoding="utf-8",
    )
    assert validate_file(pack) == []
    assert len(builds) == 2
    assert builds[0] != builds[1]
    assert len(list(cache.iterdir())) == 2


def test_another_version_or_clips_is_a_miss(
    tmp_path: Path, cache: Path, builds: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    monkeypatch.setattr(build_cache, "package_version", lambda: "999.0.0")
    assert validate_file(pack) == []
    monkeypatch.setattr(build_cache, "clips_identity", lambda: "another CLIPS")
    assert validate_file(pack) == []
    assert len(builds) == 3


def test_the_clips_extension_is_part_of_the_key() -> None:
    """An upgraded CLIPS (another extension file) makes every entry a miss."""
    assert "/clips/_clips" in build_cache.clips_identity()


@pytest.mark.parametrize(
    "garbage",
    [b"", b"not json", b"[]", b'{"format": 1, "built": true}', b'{"format": 1, "key": "x"}'],
)
def test_a_corrupt_entry_is_a_miss_and_is_repaired(
    tmp_path: Path, cache: Path, builds: list[str], garbage: bytes
) -> None:
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    (entry,) = cache.iterdir()
    entry.write_bytes(garbage)
    assert validate_file(pack) == []
    assert len(builds) == 2
    document = json.loads(entry.read_bytes())
    assert document == {"format": 1, "key": entry.stem, "built": True}
    assert validate_file(pack) == []
    assert len(builds) == 2


def test_an_unwritable_cache_directory_only_costs_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builds: list[str]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory would go", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    assert validate_file(pack) == []
    assert len(builds) == 2
    assert blocker.read_text(encoding="utf-8").startswith("a file")
    assert not build_cache.remember_built("0" * 64)


def test_a_read_only_cache_directory_only_costs_builds(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, builds: list[str]
) -> None:
    """A directory the process may not write to (as the root user may write anywhere,
    the write itself is made to fail)."""

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refused)
    pack = copy_pack(tmp_path)
    assert validate_file(pack) == []
    assert validate_file(pack) == []
    assert len(builds) == 2
    assert not cache.exists() or list(cache.iterdir()) == []  # no scratch file left


def test_a_failing_build_is_never_remembered(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = copy_pack(tmp_path)

    def refusing(text: str) -> Any:
        raise CompileError("CLIPS refused it", construct="sm-rule-add_note")

    monkeypatch.setattr(pack_module, "build_environment", refusing)
    for _ in range(2):
        issues = validate_file(pack)
        assert len(issues) == 1
        assert "could not be built in CLIPS" in issues[0].message
    assert not cache.exists() or list(cache.iterdir()) == []
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parents[1]))
    assert validate_file(pack) == []
    assert len(list(cache.iterdir())) == 1


def test_the_cache_directory_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build_cache.cache_dir() == tmp_path / "stargraph-mem"
    for unset in ("", "relative/path"):  # the specification: only absolute paths count
        monkeypatch.setenv("XDG_CACHE_HOME", unset)
        assert build_cache.cache_dir() == Path.home() / ".cache" / "stargraph-mem"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert build_cache.cache_dir() == Path.home() / ".cache" / "stargraph-mem"


# --- commands that do not need CLIPS never import it ---------------------------------------


def loaded(env: dict[str, str], *args: str) -> tuple[str, str]:
    """Run the CLI in a fresh interpreter; its exit code and whether CLIPS was imported."""
    code, modules = cli_probe.loaded(env, *args)
    return code, str("clips" in modules)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
    }


def test_help_and_facts_do_not_import_clips(tmp_path: Path, cli_env: dict[str, str]) -> None:
    assert loaded(cli_env, "--help") == ("0", "False")
    assert loaded(cli_env, "facts", "--help") == ("0", "False")
    db = tmp_path / "memory.db"
    db.touch()
    assert loaded(cli_env, "facts", "--db", str(db)) == ("0", "False")
    assert loaded(cli_env, "facts", "--db", str(db), "--search", "tea") == ("0", "False")


def test_validate_imports_clips_only_for_a_new_program(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    pack = copy_pack(tmp_path)
    assert loaded(cli_env, "validate", str(pack)) == ("0", "True")
    assert loaded(cli_env, "validate", str(pack)) == ("0", "False")
    pack.write_text(
        pack.read_text(encoding="utf-8").replace("confidence: 0.8", "confidence: 0.7", 1),
        encoding="utf-8",
    )
    assert loaded(cli_env, "validate", str(pack)) == ("0", "True")
    assert loaded(cli_env, "validate", str(pack)) == ("0", "False")
    (entry, _) = sorted((tmp_path / "xdg" / "stargraph-mem" / "builds").iterdir())
    assert entry.suffix == ".json"


def test_validate_of_an_invalid_pack_still_fails(tmp_path: Path, cli_env: dict[str, str]) -> None:
    pack = copy_pack(tmp_path, lambda text: text.replace("kind: add", "kind: ad", 1))
    for _ in range(2):
        assert loaded(cli_env, "validate", str(pack)) == ("1", "False")
