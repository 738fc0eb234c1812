"""Pack test files: loading with positions, seeding, exact and subset matching, diffs."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stargraph_mem.authoring.packtest import (
    case_lines,
    default_tests_path,
    load_tests_text,
    run_tests,
    run_trace_lines,
)
from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import compile_file, compile_text
from stargraph_mem.errors import IRError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = compile_file(ROOT / "rules" / "default.yaml")
DEDUP = compile_file(ROOT / "rules" / "dedup_against_facts.yaml")
HEAD = "pack: default\nnow: 2026-03-02T03:00:00+00:00\n"
MULTI = "pack: default\ncases:\n  - name: x\n"
NIGHTS = (
    "    passes:\n"
    "      - now: 2026-03-01T03:00:00+00:00\n"
    "        episodes: [{id: a1, triple: [alice, likes, tea]}]\n"
    "      - now: 2026-03-02T03:00:00+00:00\n"
)
ANY = "    expect: {deltas: []}\n"


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
        (
            HEAD + "cases:\n  - {name: x}\n",
            "t.yaml:4:5: cases[0]: missing required field 'expect'",
        ),
        (
            MULTI + "    now: 2026-03-01T03:00:00+00:00\n" + NIGHTS + ANY,
            "t.yaml:4:5: cases[0].now: a case with passes sets 'now' on each pass, not on the case",
        ),
        (
            MULTI + NIGHTS + "    episodes: []\n" + ANY,
            "t.yaml:8:5: cases[0].episodes: a case with passes sets 'episodes' on each pass, "
            "not on the case",
        ),
        (
            MULTI + NIGHTS,
            "t.yaml:3:5: cases[0]: nothing expected: set 'expect' on the case or on a pass",
        ),
        (MULTI + "    passes: []\n" + ANY, "t.yaml:4:5: cases[0].passes: must not be empty"),
        (
            MULTI + "    passes:\n      - episodes: []\n" + ANY,
            "t.yaml:5:9: cases[0].passes[0]: missing required field 'now'",
        ),
        (
            MULTI + NIGHTS.replace("03-02", "02-28") + ANY,
            "t.yaml:7:9: cases[0].passes[1].now: before the previous pass's time "
            "(2026-03-01T03:00:00+00:00)",
        ),
        (
            MULTI + NIGHTS + "        episodes: [{id: a1, content: again}]\n" + ANY,
            "t.yaml:8:21: cases[0].passes[1].episodes[0].id: duplicate id 'a1'",
        ),
        (
            MULTI + NIGHTS + "        expect: {}\n",
            "t.yaml:8:9: cases[0].passes[1].expect: expect needs at least one of 'deltas', "
            "'facts', 'rejected'",
        ),
        (
            MULTI
            + NIGHTS.replace("2026-03-02", "0001-01-02").replace("2026-03-01", "0001-01-01")
            + "        episodes: [{id: a2, at: {days: 2}}]\n"
            + ANY,
            "t.yaml:8:29: cases[0].passes[1].episodes[0].at: this time falls before year 1",
        ),
        (
            MULTI
            + NIGHTS.replace("2026-03-01T03", "0001-01-01T00").replace("2026-03-02", "0001-01-02")
            + ANY,
            "t.yaml:5:9: cases[0].passes[0].now: this time falls before year 1",
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


# --- cases of several passes --------------------------------------------------------------

THREE_NIGHTS = """\
pack: dedup_against_facts
cases:
  - name: three nights
    passes:
      - now: 2026-03-01T03:00:00+00:00
        episodes: [{id: e1, triple: [alice, likes, tea]}]
        expect:
          deltas: [{kind: add, rule: new_fact_add, sources: [e1]}]
          facts: [{triple: [alice, likes, tea], id: e1}]
      - now: 2026-03-02T03:00:00+00:00
        episodes: [{id: e2, session: s2, triple: [alice, likes, tea]}]
        expect:
          deltas: [{kind: add, rule: new_fact_add}]
      - now: 2026-03-03T03:00:00+00:00
        episodes: [{id: e3, triple: [alice, likes, coffee]}]
    expect:
      deltas:
        - {kind: add, rule: new_fact_add}
        - {kind: noop, rule: known_fact_noop, reinforces: [e1], sources: [e2]}
        - {kind: update, rule: changed_object_update, replaces: [e1], sources: [e3]}
      facts: [{triple: [alice, likes, tea], id: e1}]
"""


async def test_passes_run_in_order_each_at_its_time_and_diffs_name_the_pass(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, THREE_NIGHTS)
    run = await run_tests(DEDUP, [path], trace=True)
    (case,) = run.files[0].cases
    assert case_lines(case) == [
        "FAIL  three nights",
        "  passes[1].deltas (exact):",
        "    --- expected",
        "    +++ actual",
        "    @@ -1 +1 @@",
        "    -add new_fact_add",
        "    +noop known_fact_noop",
        "  facts (exact):",
        "    --- expected",
        "    +++ actual",
        "    @@ -1 +1 @@",
        "    -(alice, likes, tea) id=e1",
        "    +(alice, likes, coffee) id=e3",
    ]
    assert [(m.pass_index, m.document()["pass"]) for m in case.mismatches] == [(1, 1), (None, None)]
    nights = [datetime(2026, 3, d, 3, tzinfo=UTC) for d in (1, 2, 3)]
    assert [p.now for p in case.run.passes] == nights
    assert [[(f.object, f.valid_from) for f in p.facts] for p in case.run.passes] == [
        [("tea", nights[0])],
        [("tea", nights[0])],
        [("coffee", nights[2])],
    ]
    assert [len(p.deltas) for p in case.run.passes] == [1, 1, 1]
    # Episodes without `at` end a minute before their own pass's time.
    episodes = [line.split() for line in run_trace_lines(case.run) if "episode " in line]
    assert [(e[1], e[3]) for e in episodes] == [
        ("e1", "at=2026-03-01T02:59:00+00:00:"),
        ("e2", "at=2026-03-02T02:59:00+00:00:"),
        ("e3", "at=2026-03-03T02:59:00+00:00:"),
    ]
    headers = [line for line in run_trace_lines(case.run) if not line.startswith(" ")]
    assert headers == [f"passes[{k}] at {n.isoformat()}:" for k, n in enumerate(nights)]


async def test_coverage_counts_rules_fired_in_any_pass(tmp_path: Path) -> None:
    """Each rule fires in one pass only; an update in pass 2 names pass 1's fact by episode."""
    path = write(
        tmp_path,
        MULTI
        + """    passes:
      - now: 2026-03-01T03:00:00+00:00
        episodes: [{id: a1, triple: [alice, likes, tea]}]
      - now: 2026-03-02T03:00:00+00:00
        episodes:
          - {id: n1, intent: noop}
          - {id: u1, intent: update, replaces: [a1], triple: [alice, likes, coffee]}
        expect:
          deltas:
            - {kind: noop, rule: explicit_noop}
            - {kind: update, rule: explicit_update, replaces: [a1], sources: [u1]}
    expect:
      facts: [{triple: [alice, likes, coffee], id: u1, rule: explicit_update}]
""",
    )
    run = await run_tests(DEFAULT, [path])
    assert run.failed == 0
    fired = {r.rule_id: r.activations for r in run.coverage.rules if r.activations}
    assert fired == {"add_observation": 1, "explicit_noop": 1, "explicit_update": 1}
    assert [len(p.reports) for p in run.files[0].cases[0].run.passes] == [1, 1]


async def test_a_rejection_note_names_its_pass(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        MULTI
        + """    passes:
      - now: 2026-03-01T03:00:00+00:00
        episodes: [{id: a1, triple: [alice, likes, tea]}]
      - now: 2026-03-02T03:00:00+00:00
        episodes: [{id: d1, intent: delete, replaces: [nothing]}]
    expect:
      deltas: [{kind: add, rule: add_observation}, {kind: delete, rule: explicit_delete}]
""",
    )
    run = await run_tests(DEFAULT, [path])
    (case,) = run.files[0].cases
    assert case_lines(case)[-1] == (
        "  note: rejected d1 (explicit_delete) in passes[1]: unresolved reference: replaces "
        "names facts that are not current in this partition: nothing"
    )


EXPIRE = compile_file(ROOT / "rules" / "expire_speculative.yaml")


@pytest.mark.parametrize(("later", "expired"), [(1, False), (3, True)])
async def test_seeded_times_count_back_from_the_first_pass(
    tmp_path: Path, later: int, expired: bool
) -> None:
    """Seeded 28 days before the first pass, a guess has expired by a pass three days later
    (31 days old), not by one a day later (29 days old)."""
    path = write(
        tmp_path,
        f"""pack: expire_speculative
cases:
  - name: seeded before the first pass
    facts: [{{id: g, triple: [alice, likes, opera], confidence: 0.3, valid_from: {{days: 28}}}}]
    passes:
      - now: 2026-03-01T04:00:00+00:00
        expect: {{deltas: []}}
      - now: 2026-03-0{1 + later}T04:00:00+00:00
    expect:
      facts: []
""",
    )
    run = await run_tests(EXPIRE, [path])
    (case,) = run.files[0].cases
    assert case.passed == expired
    assert [len(p.facts) for p in case.run.passes] == [1, 0 if expired else 1]


def test_readme_multi_pass_example_runs_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's "Cases over several passes": its file, its command, the output shown."""
    section = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    section = section.split("\n### Cases over several passes\n", 1)[1].split("\n#", 1)[0]
    body = section.split("```yaml\n", 1)[1].split("```\n", 1)[0]
    command, *shown = section.split("```\n$ ", 1)[1].split("```\n", 1)[0].splitlines()
    (tmp_path / "rules").mkdir()
    pack = "rules/dedup_against_facts.yaml"
    (tmp_path / pack).write_text((ROOT / pack).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "nightly.yaml").write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    program, *args = shlex.split(command)
    assert program == "stargraph-mem"
    result = CliRunner().invoke(app, args)
    assert (result.exit_code, result.stdout.splitlines()) == (0, shown)
