"""Pack test files: loading with positions, seeding, exact and subset matching, diffs."""

from __future__ import annotations

from pathlib import Path

import pytest

from stargraph_mem.authoring.packtest import (
    case_lines,
    default_tests_path,
    load_tests_text,
    run_tests,
)
from stargraph_mem.compiler.pack import compile_file, compile_text
from stargraph_mem.errors import IRError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = compile_file(ROOT / "rules" / "default.yaml")
DEDUP = compile_file(ROOT / "rules" / "dedup_against_facts.yaml")
HEAD = "pack: default\nnow: 2026-03-02T03:00:00+00:00\n"


def first_error(text: str) -> str:
    with pytest.raises(IRError) as info:
        load_tests_text(text, "t.yaml")
    return info.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "t.yaml:1:1: empty document: a pack test file is a mapping"),
        ("- 1\n", "t.yaml:1:1: a pack test file must be a mapping"),
        (
            HEAD + "cases: [{name: x, expect: {deltas: []}}]\ncoverge: {min: 1}\n",
            "t.yaml:4:1: coverge: unknown field 'coverge'; did you mean 'coverage'?",
        ),
        (HEAD + "cases: []\n", "t.yaml:3:1: cases: must not be empty"),
        (
            HEAD + "cases:\n  - {name: x, expect: {}}\n",
            "t.yaml:4:15: cases[0].expect: expect needs at least one of 'deltas', 'facts', "
            "'rejected'",
        ),
        (
            HEAD + "cases:\n  - {name: x, expect: {deltas: [{kind: add, rule: r, tripel: []}]}}\n",
            "t.yaml:4:54: cases[0].expect.deltas[0].tripel: unknown field 'tripel'; "
            "did you mean 'triple'?",
        ),
        (
            HEAD + "cases:\n  - {name: x, match: some, expect: {deltas: []}}\n",
            "t.yaml:4:15: cases[0].match: expected 'exact' or 'subset'",
        ),
        (
            "pack: default\ncases:\n  - {name: x, expect: {deltas: []}}\n",
            "t.yaml:3:5: cases[0]: no pass time: set 'now' on the case or the file",
        ),
        (
            HEAD
            + "cases:\n  - {name: x, expect: {deltas: []}}\n  - {name: x, expect: {facts: []}}\n",
            "t.yaml:5:6: cases[1].name: duplicate case name (first at cases[0])",
        ),
        (
            HEAD + "cases:\n  - name: x\n    facts: [{id: a, triple: [a, b, c]}]\n"
            "    episodes: [{id: a}]\n    expect: {deltas: []}\n",
            "t.yaml:6:17: cases[0].episodes[0].id: duplicate id 'a'",
        ),
        (
            HEAD + "cases:\n  - name: x\n    facts: [{id: a, triple: [a, b]}]\n"
            "    expect: {deltas: []}\n",
            "t.yaml:5:21: cases[0].facts[0].triple: a triple is [subject, predicate, object]",
        ),
        (
            HEAD
            + "cases:\n  - {name: x, episodes: [{id: a, at: {dayz: 3}}], expect: {deltas: []}}\n",
            "t.yaml:4:39: cases[0].episodes[0].at.dayz: unknown field 'dayz'; did you mean 'days'?",
        ),
        (
            HEAD + "cases:\n  - {name: x, episodes: [{id: a, at: [1]}], expect: {deltas: []}}\n",
            "t.yaml:4:34: cases[0].episodes[0].at: expected an ISO-8601 time with an offset or "
            "a mapping",
        ),
        (
            HEAD + "cases:\n  - name: x\n    facts: [{id: a, triple: [a, b, c], confidence: 1.3}]\n"
            "    expect: {deltas: []}\n",
            "t.yaml:5:40: cases[0].facts[0].confidence: confidence must be between 0 and 1, "
            "got 1.3",
        ),
        (
            HEAD + "cases:\n  - {name: x, on: 1, expect: {deltas: []}}\n",
            "t.yaml:4:15: cases[0].on: unknown field 'on'",
        ),
    ],
)
def test_load_errors_carry_positions(text: str, message: str) -> None:
    assert first_error(text) == message


def test_default_tests_path() -> None:
    assert default_tests_path("rules/x.yaml") == Path("rules/tests/x.yaml")


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(body, encoding="utf-8")
    return path


async def test_subset_allows_extra_deltas_in_order_only(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD.replace("default", "dedup_against_facts")
        + """cases:
  - name: subset in order
    match: subset
    episodes:
      - {id: e1, triple: [a, likes, tea]}
      - {id: e2, triple: [b, likes, jazz]}
      - {id: e3, triple: [a, likes, coffee]}
    expect:
      deltas:
        - {kind: add, rule: new_fact_add}
        - {kind: update, rule: changed_object_update, replaces: [e1]}
  - name: subset out of order
    match: subset
    episodes:
      - {id: e1, triple: [a, likes, tea]}
      - {id: e2, triple: [a, likes, coffee]}
    expect:
      deltas:
        - {kind: update, rule: changed_object_update}
        - {kind: add, rule: new_fact_add}
  - name: exact with an extra delta
    episodes:
      - {id: e1, triple: [a, likes, tea]}
      - {id: e2, triple: [b, likes, jazz]}
    expect:
      deltas:
        - {kind: add, rule: new_fact_add, triple: [a, likes, tea], confidence: 0.8000000001}
""",
    )
    run = await run_tests(DEDUP, [path])
    cases = run.files[0].cases
    assert [c.passed for c in cases] == [True, False, False]
    assert case_lines(cases[1])[1:] == [
        "  deltas (subset):",
        "    --- expected",
        "    +++ actual",
        "    @@ -1,2 +1,2 @@",
        "    +add new_fact_add",
        "     update changed_object_update",
        "    -add new_fact_add",
    ]
    assert case_lines(cases[2])[1:] == [
        "  deltas (exact):",
        "    --- expected",
        "    +++ actual",
        "    @@ -1 +1,2 @@",
        "     add new_fact_add (a, likes, tea) confidence=0.8",
        "    +add new_fact_add (b, likes, jazz) confidence=0.8",
    ]


async def test_rejections_are_noted_on_failure_and_checked_when_expected(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD
        + """cases:
  - name: rejection expected
    episodes:
      - {id: d1, intent: delete, replaces: [nothing]}
    expect:
      rejected:
        - episode: d1
          rule: explicit_delete
          reason: "unresolved reference: replaces names facts that are not current
            in this partition: nothing"
  - name: rejection unexpected
    episodes:
      - {id: d1, intent: delete, replaces: [nothing]}
    expect:
      deltas: [{kind: delete, rule: explicit_delete}]
""",
    )
    run = await run_tests(DEFAULT, [path])
    first, second = run.files[0].cases
    assert first.passed
    assert case_lines(second) == [
        "FAIL  rejection unexpected",
        "  deltas (exact):",
        "    --- expected",
        "    +++ actual",
        "    @@ -1 +0,0 @@",
        "    -delete explicit_delete",
        "  note: rejected d1 (explicit_delete): unresolved reference: replaces names facts "
        "that are not current in this partition: nothing",
    ]
    assert run.coverage.fired == 1


async def test_bad_episode_metadata_is_a_positioned_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD + "cases:\n  - name: x\n    episodes: [{id: e1, meta: {subject: 3}}]\n"
        "    expect: {deltas: []}\n",
    )
    with pytest.raises(IRError) as info:
        await run_tests(DEFAULT, [path])
    assert info.value.message == (
        f"{path}:5:16: cases[0].episodes[0]: metadata: metadata.subject must be a string"
    )


FORGET_GUESSES = """\
ir_version: 1
pack: forget_guesses
version: "1"
rules:
  - id: forget_guesses
    when:
      - fact: {as: f, rule_id: guess, subject: {bind: s}}
    emit: {kind: delete, replaces: [f], sources: [f], reason: "{s} was a guess"}
"""


async def test_seeded_facts_can_name_the_rule_that_made_them(tmp_path: Path) -> None:
    """A rule testing a fact's ``rule_id`` can be tested: ``rule`` sets it (default ``seed``)."""
    pack = compile_text(FORGET_GUESSES, "forget_guesses.yaml")
    path = write(
        tmp_path,
        HEAD.replace("default", "forget_guesses")
        + """cases:
  - name: only guesses are forgotten
    facts:
      - {id: g, triple: [alice, likes, tea], rule: guess}
      - {id: k, triple: [alice, lives_in, paris]}
    expect:
      deltas: [{kind: delete, rule: forget_guesses, replaces: [g]}]
      facts: [{triple: [alice, lives_in, paris], id: k, rule: seed}]
""",
    )
    run = await run_tests(pack, [path])
    assert [c.passed for c in run.files[0].cases] == [True]


def test_a_seeded_rule_id_must_be_an_identifier() -> None:
    text = HEAD + "cases:\n  - name: x\n    facts: [{id: a, triple: [a, b, c], rule: two words}]\n"
    message = first_error(text + "    expect: {deltas: []}\n")
    assert message == (
        "t.yaml:5:40: cases[0].facts[0].rule: invalid id: use letters, digits and '.', '_', "
        "':', '@', '-' (starting with a letter or digit), at most 128 characters"
    )


KEYWORD_CASES = (
    HEAD
    + """cases:
  - name: Tea is added
    episodes: [{id: a1, triple: [alice, likes, tea]}]
    expect: {deltas: [{kind: add, rule: add_observation}]}
  - name: coffee is added
    episodes: [{id: a1, triple: [alice, likes, coffee]}]
    expect: {deltas: [{kind: add, rule: add_observation}]}
  - name: a noop only audits
    episodes: [{id: n1, intent: noop}]
    expect: {deltas: [{kind: noop, rule: explicit_noop}]}
"""
)


@pytest.mark.parametrize(
    ("keyword", "names"),
    [
        (None, ["Tea is added", "coffee is added", "a noop only audits"]),
        ("added", ["Tea is added", "coffee is added"]),
        ("TEA", ["Tea is added"]),
        ("noop only", ["a noop only audits"]),
        ("nothing", []),
    ],
)
async def test_keyword_selects_cases_by_name(
    tmp_path: Path, keyword: str | None, names: list[str]
) -> None:
    path = write(tmp_path, KEYWORD_CASES)
    run = await run_tests(DEFAULT, [path], keyword=keyword)
    assert [c.name for c in run.files[0].cases] == names
    assert (run.selected, run.deselected) == (len(names), 3 - len(names))
    assert run.coverage_checked == (keyword is None)
