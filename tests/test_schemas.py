"""How the schemas are made and found: conditions come from the operator table, the
template pattern is the template parser's, and the installed copy is the checked one."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from stargraph_mem.authoring import schemas
from stargraph_mem.cli import app
from stargraph_mem.ir import schema as pack_schema
from stargraph_mem.ir.checks import parse_template
from stargraph_mem.ir.models import IR_VERSION, RulePack
from stargraph_mem.ir.operators import OPERATORS, SCALAR_TYPES, Operator

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def operator_tests(condition: dict[str, Any]) -> dict[str, Any]:
    """The operator tests of a generated condition (its object form's properties)."""
    mapping = next(f for f in condition["anyOf"] if f.get("type") == "object")
    props: dict[str, Any] = mapping["properties"]
    return props


def test_every_operator_is_a_test_of_every_condition() -> None:
    defs = pack_schema.rule_pack_schema()["$defs"]
    for name in pack_schema.CONDITIONS:
        assert set(operator_tests(defs[name])) - {"bind"} == set(OPERATORS), name
    assert "bind" in operator_tests(defs["Condition"])
    assert "bind" not in operator_tests(defs["NotExistsCondition"])
    assert "bind" not in operator_tests(defs["LiteralCondition"])


def test_operands_follow_the_operand_kind() -> None:
    condition = operator_tests(pack_schema.condition_schema(bind=True, var=True))
    literal = operator_tests(pack_schema.condition_schema(bind=False, var=False))
    for name, op in OPERATORS.items():
        if op.operand == "value":
            assert {"$ref": "#/$defs/VarRef"} in condition[name]["anyOf"]
            assert "anyOf" not in literal[name]
            expected = "string" if op.string_operand else ["boolean", "number", "string"]
            assert literal[name]["type"] == expected
        elif op.operand == "values":
            assert condition[name]["type"] == "array"
        elif op.operand == "flag":
            assert condition[name]["const"] is True
        else:
            assert condition[name]["$ref"] == "#/$defs/Duration"


def test_a_new_operator_appears_without_schema_code(monkeypatch: pytest.MonkeyPatch) -> None:
    near = Operator("near", "value", SCALAR_TYPES, True, False, "close to", "n: {near: 3}")
    monkeypatch.setattr(pack_schema, "OPERATORS", {**OPERATORS, "near": near})
    tests = operator_tests(pack_schema.rule_pack_schema()["$defs"]["Condition"])
    assert tests["near"]["description"] == "close to, e.g. n: {near: 3}"
    assert {"type": "string"} in tests["near"]["anyOf"]


def test_model_fields_flow_into_the_schema() -> None:
    schema = pack_schema.rule_pack_schema()
    assert set(schema["properties"]) == {f.alias or n for n, f in RulePack.model_fields.items()}
    rule = schema["$defs"]["Rule"]["properties"]
    assert {"id", "priority", "claim", "cadence", "select", "when", "emit"} <= set(rule)


def template_ok(text: str) -> bool:
    try:
        parse_template(text)
    except ValueError:
        return False
    return True


@given(st.text(alphabet="{}a ", max_size=12))
def test_template_pattern_is_the_template_parser(text: str) -> None:
    matched = re.search(pack_schema.TEMPLATE_PATTERN, text) is not None
    assert matched == template_ok(text)


def test_rule_pack_file_is_named_after_the_ir_version() -> None:
    assert schemas.FILES["pack"] == f"rule_pack.v{IR_VERSION}.json"


def test_installed_schemas_are_the_checked_ones() -> None:
    assert schemas.installed_dir() == ROOT / "ir_schemas"
    assert schemas.check_schemas(schemas.installed_dir()) == []


def test_the_wheel_carries_the_schemas_where_the_code_looks() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = config["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"]["ir_schemas"] == f"stargraph_mem/{schemas.PACKAGED}"
    assert "jsonschema>=4.18" in config["project"]["optional-dependencies"]["test"]


def test_packaged_copy_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site-packages" / "stargraph_mem"
    (package / "authoring").mkdir(parents=True)
    (package / schemas.PACKAGED).mkdir()
    monkeypatch.setattr(schemas, "__file__", str(package / "authoring" / "schemas.py"))
    assert schemas.schema_path("tests") == package / schemas.PACKAGED / "pack_tests.v1.json"


def script(*args: str) -> tuple[int, str, str]:
    """Run ``scripts/schemas.py`` (the maintainers' tool) from the repository."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "schemas.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def test_schema_check_and_drift(tmp_path: Path) -> None:
    code, out, _ = script("--dir", str(tmp_path))
    assert code == 0
    names = ("rule_pack.v1.json", "pack_tests.v1.json", "episode.v1.json")
    assert out == "".join(f"wrote {tmp_path / name}\n" for name in names)
    code, out, _ = script("--check", "--dir", str(tmp_path))
    assert (code, out) == (0, f"schemas up to date in {tmp_path}\n")
    (tmp_path / "rule_pack.v1.json").write_text("{}", encoding="utf-8")
    code, _, err = script("--check", "--dir", str(tmp_path))
    assert code == 1
    assert err.splitlines()[0] == f"{tmp_path / 'rule_pack.v1.json'}: out of date"


def test_committed_schemas_are_current() -> None:
    code, _, _ = script("--check", "--dir", str(ROOT / "ir_schemas"))
    assert code == 0


@pytest.mark.parametrize("kind", ["pack", "tests", "episode"])
def test_schema_path_prints_the_installed_file(kind: str) -> None:
    result = runner.invoke(app, ["schema", "--path", kind])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"{ROOT / 'ir_schemas' / schemas.FILES[kind]}\n"


def test_schema_path_refuses_an_unknown_kind() -> None:
    result = runner.invoke(app, ["schema", "--path", "rules"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "path", sorted([*ROOT.glob("rules/**/*.yaml"), *ROOT.glob("examples/*.yaml")])
)
def test_shipped_yaml_names_its_schema(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    kind = "tests" if path.parent.name == "tests" else "pack"
    assert first.startswith("# yaml-language-server: $schema=")
    target = (path.parent / first.split("=", 1)[1]).resolve()
    assert target == ROOT / "ir_schemas" / schemas.FILES[kind]


def test_the_command_writes_nothing_in_a_users_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "README.md").write_text("# my project\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "# my project\n"
