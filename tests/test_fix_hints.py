"""Errors a new pack author meets show the fix: the key that is wrong and the form meant."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stargraph_mem.authoring.packtest import load_tests_text
from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import compile_text, validate_file
from stargraph_mem.errors import IRError

ROOT = Path(__file__).resolve().parents[1]

PACK = """\
ir_version: 1
pack: prefs
version: "1"
fields: {subject: string, predicate: string, object: string}
rules:
  - id: first
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""
"""A valid pack; each test changes one line (line 9 is the second ``when`` item)."""


def issues(tmp_path: Path, old: str, new: str) -> list[str]:
    assert old in PACK
    path = tmp_path / "prefs.yaml"
    path.write_text(PACK.replace(old, new, 1), encoding="utf-8")
    return [i.format().removeprefix(f"{tmp_path}/") for i in validate_file(path)]


def test_the_pack_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "prefs.yaml"
    path.write_text(PACK, encoding="utf-8")
    assert validate_file(path) == []


@pytest.mark.parametrize("kind", ["not", "exists"])
def test_not_and_exists_take_the_fact_fields_directly(tmp_path: Path, kind: str) -> None:
    found = issues(
        tmp_path,
        "- not: {subject: {var: s}, predicate: {var: p}}",
        f"- {kind}: {{fact: {{subject: {{var: s}}}}}}",
    )
    assert found == [
        f"prefs.yaml:9:9: rules[0].when[1].{kind}: '{kind}' takes the fact's fields directly: "
        f'write "{kind}: {{subject: …}}", not "{kind}: {{fact: {{…}}}}"'
    ]


@pytest.mark.parametrize(
    ("written", "meant"),
    [("gte", "ge"), ("lte", "le"), ("neq", "ne"), ("!=", "ne"), ("equals", "eq"), ("in_", "in")],
)
def test_operator_aliases_suggest_the_table_name(tmp_path: Path, written: str, meant: str) -> None:
    found = issues(tmp_path, "predicate: {var: p}}", f"predicate: {{'{written}': [a]}}}}")
    assert found == [
        f"prefs.yaml:9:46: rules[0].when[1].not.predicate.{written}: "
        f"unknown operator '{written}'; did you mean '{meant}'?"
    ]


def test_a_misspelled_operator_still_gets_the_nearest_name(tmp_path: Path) -> None:
    found = issues(tmp_path, "predicate: {var: p}}", "predicate: {prefx: a}}")
    assert found == [
        "prefs.yaml:9:46: rules[0].when[1].not.predicate.prefx: "
        "unknown operator 'prefx'; did you mean 'prefix'?"
    ]


def history_count(window: str) -> str:
    return (
        "      - count: {as: n, keys: [subject], over: history, within: "
        + window
        + "}\n    emit: {kind: add, sources: [n], "
    )


@pytest.mark.parametrize(
    ("text", "parts"),
    [("7d", "{days: 7}"), ("12h", "{hours: 12}"), ("1h30m", "{hours: 1, minutes: 30}")],
)
def test_durations_take_the_short_text_form(text: str, parts: str) -> None:
    """``within: 7d`` and ``older_than: 30d`` mean what the mapping form means (same hash)."""

    def pack(window: str, age: str) -> str:
        out = PACK.replace(
            "      - not:", history_count(window).split("\n")[0] + "\n      - not:", 1
        ).replace("emit: {kind: add, ", "emit: {kind: add, sources: [n], ", 1)
        return out.replace("{bind: o}}", "{bind: o}, timestamp: {older_than: " + age + "}}", 1)

    short = compile_text(pack(text, text), "short.yaml")
    long = compile_text(pack(parts, parts), "long.yaml")
    assert short.sha256 == long.sha256
    assert short.clips == long.clips


def test_a_bad_duration_text_says_what_to_write(tmp_path: Path) -> None:
    found = issues(tmp_path, "{bind: o}}", "{bind: o}, timestamp: {older_than: 30 days}}")
    assert found == [
        "prefs.yaml:8:104: rules[0].when[0].episode.timestamp.older_than: invalid duration "
        "'30 days': write 7d, 12h, 30m, 90s or 1h30m (or {days: 7})"
    ]


def test_validate_names_a_pack_test_file(tmp_path: Path) -> None:
    tests = tmp_path / "rules" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(ROOT / "rules" / "tests" / "default.yaml", tests / "prefs.yaml")
    result = CliRunner().invoke(app, ["validate", str(tests / "prefs.yaml")])
    assert result.exit_code == 1
    assert result.stderr == (
        f"{tests}/prefs.yaml:6:1: cases: this is a pack-test file: "
        f'run "stargraph-mem test {tmp_path}/rules/prefs.yaml"\n'
    )


def test_a_pack_test_file_elsewhere_names_no_pack(tmp_path: Path) -> None:
    path = tmp_path / "prefs_cases.yaml"
    path.write_text("pack: prefs\ncases: []\n", encoding="utf-8")
    assert [i.format() for i in validate_file(path)] == [
        f'{path}:2:1: cases: this is a pack-test file: run "stargraph-mem test <pack>"'
    ]


def test_an_unused_count_says_to_cite_it_or_drop_it(tmp_path: Path) -> None:
    found = issues(
        tmp_path, "      - not:", "      - count: {as: n, keys: [subject]}\n      - not:"
    )
    assert found == [
        "prefs.yaml:9:17: rules[0].when[1].count.as: variable 'n' is bound but never used: "
        'cite it in sources ("sources: [n]") or drop "as: n"'
    ]
    cited = PACK.replace("      - not:", "      - count: {as: n, keys: [subject]}\n      - not:")
    path = tmp_path / "cited.yaml"
    path.write_text(cited.replace("{kind: add, ", "{kind: add, sources: [n], "), encoding="utf-8")
    assert validate_file(path) == []


def test_an_unused_bind_says_to_use_it_or_drop_it(tmp_path: Path) -> None:
    found = issues(tmp_path, 'object: "{o}"}', 'object: "x"}')
    assert found == [
        "prefs.yaml:8:70: rules[0].when[0].episode.object.bind: variable 'o' is bound but "
        'never used: use it ("{o}" in emit, or {var: o}) or drop "bind: o"'
    ]


def test_the_readme_count_snippet_binds_nothing_unused(tmp_path: Path) -> None:
    """The ``over: history`` snippet of the README, in a pack, validates as it stands."""
    text = (ROOT / "docs" / "rule-packs.md").read_text(encoding="utf-8")
    section = text.split("## Evidence across passes\n", 1)[1]
    snippet = section.split("```yaml\n", 1)[1].split("```\n", 1)[0]
    items = "".join(f"      {line}\n" for line in snippet.splitlines())
    pack = PACK.replace("      - not: {subject: {var: s}, predicate: {var: p}}\n", items, 1)
    path = tmp_path / "readme.yaml"
    path.write_text(pack, encoding="utf-8")
    assert "as: n" not in snippet
    assert validate_file(path) == []


def test_a_misspelled_var_is_one_message(tmp_path: Path) -> None:
    found = issues(tmp_path, "predicate: {var: p}}", "predicate: {eq: {varr: p}}}")
    assert found == [
        "prefs.yaml:9:51: rules[0].when[1].not.predicate.eq.varr: "
        "unknown field 'varr'; did you mean 'var'?"
    ]


@pytest.mark.parametrize(
    ("item", "col", "bad", "meant"),
    [
        ("earlier: {as: e, kyes: [subject]}", 26, "earlier.kyes", "keys"),
        ("count: {as: n, key: [subject]}", 24, "count.key", "keys"),
    ],
)
def test_a_misspelled_list_key_gets_a_suggestion(
    tmp_path: Path, item: str, col: int, bad: str, meant: str
) -> None:
    found = issues(tmp_path, "      - not:", f"      - {item}\n      - not:")
    key = bad.split(".")[-1]
    assert found == [
        f"prefs.yaml:9:{col}: rules[0].when[1].{bad}: "
        f"unknown field '{key}'; did you mean '{meant}'?"
    ]


TESTS = """\
pack: prefs
now: 2026-03-02T03:00:00+00:00
cases:
  - name: one
    episodes: [{id: e1, at: AT, triple: [alice, likes, tea]}]
    expect: {deltas: []}
"""


@pytest.mark.parametrize(
    ("at", "col", "shown"),
    [("5", 29, "the number 5"), ("1.5", 29, "the number 1.5"), ("'5'", 29, "'5'")],
)
def test_pack_test_times_refuse_numbers(at: str, col: int, shown: str) -> None:
    with pytest.raises(IRError) as info:
        load_tests_text(TESTS.replace("AT", at), "t.yaml")
    assert [i.format() for i in info.value.issues] == [
        f"t.yaml:5:{col}: cases[0].episodes[0].at: 'at' is a time: write an ISO-8601 time "
        f"with an offset (2026-03-01T09:00:00+00:00) or a duration before now "
        f"(7d, {{days: 40}}), not {shown}"
    ]


def test_a_pack_test_now_refuses_a_number() -> None:
    with pytest.raises(IRError) as info:
        load_tests_text(TESTS.replace("2026-03-02T03:00:00+00:00", "1700000000"), "t.yaml")
    assert info.value.issues[0].format() == (
        "t.yaml:2:6: now: 'now' is a time: write an ISO-8601 time with an offset "
        "(2026-03-01T09:00:00+00:00), not the number 1700000000"
    )


@pytest.mark.parametrize("at", ["2026-03-01T09:00:00+00:00", "2d", "{days: 2}"])
def test_pack_test_times_take_times_and_durations(at: str) -> None:
    loaded = load_tests_text(TESTS.replace("AT", at), "t.yaml")
    assert loaded.tests.cases[0].episodes[0].at is not None
