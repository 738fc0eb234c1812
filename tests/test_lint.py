"""Lint: shadowed rules, select clauses that never match, rules fighting across cadences."""

from __future__ import annotations

from pathlib import Path

import pytest

from stargraph_mem.authoring.lint import CHECKS, SUPPRESSIBLE, lint_analysis, lint_file
from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.ir.checks import check_or_raise
from stargraph_mem.ir.issues import model_keys
from stargraph_mem.ir.loader import load_pack_text
from stargraph_mem.ir.models import LintIgnore

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "lint"

HEAD = """\
ir_version: 1
pack: p
version: "1"
fields: {intent: string, score: integer, weight: number, subject: string, predicate: string,
         object: string, at: timestamp, tags: list}
rules:
"""
ADD = 'emit: {kind: add, subject: "{s}", predicate: p, object: o}'


def rule(rid: str, episode: str, *extra: str, head: str = "") -> str:
    """One rule binding ``s`` on the subject plus ``episode`` tests; ``extra`` lines after."""
    lines = [f"  - id: {rid}", *(f"    {h}" for h in head.splitlines() if h)]
    lines += [
        "    when:",
        f"      - episode: {{subject: {{bind: s}}{', ' if episode else ''}{episode}}}",
    ]
    lines += [f"      {x}" for x in extra]
    lines.append(f"    {ADD}")
    return "\n".join(lines) + "\n"


def lint(*rules: str) -> list[str]:
    pack, source = load_pack_text(HEAD + "".join(rules), "p.yaml")
    return [w.format() for w in lint_analysis(check_or_raise(pack, source), source)]


def checks(*rules: str) -> list[str]:
    return [line.rsplit("[", 1)[1].rstrip("]") for line in lint(*rules)]


@pytest.mark.parametrize(
    "name", ["dedup_against_facts", "default", "expire_speculative", "frequency_promotion"]
)
def test_shipped_packs_lint_clean(name: str) -> None:
    report = lint_file(ROOT / "rules" / f"{name}.yaml")
    assert (report.errors, report.warnings) == ([], [])


def test_shadowed_fixture() -> None:
    path = FIXTURES / "shadowed.yaml"
    assert [w.format() for w in lint_file(path).warnings] == [
        f"{path}:16:5: rules[1].when: warning: rule 'likes_statement' never fires: rule "
        "'any_statement' (priority 20 > 10) matches every episode it matches and claims it "
        "first [shadowed]",
        f"{path}:36:5: rules[4].when: warning: rule 'high_scored_noop' never fires: rule "
        "'scored_noop' (same priority 0, declared earlier) matches every episode it matches "
        "and claims it first [shadowed]",
    ]


def test_select_never_matches_fixture() -> None:
    path = FIXTURES / "select_never_matches.yaml"
    assert [w.format() for w in lint_file(path).warnings] == [
        f"{path}:8:14: rules[0].select.intent: warning: select can never match: no value of "
        "'intent' passes in [] [select-never-matches]",
        f"{path}:14:14: rules[1].select.score: warning: select can never match: no value of "
        "'score' passes lt 3, gt 5 [select-never-matches]",
        f"{path}:20:14: rules[2].select.intent: warning: select contradicts the episode "
        'pattern: no value of \'intent\' passes eq "noop", eq "delete" [select-never-matches]',
        f"{path}:27:19: rules[3].when[0].episode.pinned: warning: the episode pattern can never "
        "match: no value of 'pinned' passes not_in [true, false], exists "
        "[pattern-never-matches]",
    ]


def test_cadence_overlap_fixture() -> None:
    path = FIXTURES / "cadence_overlap.yaml"
    assert [w.format(strict=True) for w in lint_file(path).warnings] == [
        f"{path}:15:5: rules[1].cadence: error: rules 'nightly_location' (cron '0 3 * * *') "
        "and 'streaming_update' (every 1) both write (*, location) facts on different "
        "cadences: they fight over the same facts [cadence-overlap]",
        f"{path}:22:5: rules[2].cadence: error: rules 'streaming_update' (every 1) and "
        "'hourly_mood' (cron '0 * * * *') both write (*, mood) facts on different cadences: "
        "they fight over the same facts [cadence-overlap]",
    ]


def test_invalid_pack_reports_errors_and_no_warnings(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + rule("a", "scor: 1"), encoding="utf-8")
    report = lint_file(bad)
    assert [e.format() for e in report.errors] == [
        f"{bad}:9:39: rules[0].when[0].episode.scor: unknown field 'scor'; did you mean 'score'?"
    ]
    assert report.warnings == []


# --- shadowing is reported only when provable ----------------------------------------


def shadows(upper: str, lower: str) -> bool:
    return "shadowed" in checks(upper, lower)


def test_implied_tests_shadow() -> None:
    assert checks(
        rule("a", "score: {ge: 3}, intent: {ne: noop}", head="priority: 5"),
        rule("b", "score: {gt: 4}, intent: {in: [add, update]}"),
    ) == ["shadowed"]
    assert shadows(rule("a", "at: {exists: true}"), rule("b", "at: {lt: '2026-01-01T00:00:00Z'}"))
    assert shadows(rule("a", "tags: {contains: x}"), rule("b", "tags: {contains: x, exists: true}"))
    assert shadows(rule("a", "intent: {prefix: up}"), rule("b", "intent: {prefix: upd}"))
    assert shadows(rule("a", "intent: {not_in: [a, b]}"), rule("b", "intent: {missing: true}"))
    assert shadows(rule("a", "weight: {lt: 1}"), rule("b", "weight: {eq: 0.5}"))


def test_not_implied_is_not_shadowed() -> None:
    assert not shadows(rule("a", "score: {ge: 3}"), rule("b", "score: {ge: 2}"))
    assert not shadows(rule("a", "intent: {ne: noop}"), rule("b", "intent: {ne: add}"))
    assert not shadows(rule("a", "intent: add"), rule("b", ""))
    assert not shadows(rule("a", "weight: {lt: 1}"), rule("b", "weight: {le: 1}"))


def test_extra_patterns_cadence_gate_and_claim_prevent_shadowing() -> None:
    # the upper rule's extra pattern can fail; with the same pattern below it cannot
    assert not shadows(rule("a", "", "- not: {subject: {var: s}}"), rule("b", ""))
    exists = "- exists: {subject: {var: s}}"
    assert shadows(rule("a", "", exists), rule("b", "intent: x", exists))
    assert not shadows(rule("a", "", head="cadence: {every: 1}"), rule("b", ""))
    assert not shadows(rule("a", "", head="salience: {min: 0.5}"), rule("b", ""))
    assert shadows(
        rule("a", "", head="salience: {min: 0.5}"), rule("b", "", head="salience: {min: 0.6}")
    )
    weighed = "salience: {min: 0.5, importance_key: weight}"
    assert not shadows(rule("a", "", head=weighed), rule("b", "", head="salience: {min: 0.6}"))
    assert not shadows(rule("a", "", head="salience: {min: 0.5}"), rule("b", "", head=weighed))
    stricter = weighed.replace("0.5", "0.6")
    assert shadows(rule("a", "", head=weighed), rule("b", "", head=stricter))
    assert not shadows(rule("a", "", head="claim: false"), rule("b", ""))
    assert not shadows(rule("a", ""), rule("b", "", head="claim: false"))
    assert not shadows(rule("a", "", head="enabled: false"), rule("b", ""))
    assert not shadows(rule("a", "", head="select: {score: 1}"), rule("b", ""))
    assert shadows(
        rule("a", "", head="select: {score: 1}"),
        rule("b", "score: 1", head="select: {score: {in: [1]}}"),
    )


def test_never_matches_edge_cases() -> None:
    assert checks(rule("a", "score: {gt: 3, lt: 4}")) == ["pattern-never-matches"]
    assert checks(rule("a", "weight: {gt: 3, lt: 4}")) == []
    assert checks(rule("a", "score: {ge: 3, le: 3}")) == []
    assert checks(rule("a", "intent: {prefix: ab}", head="select: {intent: {prefix: ac}}")) == [
        "select-never-matches"
    ]
    assert checks(rule("a", "at: {older_than: {days: 30}, newer_than: {days: 7}}")) == [
        "pattern-never-matches"
    ]
    assert checks(rule("a", "at: {older_than: {days: 7}, newer_than: {days: 30}}")) == []
    assert checks(rule("a", "intent: {in: [a, b], not_in: [a]}")) == []
    assert checks(rule("a", "intent: {in: [a, b], not_in: [a, b]}")) == ["pattern-never-matches"]
    assert (
        checks(
            rule("a", "", head="select: {intent: {missing: true}}"),
            rule("b", "intent: y", head="select: {intent: {exists: true, ne: x}}"),
        )
        == []
    )


def test_cadence_overlap_needs_compatible_targets() -> None:
    lit = 'emit: {kind: add, subject: "{s}", predicate: p, object: o}'
    other = lit.replace("predicate: p", "predicate: q")
    nightly = rule("a", "")
    hourly = rule("b", "", head="cadence: {every: 10}")
    assert checks(nightly, hourly) == ["cadence-overlap"]
    assert checks(nightly, hourly.replace(lit, other)) == []
    assert checks(nightly, hourly.replace(lit, other.replace("q", '"{s}"'))) == ["cadence-overlap"]


def test_cadence_overlap_only_for_real_collisions() -> None:
    """A variable pinned by ``in`` (in the pattern or ``select``) is as good as literals;
    one schedule spelled two ways is one schedule; each pair is reported once."""
    path = FIXTURES / "cadence_overlap_precise.yaml"
    assert [w.format() for w in lint_file(path).warnings] == [
        f"{path}:10:5: rules[0].cadence: warning: rules 'streaming_place' (every 1) and "
        "'nightly_home_cleanup' (cron '0 3 * * *') both write (*, home) facts on different "
        "cadences: they fight over the same facts [cadence-overlap]",
        f"{path}:27:5: rules[3].cadence: warning: rules 'streaming_place' (every 1) and "
        "'nightly_spelled_differently' (cron '00 03 * * 0-6') both write (*, home|location) "
        "facts on different cadences: they fight over the same facts [cadence-overlap]",
    ]


@pytest.mark.parametrize(
    ("first", "second", "warned"),
    [
        ('"{s}"', '"{s}"', True),
        ("p", "q", False),
        ("p", '"{s}"', True),
        ("p", '"x_{s}"', True),
        ('"x_{s}"', '"y_{s}"', True),  # templates with an unpinned variable may write anything
    ],
)
def test_cadence_overlap_by_written_predicate(first: str, second: str, warned: bool) -> None:
    nightly = rule("a", "").replace("predicate: p", f"predicate: {first}")
    hourly = rule("b", "", head="cadence: {every: 10}").replace(
        "predicate: p", f"predicate: {second}"
    )
    assert checks(nightly, hourly) == (["cadence-overlap"] if warned else [])


@pytest.mark.parametrize(
    ("cron", "warned"),
    [
        ("0 3 * * *", False),
        ("00 03 * * 0-7", False),
        ("0 3 1-31 * *", False),
        ("0 3 * * * 0", False),  # seconds field 0
        ("0 4 * * *", True),
        ("0 3 * * 1-5", True),
    ],
)
def test_cadence_overlap_compares_schedules_not_spellings(cron: str, warned: bool) -> None:
    other = rule("b", "", head=f"cadence: {{cron: '{cron}'}}")
    assert checks(rule("a", "intent: x"), other) == (["cadence-overlap"] if warned else [])
    tz = rule("b", "", head=f"cadence: {{cron: '{cron}', tz: Europe/Paris}}")
    assert checks(rule("a", "intent: x"), tz) == ["cadence-overlap"]


def test_cadence_overlap_through_bound_variables() -> None:
    pinned = rule("b", "predicate: {in: [q, r], bind: p}", head="cadence: {every: 1}").replace(
        "predicate: p,", 'predicate: "{p}",'
    )
    assert checks(rule("a", ""), pinned) == []
    assert checks(rule("a", "").replace("predicate: p", "predicate: r"), pinned) == [
        "cadence-overlap"
    ]


# --- suppressions --------------------------------------------------------------------------

IGNORE = 'lint: {ignore: {cadence-overlap: "the hourly rule only refines the nightly one"}}'


def lint_report(tmp_path: Path, *rules: str) -> tuple[list[str], list[str]]:
    """Shown and silenced warnings of a pack file made of ``rules``."""
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + "".join(rules), encoding="utf-8")
    report = lint_file(path)
    assert report.errors == []
    shown = [w.format().removeprefix(f"{path}:") for w in report.warnings]
    return shown, [w.check for w in report.suppressed]


def test_a_suppression_with_a_reason_silences_its_check(tmp_path: Path) -> None:
    hourly = rule("b", "", head="cadence: {every: 10}")
    assert checks(rule("a", ""), hourly) == ["cadence-overlap"]
    # either rule of the pair may silence it
    silenced: tuple[list[str], list[str]] = ([], ["cadence-overlap"])
    assert lint_report(tmp_path, rule("a", "", head=IGNORE), hourly) == silenced
    hourly_ignoring = rule("b", "", head=f"cadence: {{every: 10}}\n{IGNORE}")
    assert lint_report(tmp_path, rule("a", ""), hourly_ignoring) == silenced


def test_a_suppression_that_silences_nothing_is_reported(tmp_path: Path) -> None:
    pair = rule("a", "intent: x", head=IGNORE), rule("b", "intent: y")
    shown, silenced = lint_report(tmp_path, *pair)
    assert shown == [
        "8:21: rules[0].lint.ignore.cadence-overlap: warning: rule 'a' silences "
        "'cadence-overlap', but lint has no such warning about it: remove the suppression "
        "[unused-suppression]"
    ]
    assert silenced == []


def test_a_suppression_silences_only_its_own_rule(tmp_path: Path) -> None:
    never = "score: {gt: 3, lt: 4}"
    ignore = 'lint: {ignore: {pattern-never-matches: "kept for the next release"}}'
    other = rule("b", f"{never}, intent: y")
    shown, silenced = lint_report(tmp_path, rule("a", never, head=ignore), other)
    assert [line.rsplit("[", 1)[1] for line in shown] == ["pattern-never-matches]"]
    assert shown[0].startswith("14:39: rules[1].when[0].episode.score:")
    assert silenced == ["pattern-never-matches"]


@pytest.mark.parametrize(
    ("lint_key", "message"),
    [
        (
            'lint: {ignore: {cadence-overlp: "x"}}',
            "8:21: rules[0].lint.ignore.cadence-overlp: unknown lint check 'cadence-overlp'; "
            "did you mean 'cadence-overlap'?",
        ),
        (
            'lint: {ignore: {cadence-overlap: ""}}',
            "8:38: rules[0].lint.ignore.cadence-overlap: a suppression needs a reason: write "
            "why the warning does not apply to this rule",
        ),
        (
            "lint: {ignore: {shadowed: }}",
            "8:21: rules[0].lint.ignore.shadowed: a suppression needs a reason: write why the "
            "warning does not apply to this rule",
        ),
        (
            "lint: {ignore: [shadowed]}",
            "8:12: rules[0].lint.ignore: expected a mapping",
        ),
    ],
)
def test_a_bad_suppression_is_an_error(tmp_path: Path, lint_key: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + rule("a", "", head=lint_key), encoding="utf-8")
    report = lint_file(path)
    assert [e.format().removeprefix(f"{path}:") for e in report.errors] == [message]


def test_suppressible_checks_are_the_lint_ignore_keys() -> None:
    assert model_keys(LintIgnore) == list(SUPPRESSIBLE)
    assert (*SUPPRESSIBLE, "unused-suppression") == CHECKS


def test_suppressions_do_not_change_the_pack_hash() -> None:
    text = HEAD + rule("a", "")
    with_ignore = HEAD + rule("a", "", head=IGNORE)
    assert compile_text(text, "p.yaml").sha256 == compile_text(with_ignore, "p.yaml").sha256
