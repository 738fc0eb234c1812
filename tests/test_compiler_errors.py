"""Malformed packs: each yields one exact, positioned message (``file:line:col: path: msg``);
``validate_file`` collects every issue; ``IRError`` carries structured fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from packs_helpers import compile_ok, first_issue

from stargraph_mem.compiler.pack import compile_text, validate_file
from stargraph_mem.errors import IRError, StargraphMemError
from stargraph_mem.ir.loader import load_pack_text, parse_yaml

FILE = "rules/x.yaml"
BASE = """\
ir_version: 1
pack: base
version: "1"
fields:
  subject: string
  predicate: string
  object: string
  weight: integer
rules:
  - id: known
    priority: 20
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}}
    emit:
      kind: noop
      reinforces: [f]
  - id: fresh
    cadence: {cron: "0 3 * * *"}
    when:
      - episode:
          subject: {bind: s}
          predicate: {bind: p}
          object: {bind: o}
      - count: {as: n, keys: [subject], at_least: 1}
    emit:
      kind: add
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
      confidence: {var: n, base: 0.5, per: 0.1}
      reason: "seen {n}"
"""
SHADOW = """\
  - id: shadow
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}}
    emit:
      kind: noop
      reinforces: [f]
"""


def mutate(*edits: tuple[str, str]) -> str:
    """BASE with each ``old`` replaced once by ``new`` (``old`` must occur)."""
    text = BASE
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


CASES: list[tuple[str, str, str]] = [
    (
        "yaml_syntax",
        mutate(('version: "1"', "version: [1")),
        "rules/x.yaml:4:7: invalid YAML: expected ',' or ']', but got ':'",
    ),
    (
        "duplicate_key",
        mutate(("pack: base\n", "pack: base\npack: again\n")),
        "rules/x.yaml:3:1: pack: duplicate key",
    ),
    (
        "nul_character",
        mutate(('reason: "seen {n}"', 'reason: "seen\x00{n}"')),
        "rules/x.yaml:32:20: NUL characters are not allowed in a rule pack",
    ),
    (
        "unknown_top_level_field",
        mutate(("fields:", "feilds: {}\nfields:")),
        "rules/x.yaml:4:1: feilds: unknown field 'feilds'; did you mean 'fields'?",
    ),
    (
        "misspelled_with_suggestion",
        mutate(("          subject: {bind: s}\n", "          subjct: {bind: s}\n")),
        "rules/x.yaml:22:11: rules[1].when[0].episode.subjct: unknown field 'subjct'; "
        "did you mean 'subject'?",
    ),
    (
        "wrong_type",
        mutate(("priority: 20", "priority: 2.5")),
        "rules/x.yaml:11:5: rules[0].priority: expected an integer",
    ),
    (
        "bad_name",
        mutate(("- id: fresh", "- id: Fresh-Rule")),
        "rules/x.yaml:18:5: rules[1].id: invalid name: use lower-case letters, digits and '_' "
        "(starting with a letter), at most 63 characters",
    ),
    (
        "unsupported_ir_version",
        mutate(("ir_version: 1", "ir_version: 2")),
        "rules/x.yaml:1:1: ir_version: unsupported ir_version 2 (this compiler reads ir_version 1)",
    ),
    (
        "unknown_pattern_kind",
        mutate(("      - count: {as: n", "      - tally: {as: n")),
        "rules/x.yaml:25:9: rules[1].when[1]: each 'when' item has exactly one key: "
        "episode, fact, earlier, count, not, exists or surprise",
    ),
    (
        "unknown_episode_field",
        mutate(("object: {bind: o}", "object: {bind: o}\n          colour: red")),
        "rules/x.yaml:25:11: rules[1].when[0].episode.colour: unknown field 'colour'",
    ),
    (
        "unknown_fact_field",
        mutate(("fact: {as: f, subject: {var: s}", "fact: {as: f, subject: {var: s}, weight: 3")),
        "rules/x.yaml:14:42: rules[0].when[1].fact.weight: unknown field 'weight'",
    ),
    (
        "literal_type_mismatch",
        mutate(("object: {bind: o}", "object: {bind: o}\n          weight: {eq: heavy}")),
        "rules/x.yaml:25:20: rules[1].when[0].episode.weight.eq: "
        "type mismatch: 'weight' is integer, got string 'heavy'",
    ),
    (
        "variable_type_mismatch",
        mutate(
            (
                "          object: {bind: o}",
                "          weight: {eq: {var: s}}\n          object: {bind: o}",
            )
        ),
        "rules/x.yaml:24:20: rules[1].when[0].episode.weight.eq: "
        "type mismatch: variable 's' is string, field is integer",
    ),
    (
        "unbound_variable",
        mutate(('object: "{o}"', 'object: "{o}{q}"')),
        "rules/x.yaml:30:7: rules[1].emit.object: unbound variable 'q' in template",
    ),
    (
        "unbound_variable_in_condition",
        mutate(("fact: {as: f, subject: {var: s}", "fact: {as: f, subject: {var: z}")),
        "rules/x.yaml:14:23: rules[0].when[1].fact.subject.eq: "
        "unbound variable 'z' (bind it in an earlier pattern)",
    ),
    (
        "unused_variable",
        mutate(("object: {bind: o}", "object: {bind: o}\n          weight: {bind: w}")),
        "rules/x.yaml:25:20: rules[1].when[0].episode.weight.bind: "
        "variable 'w' is bound but never used: "
        'use it ("{w}" in emit, or {var: w}) or drop "bind: w"',
    ),
    (
        "duplicate_rule_id",
        mutate(("- id: fresh", "- id: known")),
        "rules/x.yaml:18:5: rules[1].id: duplicate rule id 'known' (first at rules[0], line 10)",
    ),
    (
        "invalid_cron",
        mutate(('cron: "0 3 * * *"', 'cron: "61 3 * * *"')),
        "rules/x.yaml:19:21: rules[1].cadence.cron: invalid cron expression '61 3 * * *': "
        "minute field '61': 61 is out of range 0-59",
    ),
    (
        "invalid_cron_in_block_style",
        mutate(('cadence: {cron: "0 3 * * *"}', "cadence:\n      cron: '0 3 * jan-foo *'")),
        "rules/x.yaml:20:13: rules[1].cadence.cron: invalid cron expression '0 3 * jan-foo *': "
        "month field 'jan-foo': unknown name 'foo' (use 1-12 or jan-dec)",
    ),
    (
        "bad_tz",
        mutate(('cron: "0 3 * * *"}', 'cron: "0 3 * * *", tz: Mars/Olympus}')),
        "rules/x.yaml:19:5: rules[1].cadence: unknown time zone 'Mars/Olympus'",
    ),
    (
        "op_not_applicable",
        mutate(("object: {bind: o}", "object: {bind: o, lt: m}")),
        "rules/x.yaml:24:29: rules[1].when[0].episode.object.lt: "
        "'lt' needs a numeric or timestamp field, not string 'object'",
    ),
    (
        "add_without_subject",
        mutate(('      subject: "{s}"\n', "")),
        "rules/x.yaml:26:5: rules[1].emit: emit of kind 'add' needs 'subject'",
    ),
    (
        "replaces_on_add",
        mutate(("      confidence: {var: n", "      replaces: [f]\n      confidence: {var: n")),
        "rules/x.yaml:31:7: rules[1].emit.replaces: emit of kind 'add' takes no 'replaces'",
    ),
    (
        "reinforces_non_fact",
        mutate(
            (
                "      - fact: {as: f, subject: {var: s}, predicate: {var: p}}",
                "      - earlier: {as: f, keys: [subject, predicate]}",
            )
        ),
        "rules/x.yaml:17:20: rules[0].emit.reinforces[0]: 'f' is not a named 'fact' pattern",
    ),
    (
        "unbalanced_brace",
        mutate(('reason: "seen {n}"', 'reason: "seen {n"')),
        "rules/x.yaml:32:7: rules[1].emit.reason: "
        "unbalanced brace in template (write '{{' or '}}' for a literal brace)",
    ),
    (
        "unreachable_rule",
        BASE + SHADOW,
        "rules/x.yaml:34:5: rules[2].when: unreachable: rule 'known' has the same patterns "
        "and a higher rank, so it always claims these episodes first",
    ),
    (
        "at_most_below_at_least",
        mutate(("at_least: 1}", "at_least: 3, at_most: 2}")),
        "rules/x.yaml:25:54: rules[1].when[1].count.at_most: "
        "at_most is smaller than at_least: the rule can never fire",
    ),
    # YAML 1.2 booleans: only true/false; yes/no/on/off are strings, keys included
    (
        "yaml11_word_as_key",
        mutate(('cadence: {cron: "0 3 * * *"}', 'cadence: {on: "0 3 * * *"}')),
        "rules/x.yaml:19:15: rules[1].cadence.on: unknown field 'on'; did you mean 'cron'?",
    ),
    (
        "yaml11_word_for_a_boolean",
        mutate(("priority: 20", "priority: 20\n    enabled: yes")),
        "rules/x.yaml:12:5: rules[0].enabled: expected true or false, got 'yes' (a string, "
        "as in YAML 1.2): write true",
    ),
    (
        "yaml11_word_for_a_condition_boolean",
        mutate(("object: {bind: o}", "object: {bind: o, exists: off}")),
        "rules/x.yaml:24:29: rules[1].when[0].episode.object.exists: expected true or false, "
        "got 'off' (a string, as in YAML 1.2): write false",
    ),
    (
        "quoted_boolean",
        mutate(("priority: 20", 'priority: 20\n    claim: "false"')),
        "rules/x.yaml:12:5: rules[0].claim: expected true or false, got 'false'",
    ),
    (
        "yaml11_word_compared_with_a_boolean_field",
        mutate(
            ("weight: integer", "weight: integer\n  pinned: boolean"),
            ("{bind: o}", "{bind: o}\n          pinned: no"),
        ),
        "rules/x.yaml:26:11: rules[1].when[0].episode.pinned.eq: "
        "type mismatch: 'pinned' is boolean, got string 'no'",
    ),
    # unknown keys anywhere get a spelling hint from the keys allowed there
    (
        "unknown_duration_key",
        mutate(
            ("object: {bind: o}", "object: {bind: o}\n          timestamp: {older_than: {dayz: 3}}")
        ),
        "rules/x.yaml:25:36: rules[1].when[0].episode.timestamp.older_than.dayz: "
        "unknown field 'dayz'; did you mean 'days'?",
    ),
    (
        "unknown_linear_confidence_key",
        mutate(("per: 0.1}", "per: 0.1, maxx: 1}")),
        "rules/x.yaml:31:49: rules[1].emit.confidence.maxx: unknown field 'maxx'; "
        "did you mean 'max'?",
    ),
    (
        "misspelled_pattern_kind",
        mutate(("      - count: {as: n", "      - cuont: {as: n")),
        "rules/x.yaml:25:9: rules[1].when[1]: unknown pattern 'cuont'; did you mean 'count'?",
    ),
    (
        "misspelled_pattern_key",
        mutate(("at_least: 1}", "at_leest: 1}")),
        "rules/x.yaml:25:41: rules[1].when[1].count.at_leest: unknown field 'at_leest'; "
        "did you mean 'at_least'?",
    ),
    # a union reports the member the input was meant for, once
    (
        "confidence_out_of_range",
        mutate(("confidence: {var: n, base: 0.5, per: 0.1}", "confidence: 1.3")),
        "rules/x.yaml:31:7: rules[1].emit.confidence: confidence must be between 0 and 1, got 1.3",
    ),
    (
        "confidence_of_no_kind",
        mutate(("confidence: {var: n, base: 0.5, per: 0.1}", "confidence: [1]")),
        "rules/x.yaml:31:7: rules[1].emit.confidence: expected a number in [0, 1], "
        "{var, base, per}, {from: x} or one operation: reinforce, multiply, ebbinghaus, "
        "linear_decay, retention, min, max, clamp, add",
    ),
    (
        "operand_of_no_kind",
        mutate(("predicate: {var: p}}", "predicate: {eq: [1]}}")),
        "rules/x.yaml:14:54: rules[0].when[1].fact.predicate.eq: "
        "expected true or false, an integer, a number, a string or a mapping",
    ),
    (
        "every_below_one",
        mutate(('cadence: {cron: "0 3 * * *"}', "cadence: {every: 0}")),
        "rules/x.yaml:19:15: rules[1].cadence.every: every must be at least 1, got 0",
    ),
    (
        "priority_out_of_range",
        mutate(("priority: 20", "priority: 2000")),
        "rules/x.yaml:11:5: rules[0].priority: priority must be between -1000 and 1000, got 2000",
    ),
    (
        "empty_document",
        "# nothing here\n",
        "rules/x.yaml:1:1: empty document: a rule pack is a mapping",
    ),
]


def test_yaml_booleans_are_true_and_false_only() -> None:
    """YAML 1.2 core schema: yes/no/on/off (any case) are strings, as keys and as values."""
    source = parse_yaml("on: [yes, No, OFF, y, n, true, False, TRUE]\nyes: 1\n", FILE)
    assert source.data == {"on": ["yes", "No", "OFF", "y", "n", True, False, True], "yes": 1}
    assert source.locate(("on",)) == (1, 1)


def test_base_pack_is_valid() -> None:
    assert first_issue(BASE) == ""
    observer = SHADOW.replace("- id: shadow", "- id: shadow\n    claim: false")
    assert first_issue(BASE + observer.replace("reinforces: [f]", "sources: [f]")) == ""
    compile_ok(BASE)


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_exact_message_and_position(text: str, expected: str) -> None:
    assert first_issue(text, FILE) == expected


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compile_text_raises_the_same_first_issue(text: str, expected: str) -> None:
    with pytest.raises(IRError) as info:
        compile_text(text, FILE)
    assert str(info.value) == expected
    assert isinstance(info.value, StargraphMemError)


def test_cases_are_distinct() -> None:
    assert len({c[2] for c in CASES}) == len(CASES) >= 15


def test_pydantic_issues_are_all_reported() -> None:
    """A misspelled emit key is one message, the spelling hint: not also the missing field."""
    with pytest.raises(IRError) as info:
        load_pack_text(mutate(("      kind: add", "      knd: add")), FILE)
    assert [i.format() for i in info.value.issues] == [
        "rules/x.yaml:27:7: rules[1].emit.knd: unknown field 'knd'; did you mean 'kind'?",
    ]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("confidence: {var: n, base: 0.5, per: 0.1}", "confidence: 1.3"),
            ["31:7: rules[1].emit.confidence: confidence must be between 0 and 1, got 1.3"],
        ),
        (
            ("per: 0.1}", "per: 0.1, maxx: 1}"),
            ["31:49: rules[1].emit.confidence.maxx: unknown field 'maxx'; did you mean 'max'?"],
        ),
        (
            ("predicate: {var: p}}", "predicate: {eq: {varr: p}}}"),
            [
                "14:59: rules[0].when[1].fact.predicate.eq.varr: unknown field 'varr'; "
                "did you mean 'var'?",
            ],
        ),
    ],
)
def test_a_union_reports_one_member(
    tmp_path: Path, edit: tuple[str, str], expected: list[str]
) -> None:
    """Every issue, not only the first: no message per union member that does not fit."""
    path = tmp_path / "x.yaml"
    path.write_text(mutate(edit), encoding="utf-8")
    assert [i.format().removeprefix(f"{path}:") for i in validate_file(path)] == expected


def test_validate_file_collects_every_issue(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    text = mutate(
        ("- id: fresh", "- id: known"),
        ('object: "{o}"', 'object: "{o}{q}"'),
        ("at_least: 1}", "at_least: 3, at_most: 2}"),
        ("object: {bind: o}", "object: {bind: o}\n          weight: {bind: w}"),
    )
    path.write_text(text, encoding="utf-8")
    issues = validate_file(path)
    assert [(i.line, i.col, i.path, i.rule_id, i.message) for i in issues] == [
        (18, 5, "rules[1].id", "known", "duplicate rule id 'known' (first at rules[0], line 10)"),
        (
            26,
            54,
            "rules[1].when[1].count.at_most",
            "known",
            "at_most is smaller than at_least: the rule can never fire",
        ),
        (31, 7, "rules[1].emit.object", "known", "unbound variable 'q' in template"),
        (
            25,
            20,
            "rules[1].when[0].episode.weight.bind",
            "known",
            "variable 'w' is bound but never used: "
            'use it ("{w}" in emit, or {var: w}) or drop "bind: w"',
        ),
    ]
    assert all(i.file == str(path) and i.severity == "error" for i in issues)


def test_validate_file_collects_schema_issues(tmp_path: Path) -> None:
    path = tmp_path / "schema.yaml"
    path.write_text(
        mutate(("priority: 20", "priority: high"), ("pack: base", "pack: Base")), encoding="utf-8"
    )
    assert [i.format().removeprefix(str(path)) for i in validate_file(path)] == [
        ":2:1: pack: invalid name: use lower-case letters, digits and '_' (starting with a "
        "letter), at most 63 characters",
        ":11:5: rules[0].priority: expected an integer",
    ]


def test_validate_file_on_valid_and_unreadable_files(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(BASE, encoding="utf-8")
    assert validate_file(good) == []
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(BASE.replace("base", "b\xe9se").encode("latin-1"))
    (issue,) = validate_file(bad)
    assert issue.file == str(bad)
    assert issue.message.startswith("cannot read rule pack: 'utf-8' codec can't decode byte 0xe9")
    line = BASE[: BASE.index("base")].count("\n") + 1
    col = len(BASE[: BASE.index("base")].rsplit("\n", 1)[-1]) + 2
    assert (issue.line, issue.col) == (line, col)
    assert issue.format().startswith(f"{bad}:{line}:{col}: cannot read rule pack")


def test_ir_error_carries_structured_fields() -> None:
    text = mutate(("object: {bind: o}", "object: {bind: o, lt: m}"), ('object: "{o}"', "object: x"))
    with pytest.raises(IRError) as info:
        compile_text(text, FILE)
    err = info.value
    assert (err.file, err.line, err.col, err.path, err.rule_id) == (
        FILE,
        24,
        29,
        "rules[1].when[0].episode.object.lt",
        "fresh",
    )
    assert err.context == {
        "file": FILE,
        "line": 24,
        "col": 29,
        "path": "rules[1].when[0].episode.object.lt",
        "rule_id": "fresh",
    }
    assert [i.message for i in err.issues] == [
        "'lt' needs a numeric or timestamp field, not string 'object'",
        "variable 'o' is bound but never used: "
        'use it ("{o}" in emit, or {var: o}) or drop "bind: o"',
    ]
    assert err.issue is err.issues[0]


def test_pack_level_issue_has_no_rule_id() -> None:
    with pytest.raises(IRError) as info:
        compile_text(mutate(("fields:", "fields:\n  session: string")), FILE)
    err = info.value
    assert (err.line, err.col, err.path, err.rule_id) == (5, 3, "fields.session", None)
    assert err.message == (
        "rules/x.yaml:5:3: fields.session: 'session' is a built-in episode field; pick another name"
    )
