"""The JSON Schemas in ``ir_schemas/`` agree with the validators.

Every shipped pack, example, compiler and lint fixture, pack test file and a corpus of
invalid packs (``tests/fixtures/invalid_packs/``) gets the same verdict from
``jsonschema`` (Draft 2020-12) and from ``validate``; pack test files are checked against
the pack-test loader and episode lines against the ``ingest`` parser. Two lists name the
exceptions and why: invalid only by what a schema cannot see (the validator alone
refuses), and spellings the models tolerate that the schema refuses.
"""

from __future__ import annotations

import functools
import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from stargraph_mem.authoring.packtest import load_tests_text
from stargraph_mem.authoring.schemas import FILES
from stargraph_mem.compiler.pack import validate_file
from stargraph_mem.engine.ingest import episode_line
from stargraph_mem.errors import IRError
from stargraph_mem.ir.loader import parse_yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "ir_schemas"
FIXTURES = ROOT / "tests" / "fixtures"
INVALID = FIXTURES / "invalid_packs"


@functools.cache
def validator(kind: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / FILES[kind]).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def as_json(value: Any) -> Any:
    """YAML data as a JSON tool sees it: times are text."""
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def schema_errors(kind: str, data: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator(kind).iter_errors(data)]


def yaml_schema_errors(kind: str, path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return schema_errors(kind, as_json(parse_yaml(text, str(path)).data))


def test_schema_files_are_2020_12_schemas() -> None:
    for kind in FILES:
        schema = json.loads((SCHEMAS / FILES[kind]).read_text(encoding="utf-8"))
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Draft202012Validator.check_schema(schema)


# --- rule packs ----------------------------------------------------------------------------

VALID_PACKS = sorted(
    [
        *(ROOT / "rules").glob("*.yaml"),
        *(ROOT / "examples").glob("*.yaml"),
        *(FIXTURES / "compiler").glob("*.yaml"),
        *(FIXTURES / "lint").glob("*.yaml"),
    ]
)

VALIDATOR_ONLY = {
    "alias_reused": "an alias names one pattern: names across patterns",
    "arithmetic_text_variable": "the variable's type comes from the field it binds",
    "cadence_idle_zero": "the parts of a duration are added up",
    "confidence_from_text_variable": "the variable's type comes from the field it binds",
    "contains_bad_list_item": "list items are checked on list fields only (a field type)",
    "count_bounds_crossed": "at_least and at_most are compared with each other",
    "distinct_unknown_field": "fields are declared in the pack",
    "duplicate_rule_id": "ids are compared across rules",
    "duration_over_100_years": "the parts of a duration are added up",
    "earlier_before_episode": "the order of patterns",
    "fact_only_without_sources": "sources must name a fact pattern's alias",
    "flag_on_builtin_field": "whether a field is always present depends on the field",
    "flag_on_fact_field": "whether a field is always present depends on the field",
    "in_items_field_type": "literals must suit the field's type",
    "invalid_cron": "cron syntax is croniter's",
    "keys_list_field": "a field's type comes from 'fields'",
    "keys_unknown_field": "fields are declared in the pack",
    "list_from_text_variable": "the variable's type comes from the field it binds",
    "literal_field_type": "literals must suit the field's type",
    "naive_timestamp_literal": "literals must suit the field's type (timestamp)",
    "operator_field_type": "operators must suit the field's type",
    "reinforces_earlier_alias": "reinforces must name a fact pattern's alias",
    "salience_importance_key_not_number": "a field's type comes from 'fields'",
    "salience_importance_key_undeclared": "fields are declared in the pack",
    "replaces_episode_alias": "replaces must name a fact or earlier pattern's alias",
    "sources_unknown_alias": "sources must name a pattern's alias",
    "unbound_condition_variable": "variables are bound in an earlier pattern",
    "unbound_template_variable": "variables are bound in a pattern",
    "undeclared_field": "fields are declared in the pack",
    "undeclared_payload_key": "payload keys are declared in the pack",
    "unknown_time_zone": "time zones are the time-zone database's",
    "unreachable_rule": "rules are compared with each other",
    "unused_variable": "a bound variable must be used somewhere in the rule",
}
"""Invalid packs only the validator refuses, and what the schema cannot see."""

INVALID_BOTH = sorted(p for p in INVALID.glob("*.yaml") if p.stem not in VALIDATOR_ONLY)


@pytest.mark.parametrize("path", VALID_PACKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_valid_pack_passes_schema_and_validator(path: Path) -> None:
    assert validate_file(path) == []
    assert yaml_schema_errors("pack", path) == []


@pytest.mark.parametrize("path", INVALID_BOTH, ids=lambda p: p.stem)
def test_invalid_pack_fails_schema_and_validator(path: Path) -> None:
    assert validate_file(path) != []
    assert yaml_schema_errors("pack", path) != []


@pytest.mark.parametrize("name", sorted(VALIDATOR_ONLY))
def test_semantic_problem_only_the_validator_sees(name: str) -> None:
    path = INVALID / f"{name}.yaml"
    assert validate_file(path) != []
    assert yaml_schema_errors("pack", path) == []


def test_invalid_corpus_is_described() -> None:
    files = sorted(INVALID.glob("*.yaml"))
    assert len(INVALID_BOTH) >= 25
    assert set(VALIDATOR_ONLY) <= {p.stem for p in files}
    for path in files:
        assert path.read_text(encoding="utf-8").startswith("# "), path.name


PACK_HEAD = """\
ir_version: 1
pack: base
version: "1"
fields: {subject: string, predicate: string, object: string, intent: string}
rules:
  - id: r
"""
EPISODE = "      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}%s}\n"
ADD = '    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"%s}\n'
FACT = "      - fact: {as: f, subject: {var: s}, confidence: {bind: c}}\n"


def one_rule(*, head: str = "", tests: str = "", more: str = "", emit: str = "") -> str:
    """A pack of one rule: ``head`` lines before ``when``, ``tests`` added to the episode
    pattern, ``more`` patterns after it, ``emit`` keys added to an add."""
    return PACK_HEAD + head + "    when:\n" + EPISODE % tests + more + ADD % emit


SCHEMA_ONLY = {
    "a count written as text": one_rule(head='    cadence: {every: "5"}\n'),
    "a confidence written as text": one_rule(emit=', confidence: "0.5"'),
}
"""Packs the validator accepts and the schema refuses: the validator reads numbers written
as text as numbers, because PyYAML reads some YAML 1.2 numbers (``1e300``) as text."""


@pytest.mark.parametrize("text", SCHEMA_ONLY.values(), ids=list(SCHEMA_ONLY))
def test_numbers_as_text_are_refused_by_the_schema_only(text: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    assert validate_file(path) == []
    assert yaml_schema_errors("pack", path) != []


LOOSE_SPELLINGS = {
    "a boolean written as a word": one_rule(head='    enabled: "yes"\n'),
    "the Python name of 'in'": one_rule(tests=", intent: {in_: [add]}"),
    "the Python name of 'from'": one_rule(more=FACT, emit=", confidence: {from_: c}, sources: [f]"),
    "a null operand": one_rule(tests=", intent: {eq: null, ne: add}"),
    "a null alias on 'not'": one_rule(more="      - not: {as: null, subject: {var: s}}\n"),
}
"""Spellings pydantic would tolerate; the validator refuses them, as the schema does."""


@pytest.mark.parametrize("text", LOOSE_SPELLINGS.values(), ids=list(LOOSE_SPELLINGS))
def test_loose_spellings_are_refused_by_both(text: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    assert validate_file(path) != []
    assert yaml_schema_errors("pack", path) != []


COUNT_WITHIN = "      - count: {as: n, keys: [subject], over: history, within: %s}\n"
DURATIONS = {
    "older_than as text": one_rule(tests=", timestamp: {older_than: 30d}"),
    "newer_than as text in parts": one_rule(tests=", timestamp: {newer_than: 1h30m}"),
    "a count window as text": one_rule(more=COUNT_WITHIN % "7d", emit=", sources: [n]"),
}
"""Durations written as cadences write them (``7d``): both accept them."""
BAD_FORMS = {
    "a duration in words": one_rule(tests=", timestamp: {older_than: 30 days}"),
    "an empty duration": one_rule(tests=", timestamp: {older_than: ''}"),
    "a pattern wrapped in 'not'": one_rule(more="      - not: {fact: {subject: {var: s}}}\n"),
    "a pattern wrapped in 'exists'": one_rule(more="      - exists: {fact: {subject: {var: s}}}\n"),
}
"""Forms the validator refuses with the fix, as the schema refuses them."""


@pytest.mark.parametrize("text", DURATIONS.values(), ids=list(DURATIONS))
def test_durations_as_text_pass_schema_and_validator(text: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    assert validate_file(path) == []
    assert yaml_schema_errors("pack", path) == []


@pytest.mark.parametrize("text", BAD_FORMS.values(), ids=list(BAD_FORMS))
def test_forms_with_a_fix_are_refused_by_both(text: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    assert validate_file(path) != []
    assert yaml_schema_errors("pack", path) != []


# --- pack test files -----------------------------------------------------------------------

PACK_TEST_FILES = sorted(
    [*(ROOT / "rules" / "tests").glob("*.yaml"), *(FIXTURES / "authoring").glob("*.yaml")]
)
TESTS_HEAD = "pack: p\nnow: 2026-03-02T03:00:00+00:00\n"
CASE = "cases:\n  - name: c\n    episodes: [{id: a1, triple: [a, b, c]}]\n"
EXPECT = "    expect: {deltas: []}\n"

PASSES = (
    "    passes:\n"
    "      - now: 2026-03-01T03:00:00+00:00\n"
    "        episodes: [{id: a1, triple: [a, b, c]}]\n"
    "      - now: 2026-03-02T03:00:00+00:00\n"
)

VALID_TESTS = {
    "an episode time as a duration text": TESTS_HEAD
    + CASE.replace("triple: [a, b, c]", "at: 2d, content: x")
    + EXPECT,
    "passes without a file time": "pack: p\ncases:\n  - name: c\n" + PASSES + EXPECT,
    "an expect on a pass only": "pack: p\ncases:\n  - name: c\n"
    + PASSES
    + "        expect: {facts: []}\n",
    "single-pass and multi-pass cases": TESTS_HEAD
    + CASE
    + EXPECT
    + "  - name: d\n"
    + PASSES.replace("a1", "b1")
    + EXPECT,
}
INVALID_TESTS = {
    "unknown key": TESTS_HEAD + "coverge: {min: 1}\n" + CASE + EXPECT,
    "a number as an episode time": TESTS_HEAD
    + CASE.replace("triple: [a, b, c]", "at: 5, content: x")
    + EXPECT,
    "a number as the file time": "pack: p\nnow: 1700000000\n" + CASE + EXPECT,
    "no cases": TESTS_HEAD + "cases: []\n",
    "no expect": TESTS_HEAD + CASE,
    "empty expect": TESTS_HEAD + CASE + "    expect: {}\n",
    "null sections only": TESTS_HEAD + CASE + "    expect: {deltas: null}\n",
    "unknown match": TESTS_HEAD + CASE + "    match: fuzzy\n" + EXPECT,
    "no pass time": "pack: p\n" + CASE + EXPECT,
    "naive pass time": "pack: p\nnow: 2026-03-02T03:00:00\n" + CASE + EXPECT,
    "two-word triple": TESTS_HEAD + CASE.replace("[a, b, c]", "[a, b]") + EXPECT,
    "unknown episode key": TESTS_HEAD + CASE.replace("triple", "tripel") + EXPECT,
    "coverage above one": TESTS_HEAD + "coverage: {min: 2}\n" + CASE + EXPECT,
    "unknown delta kind": TESTS_HEAD + CASE + "    expect: {deltas: [{kind: upsert, rule: r}]}\n",
    "delta without rule": TESTS_HEAD + CASE + "    expect: {deltas: [{kind: add}]}\n",
    "seed confidence above one": TESTS_HEAD
    + CASE
    + "    facts: [{id: f1, triple: [a, b, c], confidence: 1.5}]\n"
    + EXPECT,
    "unknown intent": TESTS_HEAD + CASE.replace("triple: [a, b, c]", "intent: maybe") + EXPECT,
    "passes beside the case's episodes": TESTS_HEAD + CASE + PASSES + EXPECT,
    "passes beside the case's now": TESTS_HEAD
    + "cases:\n  - name: c\n    now: 2026-03-02T03:00:00+00:00\n"
    + PASSES
    + EXPECT,
    "passes without any expect": "pack: p\ncases:\n  - name: c\n" + PASSES,
    "no passes": "pack: p\ncases:\n  - name: c\n    passes: []\n" + EXPECT,
    "a pass without a time": "pack: p\ncases:\n  - name: c\n    passes: [{episodes: []}]\n"
    + EXPECT,
    "a pass with an empty expect": "pack: p\ncases:\n  - name: c\n"
    + PASSES
    + "        expect: {}\n",
    "a single-pass case with a null expect": TESTS_HEAD + CASE + "    expect: null\n",
}
VALIDATOR_ONLY_TESTS = {
    "duplicate case names (names across cases)": TESTS_HEAD + CASE + EXPECT + CASE[7:] + EXPECT,
    "duplicate ids (ids across items)": TESTS_HEAD
    + CASE.replace("]}]", "]}, {id: a1, content: x}]")
    + EXPECT,
    "a time before year 1 (pass time minus a duration)": "pack: p\n"
    "now: 0050-01-01T00:00:00+00:00\n"
    + CASE.replace("triple: [a, b, c]", "at: {days: 36500}, content: x")
    + EXPECT,
    "passes going back in time (times across passes)": "pack: p\ncases:\n  - name: c\n"
    + PASSES.replace("03-02", "02-28")
    + EXPECT,
    "an id repeated in two passes (ids across items)": "pack: p\ncases:\n  - name: c\n"
    + PASSES
    + "        episodes: [{id: a1, content: x}]\n"
    + EXPECT,
}


def pack_test_verdicts(text: str, tmp_path: Path) -> tuple[bool, bool]:
    """(loader accepts, schema accepts) for a pack test file's text."""
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_tests_text(text, str(path))
        loader = True
    except IRError:
        loader = False
    return loader, yaml_schema_errors("tests", path) == []


@pytest.mark.parametrize("path", PACK_TEST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pack_test_file_passes_schema_and_loader(path: Path) -> None:
    load_tests_text(path.read_text(encoding="utf-8"), str(path))
    assert yaml_schema_errors("tests", path) == []


@pytest.mark.parametrize("text", VALID_TESTS.values(), ids=list(VALID_TESTS))
def test_valid_pack_test_text_passes_schema_and_loader(text: str, tmp_path: Path) -> None:
    assert pack_test_verdicts(text, tmp_path) == (True, True)


@pytest.mark.parametrize("text", INVALID_TESTS.values(), ids=list(INVALID_TESTS))
def test_invalid_pack_test_file_fails_schema_and_loader(text: str, tmp_path: Path) -> None:
    assert pack_test_verdicts(text, tmp_path) == (False, False)


@pytest.mark.parametrize("text", VALIDATOR_ONLY_TESTS.values(), ids=list(VALIDATOR_ONLY_TESTS))
def test_pack_test_problem_only_the_loader_sees(text: str, tmp_path: Path) -> None:
    assert pack_test_verdicts(text, tmp_path) == (False, True)


# --- episode lines -------------------------------------------------------------------------

BASE_EPISODE: dict[str, Any] = {
    "id": "e1",
    "content": "alice likes tea",
    "timestamp": "2026-11-01T09:00:00+00:00",
    "user": "alice",
    "session": "s1",
    "agent": "rag",
}


def line(**changes: Any) -> str:
    """The base episode with ``changes`` (a value of ``...`` drops the key), as JSON."""
    episode = {**BASE_EPISODE, **changes}
    return json.dumps({k: v for k, v in episode.items() if v is not ...})


VALID_LINES = [
    *(ROOT / "examples" / "sightings.jsonl").read_text(encoding="utf-8").splitlines(),
    line(),
    line(timestamp="2026-11-01T09:00:00Z", source_node=None),
    line(source_node="chat.web", metadata={"intent": "update", "replaces": ["f1"], "n": [1]}),
    line(metadata={"intent": None, "subject": "alice", "object": "tea", "score": 0.5}),
    line(timestamp="2026-11-01T09:00:00.123456-05:30"),
]
INVALID_LINES = {
    "no id": line(id=...),
    "id with a space": line(id="e 1"),
    "no timestamp": line(timestamp=...),
    "naive timestamp": line(timestamp="2026-11-01T09:00:00"),
    "a date only": line(timestamp="2026-11-01"),
    "not a time": line(timestamp="yesterday"),
    "unknown key": line(meta={}),
    "empty user": line(user=""),
    "content a number": line(content=3),
    "metadata a list": line(metadata=[]),
    "intent a number": line(metadata={"intent": 3}),
    "replaces a string": line(metadata={"replaces": "f1"}),
    "replaces numbers": line(metadata={"replaces": [1]}),
    "subject a number": line(metadata={"subject": 3}),
    "not an object": "[1, 2]",
}
VALIDATOR_ONLY_LINES = {
    "NUL in content (characters)": line(content="a\u0000b"),
    "lone surrogate escape (the JSON parser refuses it)": line(content="a\ud800b"),
    "integer beyond 64 bits in metadata (JSON numbers are unbounded)": line(metadata={"n": 2**70}),
    "UTC time in year 0 (a time's range)": line(timestamp="0001-01-01T00:00:00+14:00"),
}
SCHEMA_ONLY_LINES = {
    "a Unix time as a number": line(timestamp=1_700_000_000),
    "'_' between date and time": line(timestamp="2026-11-01_09:00:00Z"),
}


def ingest_accepts(text: str, tmp_path: Path) -> bool:
    """Whether ``ingest`` takes the line (its validation of one line, without a store)."""
    return not isinstance(episode_line((text + "\n").encode()), str)


def line_verdicts(text: str, tmp_path: Path) -> tuple[bool, bool]:
    """(ingest accepts, schema accepts) for one JSON line."""
    return ingest_accepts(text, tmp_path), schema_errors("episode", json.loads(text)) == []


@pytest.mark.parametrize("text", VALID_LINES)
def test_valid_episode_line_passes_schema_and_ingest(text: str, tmp_path: Path) -> None:
    assert line_verdicts(text, tmp_path) == (True, True)


@pytest.mark.parametrize("text", INVALID_LINES.values(), ids=list(INVALID_LINES))
def test_invalid_episode_line_fails_schema_and_ingest(text: str, tmp_path: Path) -> None:
    assert line_verdicts(text, tmp_path) == (False, False)


@pytest.mark.parametrize("text", VALIDATOR_ONLY_LINES.values(), ids=list(VALIDATOR_ONLY_LINES))
def test_episode_problem_only_ingest_sees(text: str, tmp_path: Path) -> None:
    assert line_verdicts(text, tmp_path) == (False, True)


@pytest.mark.parametrize("text", SCHEMA_ONLY_LINES.values(), ids=list(SCHEMA_ONLY_LINES))
def test_episode_spelling_ingest_tolerates_is_refused_by_the_schema(
    text: str, tmp_path: Path
) -> None:
    assert line_verdicts(text, tmp_path) == (True, False)
