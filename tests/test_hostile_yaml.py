"""Hostile YAML: every rule pack or pack test file the loader refuses ends in one positioned
IRError (file:line:col: path: message) in bounded time and memory, never a traceback.

The small corpus lives in tests/fixtures/hostile_yaml/; documents of 100,000 levels or
over the size limit are written here. A subset runs through the CLI in a subprocess with
an address-space limit.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stargraph_mem.authoring.packtest import load_tests, load_tests_text
from stargraph_mem.compiler import compile_text
from stargraph_mem.compiler.pack import validate_file
from stargraph_mem.errors import IRError
from stargraph_mem.ir.loader import (
    INT64_MAX,
    MAX_ALIASES,
    MAX_DOCUMENT_BYTES,
    MAX_NESTING_DEPTH,
    MAX_NODES,
    load_pack_file,
    load_pack_text,
)
from stargraph_mem.ir.models import MAX_DURATION_SECONDS

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "hostile_yaml"
DEFAULT_PACK = ROOT / "rules" / "default.yaml"
CLI = [sys.executable, "-m", "stargraph_mem.cli"]
ADDRESS_SPACE = 1536 * 1024 * 1024
CLI_TIMEOUT = 120

HEAD = 'ir_version: 1\npack: hostile\nversion: "1"\n'
RULE = "rules:\n  - id: r\n    when: [{episode: {}}]\n    emit: {kind: noop}\n"
DEPTH = (
    "nesting depth limit exceeded: a rule pack nests mappings and sequences at most "
    f"{MAX_NESTING_DEPTH} levels deep"
)
NODES = f"node limit exceeded: a rule pack has at most {MAX_NODES} nodes"
INT_RANGE = f"integers are signed 64-bit (-9223372036854775808 to {INT64_MAX})"
SURROGATE = "lone surrogate escape \\ud800 is not a character"


@dataclass(frozen=True)
class Case:
    """A corpus file and the first issue it must produce."""

    file: str
    line: int | None
    col: int | None
    path: str
    message: str  # a fragment of the message


CORPUS_CASES = [
    # nesting (a RecursionError before)
    Case("nesting_1000.yaml", 4, 77, "description" + "[0]" * 63, DEPTH),
    Case("alias_depth.yaml", 5, 34, "b" + "[0]" * 30, DEPTH),
    # alias expansion ("billion laughs": 40 s and 3.1 GB before)
    Case("billion_laughs.yaml", 10, 10, "laughs.f[0]", NODES),
    Case(
        "alias_count.yaml",
        5,
        4009,
        "words[1000]",
        f"alias limit exceeded: a rule pack uses at most {MAX_ALIASES} aliases",
    ),
    Case(
        "recursive_alias.yaml",
        4,
        21,
        "loop.again",
        "invalid YAML: alias 'loop' refers to a node that contains it",
    ),
    Case(
        "undefined_alias.yaml",
        4,
        14,
        "description",
        "invalid YAML: found undefined alias 'nowhere'",
    ),
    Case("duplicate_anchor.yaml", 5, 4, "b", "duplicate anchor 'x' (first at line 4)"),
    # escapes that are not characters (UnicodeEncodeError in every command before)
    Case("surrogate_value.yaml", 4, 19, "description", SURROGATE),
    Case("surrogate_key.yaml", 4, 12, "fields", "lone surrogate escape \\udfff"),
    Case(
        "surrogate_pair.yaml",
        6,
        25,
        "rules[0].description",
        "lone surrogate escape \\ud83d is not a character (for U+1F600 write \\U0001F600)",
    ),
    Case(
        "escape_beyond_unicode.yaml",
        4,
        15,
        "description",
        "escape \\U00110000 is beyond the last Unicode character U+10FFFF",
    ),
    Case(
        "control_character.yaml",
        4,
        18,
        "",
        "invalid YAML: special characters are not allowed (U+0007)",
    ),
    # numbers (OverflowError / orjson TypeError before)
    Case(
        "duration_1e300.yaml",
        7,
        31,
        "rules[0].when[0].episode.timestamp.older_than",
        f"a duration is at most 100 years ({MAX_DURATION_SECONDS} seconds",
    ),
    Case(
        "duration_sum.yaml",
        7,
        31,
        "rules[0].when[0].episode.timestamp.newer_than",
        "a duration is at most 100 years",
    ),
    Case(
        "duration_inf.yaml",
        7,
        44,
        "rules[0].when[0].episode.timestamp.older_than.days",
        "not a finite number: '.inf'",
    ),
    Case(
        "duration_text_inf.yaml",
        7,
        44,
        "rules[0].when[0].episode.timestamp.newer_than.hours",
        "expected a finite number",
    ),
    Case(
        "priority_huge.yaml",
        6,
        5,
        "rules[0].priority",
        f"integer '99999999999999999999999' is out of range: {INT_RANGE}",
    ),
    Case(
        "every_huge.yaml",
        6,
        15,
        "rules[0].cadence.every",
        f"integer '99999999999999999999' is out of range: {INT_RANGE}",
    ),
    Case(
        "every_text_huge.yaml",
        6,
        15,
        "rules[0].cadence.every",
        f"integer out of range: {INT_RANGE}",
    ),
    Case(
        "at_least_text_huge.yaml",
        8,
        34,
        "rules[0].when[1].count.at_least",
        f"integer out of range: {INT_RANGE}",
    ),
    Case(
        "literal_int_huge.yaml",
        8,
        23,
        "rules[0].when[0].episode.n.eq",
        "integer '-9223372036854775809' is out of range",
    ),
    Case(
        "literal_nan.yaml",
        8,
        33,
        "rules[0].when[0].episode.x.in[1]",
        "not a finite number: '.nan'",
    ),
    Case(
        "tau_text_inf.yaml",
        6,
        26,
        "rules[0].salience.tau_seconds",
        "expected a finite number",
    ),
    Case("confidence_nan.yaml", 4, 12, "defaults.confidence", "not a finite number: '.nan'"),
    # duplicate rule ids: at the duplicate, also when it is an alias of the first
    Case(
        "duplicate_rule_id.yaml",
        9,
        5,
        "rules[1].id",
        "duplicate rule id 'r' (first at rules[0], line 5)",
    ),
    Case(
        "duplicate_rule_id_alias.yaml",
        9,
        5,
        "rules[1].id",
        "duplicate rule id 'r' (first at rules[0], line 6)",
    ),
    # tags, keys, documents
    Case(
        "tag_python_object.yaml",
        4,
        4,
        "x",
        "unsupported YAML tag '!!python/object/apply:os.system'",
    ),
    Case("tag_binary.yaml", 4, 1, "description", "unsupported YAML tag '!!binary'"),
    Case("tag_local.yaml", 6, 5, "rules[0].description", "unsupported YAML tag '!shell'"),
    Case("tag_int_invalid.yaml", 6, 5, "rules[0].priority", "invalid '!!int' value 'ten'"),
    Case("timestamp_invalid.yaml", 4, 1, "released", "invalid '!!timestamp' value '2024-02-31'"),
    Case("merge_key.yaml", 10, 7, "rules[0].emit", "merge keys ('<<') are not supported"),
    Case("null_key.yaml", 4, 1, "", "a mapping key cannot be null"),
    Case("complex_key.yaml", 4, 3, "", "mapping keys must be plain scalars"),
    Case("boolean_key.yaml", 6, 5, "rules[0].on", "unknown field 'on'"),
    Case("integer_key.yaml", 4, 1, "1", "unknown field"),
    Case(
        "multi_document.yaml",
        9,
        1,
        "",
        "invalid YAML: a rule pack is a single document, but found another document",
    ),
    Case("empty.yaml", 1, 1, "", "empty document: a rule pack is a mapping"),
    Case("comment_only.yaml", 1, 1, "", "empty document: a rule pack is a mapping"),
    # not UTF-8: the line and column of the first undecodable byte
    Case("latin1.yaml", 4, 17, "", "cannot read rule pack: 'utf-8' codec can't decode byte"),
    Case("utf16.yaml", 1, 1, "", "cannot read rule pack: 'utf-8' codec can't decode byte"),
]


def assert_issue(error: IRError, case: Case, file: Path) -> None:
    assert error.file == str(file)
    assert (error.line, error.col, error.path) == (case.line, case.col, case.path), str(error)
    assert case.message in error.issue.message, str(error)
    assert "Traceback" not in str(error)


@pytest.mark.parametrize("case", CORPUS_CASES, ids=lambda c: c.file.removesuffix(".yaml"))
def test_corpus_file_is_refused_with_position(case: Case) -> None:
    file = CORPUS / case.file
    with pytest.raises(IRError) as info:
        load_pack_file(file)
        # some problems are found by the semantic checks, after loading
        validate_or_raise(file)
    assert_issue(info.value, case, file)
    issues = validate_file(file)  # what `stargraph-mem validate` prints
    assert issues and issues[0] == info.value.issue


def validate_or_raise(file: Path) -> None:
    issues = validate_file(file)
    if issues:
        raise IRError(issues[0], issues)


def test_every_corpus_file_has_a_case() -> None:
    named = {c.file for c in CORPUS_CASES} | {p.name for p in CORPUS.glob("packtest_*.yaml")}
    assert named == {p.name for p in CORPUS.iterdir()}


# --- documents too big to keep in the corpus ---------------------------------------------


def flow_sequences(depth: int) -> str:
    return "a: " + "[" * depth + "]" * depth + "\n"


def flow_mappings(depth: int) -> str:
    return "a: " + "{a: " * depth + "1" + "}" * depth + "\n"


def block_sequences(depth: int) -> str:
    return "- " * depth + "x\n"


def block_mappings(depth: int) -> str:
    return "".join(" " * i + "a:\n" for i in range(depth)) + " " * depth + "x\n"


DEEP = 100_000
GENERATED: dict[str, tuple[Callable[[], str], Case]] = {
    "flow_sequences_100000": (
        lambda: flow_sequences(DEEP),
        Case("", 1, 67, "a" + "[0]" * 63, DEPTH),
    ),
    "flow_mappings_100000": (
        lambda: flow_mappings(DEEP),
        Case("", 1, 256, "a" + ".a" * 63, DEPTH),
    ),
    "block_sequences_100000": (
        lambda: block_sequences(DEEP),
        Case("", 1, 129, "[0]" * 64, DEPTH),
    ),
    # indentation makes a block mapping quadratic in size: 1,000 levels are 500 KB
    "block_mappings_1000": (
        lambda: block_mappings(1000),
        Case("", 65, 65, ".".join(["a"] * 64), DEPTH),
    ),
    "over_size_limit": (
        lambda: HEAD + "description: " + "x" * MAX_DOCUMENT_BYTES + "\n" + RULE,
        Case(
            "",
            4,
            MAX_DOCUMENT_BYTES - len(HEAD) + 1,
            "",
            f"size limit exceeded: a rule pack is at most {MAX_DOCUMENT_BYTES} bytes",
        ),
    ),
    "million_digit_integer": (
        lambda: HEAD + "priority: " + "9" * 1_000_000 + "\n" + RULE,
        Case("", 4, 1, "priority", "integer '9999999999"),
    ),
    "wide_sequence": (
        lambda: HEAD + "items: [" + ", ".join(["1"] * (MAX_NODES + 10)) + "]\n" + RULE,
        Case("", 4, 3 * (MAX_NODES - 9) + 9, f"items[{MAX_NODES - 9}]", NODES),
    ),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile")
    out = {}
    for name, (make, _) in GENERATED.items():
        out[name] = folder / f"{name}.yaml"
        out[name].write_text(make(), encoding="utf-8")
    return out


@pytest.mark.parametrize("name", list(GENERATED))
def test_generated_document_is_refused_with_position(name: str, generated: dict[str, Path]) -> None:
    case = GENERATED[name][1]
    file = generated[name]
    with pytest.raises(IRError) as info:
        load_pack_file(file)
    assert_issue(info.value, case, file)


@pytest.mark.parametrize("name", ["flow_sequences_100000", "block_sequences_100000"])
def test_text_is_refused_like_the_file(name: str, generated: dict[str, Path]) -> None:
    file = generated[name]
    with pytest.raises(IRError) as from_file:
        load_pack_file(file)
    with pytest.raises(IRError) as from_text:
        load_pack_text(file.read_text(encoding="utf-8"), str(file))
    assert from_text.value.issue == from_file.value.issue


def test_large_scalar_within_the_size_limit_is_accepted() -> None:
    text = HEAD + "description: " + "x" * (MAX_DOCUMENT_BYTES - 200) + "\n" + RULE
    compiled = compile_text(text, "big.yaml")
    assert compiled.pack.description == "x" * (MAX_DOCUMENT_BYTES - 200)


def test_lone_surrogate_in_text_handed_in_as_str() -> None:
    with pytest.raises(IRError) as info:
        load_pack_text(HEAD + "description: tea\ud800\n" + RULE, "s.yaml")
    assert str(info.value).startswith("s.yaml:4:17: lone surrogate U+D800, which is not a")


def test_surrogates_found_after_the_fallback_parser_carry_the_key_path() -> None:
    # a syntax error later in the text sends the document to the pure-Python parser,
    # which accepts the escape: the loader refuses the value it made
    text = HEAD + 'description: "tea \\ud800"\n' + RULE + "oops: [}\n"
    with pytest.raises(IRError) as info:
        load_pack_text(text, "s.yaml")
    assert str(info.value).startswith("s.yaml:4:19: description: " + SURROGATE)


def test_directory_is_refused(tmp_path: Path) -> None:
    issues = validate_file(tmp_path)
    assert len(issues) == 1
    assert issues[0].format().startswith(f"{tmp_path}: cannot read rule pack: [Errno 21]")


def test_limits_leave_shipped_packs_alone() -> None:
    for pack in sorted((ROOT / "rules").glob("*.yaml")):
        assert validate_file(pack) == []


def test_alias_within_limits_is_expanded() -> None:
    text = HEAD + (
        "rules:\n  - id: a\n    when: &when [{episode: {content: x}}]\n    emit: {kind: noop}\n"
        "  - id: b\n    claim: false\n    when: *when\n    emit: {kind: noop}\n"
    )
    pack, source = load_pack_text(text, "a.yaml")
    assert pack.rules[0].when == pack.rules[1].when
    # a path inside an alias is placed at the alias
    assert source.locate(("rules", 1, "when", 0, "episode")) == (10, 5)


# --- pack test files go through the same loader ---------------------------------------------


@pytest.mark.parametrize(
    ("file", "where", "message"),
    [
        ("packtest_surrogate.yaml", (6, 32, "cases[0].episodes[0]"), SURROGATE),
        ("packtest_before_year_1.yaml", (2, 1, "now"), "this time falls before year 1"),
        (
            "packtest_duration_inf.yaml",
            (6, 52, "cases[0].episodes[0].at.days"),
            "not a finite number: '.inf'",
        ),
    ],
)
def test_pack_test_file_is_refused_with_position(
    file: str, where: tuple[int, int, str], message: str
) -> None:
    with pytest.raises(IRError) as info:
        load_tests(CORPUS / file)
    assert (info.value.line, info.value.col, info.value.path) == where, str(info.value)
    assert message in info.value.issue.message


def test_deep_pack_test_file_is_refused() -> None:
    text = "pack: default\nnow: 2026-03-02T03:00:00+00:00\ncases: " + "[" * DEEP + "]" * DEEP
    with pytest.raises(IRError) as info:
        load_tests_text(text, "t.yaml")
    assert str(info.value).startswith("t.yaml:3:71: cases" + "[0]" * 63 + ": nesting depth")


# --- through the CLI, in a subprocess with bounded memory ---------------------------------


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@dataclass(frozen=True)
class Expected:
    """One refused file: where its single error line must point."""

    file: Path
    line: int
    col: int


def cli_runs(generated: dict[str, Path]) -> dict[str, tuple[tuple[str, ...], str, list[Expected]]]:
    """Command line, error-line prefix, and the files refused, in order, per run."""
    surrogate = Expected(CORPUS / "surrogate_value.yaml", 4, 19)
    laughs = Expected(CORPUS / "billion_laughs.yaml", 10, 10)
    refused = [
        Expected(generated["flow_sequences_100000"], 1, 67),
        Expected(generated["block_sequences_100000"], 1, 129),
        Expected(generated["flow_mappings_100000"], 1, 256),
        laughs,
        surrogate,
        Expected(CORPUS / "duration_1e300.yaml", 7, 31),
    ]
    runs = {"validate": (("validate", *(str(e.file) for e in refused)), "", refused)}
    for command in ("compile", "lint", "info", "test"):
        prefix = "" if command == "lint" else "error: "
        runs[f"{command}-surrogate"] = ((command, str(surrogate.file)), prefix, [surrogate])
    runs["compile-laughs"] = (("compile", str(laughs.file)), "error: ", [laughs])
    packtest = Expected(CORPUS / "packtest_surrogate.yaml", 6, 32)
    runs["test-file-surrogate"] = (
        ("test", str(DEFAULT_PACK), str(packtest.file)),
        "error: ",
        [packtest],
    )
    return runs


CliResult = tuple[str, list[Expected], int, str, str]


@pytest.fixture(scope="module")
def cli_results(generated: dict[str, Path]) -> Iterator[dict[str, CliResult]]:
    """Every CLI run started at once (they are independent), then collected."""
    runs = cli_runs(generated)
    procs = {
        name: subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_limit_memory,
        )
        for name, (args, _, _) in runs.items()
    }
    results = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=CLI_TIMEOUT)
            _, prefix, expected = runs[name]
            results[name] = (prefix, expected, proc.returncode, out, err)
        yield results
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


CLI_RUN_NAMES = [
    "validate",
    "compile-surrogate",
    "lint-surrogate",
    "info-surrogate",
    "test-surrogate",
    "compile-laughs",
    "test-file-surrogate",
]


@pytest.mark.parametrize("name", CLI_RUN_NAMES)
def test_cli_refuses_with_one_positioned_line_per_file(
    name: str, cli_results: dict[str, CliResult]
) -> None:
    prefix, expected, code, out, err = cli_results[name]
    assert "Traceback" not in err
    assert code == 1, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == len(expected), err
    for line, want in zip(lines, expected, strict=True):
        assert line.startswith(f"{prefix}{want.file}:{want.line}:{want.col}: "), err


def test_cli_runs_are_all_checked(generated: dict[str, Path]) -> None:
    assert sorted(cli_runs(generated)) == sorted(CLI_RUN_NAMES)
