"""The operator table: every backend implements every operator, and they all agree.

Backends: the CLIPS emitter (a rule's episode pattern), the SQL ``select`` compiler (run
on a real SQLite database under its authorizer), lint's reasoning and the plain-Python
reference evaluator. The property test feeds random conditions and random episode values
(well-typed, missing, ``null``, of another type) through CLIPS, SQL and the reference.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packs_helpers import NOW, PARTITION, compile_ok, first_issue, run_pass
from pydantic import ValidationError

from stargraph_mem.authoring.lint import LINT_IMPLIES, LINT_NARROW
from stargraph_mem.compiler.expressions import CLIPS_TESTS
from stargraph_mem.compiler.pack import CompiledPack
from stargraph_mem.compiler.select_sql import SQL_TESTS, compile_select
from stargraph_mem.engine.passes.filters import select_seqs_in
from stargraph_mem.errors import CompileError, IRError
from stargraph_mem.ir.models import Condition, FieldType, SelectClause
from stargraph_mem.ir.operators import OPERATORS, markdown_table
from stargraph_mem.ir.reference import REFERENCE, evaluate, passes
from stargraph_mem.model.time import to_us as to_micros
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

BACKENDS: Mapping[str, Mapping[str, Any]] = {
    "CLIPS emitter (compiler/generator.py CLIPS_TESTS)": CLIPS_TESTS,
    "SQL select (compiler/select_sql.py SQL_TESTS)": SQL_TESTS,
    "lint narrowing (authoring/lint.py LINT_NARROW)": LINT_NARROW,
    "lint implication (authoring/lint.py LINT_IMPLIES)": LINT_IMPLIES,
    "reference evaluator (ir/reference.py REFERENCE)": REFERENCE,
}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_backend_implements_exactly_the_operator_table(backend: str) -> None:
    table = BACKENDS[backend]
    missing = [op for op in OPERATORS if op not in table]
    extra = [op for op in table if op not in OPERATORS]
    assert not missing, f"{backend} lacks: {', '.join(missing)}"
    assert not extra, f"{backend} implements operators not in the table: {', '.join(extra)}"


def test_condition_model_has_one_field_per_operator() -> None:
    aliases = {f.alias or name for name, f in Condition.model_fields.items()} - {"bind"}
    assert aliases == set(OPERATORS)


def test_unknown_operator_is_an_error_everywhere() -> None:
    with pytest.raises(ValidationError, match="zz"):
        Condition.model_validate({"zz": 1})
    cond = Condition.model_validate({"eq": "a"})
    with pytest.raises(KeyError, match="unknown operator 'zz'"):
        cond.get("zz")
    with pytest.raises(KeyError, match="unknown operator 'zz'"):
        passes("zz", "a", "a", "string")
    from stargraph_mem.compiler.generator import Generator

    gen = Generator.__new__(Generator)
    with pytest.raises(CompileError, match="unknown operator 'zz'"):
        gen.test_terms(None, "string", "zz", "a", "?v")


def test_select_compiler_refuses_an_operator_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the table, an unknown test was silently dropped from the SQL."""
    clause = SelectClause.model_validate({"content": {"prefix": "a"}})
    monkeypatch.delitem(SQL_TESTS, "prefix")
    with pytest.raises(CompileError, match="unknown operator 'prefix'"):
        compile_select(clause, {"content": "string"})


def test_readme_operator_table_matches_the_specification() -> None:
    readme = (Path(__file__).parent.parent / "docs" / "rule-packs.md").read_text(encoding="utf-8")
    assert markdown_table() in readme, "run `python scripts/gen_docs.py` to regenerate the table"


def test_bare_flag_names_are_ambiguous() -> None:
    text = PACK_HEAD + "      - episode: {topic: missing}\n    emit: {kind: noop}\n"
    assert "a bare 'missing' is ambiguous" in first_issue(text)
    quoted = PACK_HEAD + "      - episode: {topic: {eq: missing}}\n    emit: {kind: noop}\n"
    compile_ok(quoted)


def test_contains_on_a_list_refuses_an_item_that_cannot_exist() -> None:
    text = PACK_HEAD.replace("topic: string", "topic: list") + (
        '      - episode: {topic: {contains: "a b"}}\n    emit: {kind: noop}\n'
    )
    assert "never has the item 'a b'" in first_issue(text)


PACK_HEAD = """\
ir_version: 1
pack: ops
version: "1"
fields:
  topic: string
rules:
  - id: r
    when:
"""

# --- the property: CLIPS, SQL and the reference give the same answers ----------------------

FIELD = "f"
STRINGS = ["", "a", "ab", "b", "A", "é", "e\u0301", "ß", "SS", "1", "3", "a b", "日本", "a%", "_"]
ITEMS = ["a", "b", "ab", "A", "é", "x\ty", "1"]
TIMES = [
    "2026-01-01T00:00:00+00:00",
    "2026-01-01T01:00:00+01:00",
    "2025-12-31T23:59:59.999999-05:00",
    "2026-01-01T12:00:00.000001+00:00",
    "2025-06-01T00:00:00Z",
]
DURATIONS = [{"days": 1}, {"hours": 2}, {"days": 200}, {"minutes": 90, "seconds": 1}]
OTHER = [1, 0, 2.5, "1", "true", True, False, ["a"], {"k": 1}, "2026-01-01T00:00:00"]


def _operand(ftype: FieldType, string_operand: bool) -> st.SearchStrategy[Any]:
    if string_operand:
        return st.sampled_from(ITEMS if ftype == "list" else STRINGS)
    return {
        "string": st.sampled_from(STRINGS),
        "integer": st.integers(-3, 3) | st.sampled_from([2**63 - 1, -(2**63)]),
        "number": st.integers(-3, 3) | st.sampled_from([0.5, -1.25, 1e300, 3.0]),
        "boolean": st.booleans(),
        "timestamp": st.sampled_from(TIMES),
        "list": st.nothing(),
    }[ftype]


@st.composite
def _conditions(draw: st.DrawFn, ftype: FieldType) -> dict[str, Any]:
    usable = [op for op in OPERATORS.values() if ftype in op.field_types]
    chosen = draw(st.lists(st.sampled_from(usable), min_size=1, max_size=2, unique=True))
    if any(op.name == "missing" for op in chosen):
        chosen = [OPERATORS["missing"]]
    if {op.name for op in chosen} == {"exists", "missing"}:
        chosen = [OPERATORS["exists"]]
    cond: dict[str, Any] = {}
    for op in chosen:
        if op.operand == "flag":
            cond[op.name] = True
        elif op.operand == "duration":
            cond[op.name] = draw(st.sampled_from(DURATIONS))
        elif op.operand == "values":
            cond[op.name] = draw(st.lists(_operand(ftype, False), max_size=3))
        else:
            cond[op.name] = draw(_operand(ftype, op.string_operand))
    return cond


def _values(ftype: FieldType) -> st.SearchStrategy[Any]:
    typed: st.SearchStrategy[Any] = {
        "string": st.sampled_from(STRINGS),
        "integer": st.integers(-4, 4) | st.sampled_from([2**63 - 1, -(2**63), 2**64 - 1]),
        "number": st.integers(-4, 4) | st.sampled_from([0.5, -1.25, 3.0, 1e300, 2**64 - 1]),
        "boolean": st.booleans(),
        "timestamp": st.sampled_from([*TIMES, "2026-01-01", "not a time", "2026-01-02T00:00Z"]),
        "list": st.lists(st.sampled_from([*ITEMS, "", "a b", 3]), max_size=3),
    }[ftype]
    absent = st.just(ABSENT)
    return typed | absent | st.none() | st.sampled_from(OTHER)


ABSENT = object()
TYPES: list[FieldType] = ["string", "integer", "number", "boolean", "timestamp", "list"]


def _pack_text(ftype: FieldType, cond: dict[str, Any]) -> str:
    pack = {
        "ir_version": 1,
        "pack": "ops",
        "version": "1",
        "fields": {FIELD: ftype},
        "rules": [
            {
                "id": "r",
                "select": {FIELD: cond},
                "when": [{"episode": {FIELD: cond}}],
                "emit": {"kind": "noop"},
            }
        ],
    }
    return yaml.safe_dump(pack, allow_unicode=True, sort_keys=False)


def _episodes(values: list[Any]) -> list[Episode]:
    out = []
    for i, value in enumerate(values, start=1):
        meta = {} if value is ABSENT else {FIELD: value}
        out.append(
            Episode(
                id=f"e{i}",
                content="c",
                timestamp=NOW - timedelta(minutes=len(values) - i),
                user=PARTITION.user,
                session="s",
                agent=PARTITION.agent,
                metadata=meta,
            )
        )
    return out


def _clips_matches(compiled: CompiledPack, episodes: list[Episode]) -> set[str]:
    records = [e_record(i, e) for i, e in enumerate(episodes, start=1)]
    out = run_pass(compiled, records, now=NOW)
    return {src for d in out.deltas for src in d.source_episode_ids}


def e_record(seq: int, e: Episode) -> Any:
    from stargraph_mem.stores.memory import EpisodeRecord

    return EpisodeRecord(
        seq=seq,
        id=e.id,
        content=e.content,
        timestamp=e.timestamp,
        source_node=e.source_node,
        user=e.user,
        session=e.session,
        agent=e.agent,
        metadata=dict(e.metadata),
    )


async def _store(path: Path, episodes: list[Episode]) -> None:
    async with SQLiteMemoryStore(path=path) as store:
        await store.put_many(episodes)


async def _stored(path: Path) -> list[EpisodeRecord]:
    async with SQLiteMemoryStore(path=path) as store:
        return await store.since(PARTITION, 0)


def _sql_matches(compiled: CompiledPack, db: Path, episodes: list[Episode]) -> set[str]:
    select = compiled.rules[0].select
    assert select is not None
    records = asyncio.run(_stored(db))
    seqs = select_seqs_in(
        records, PARTITION, 0, 10**9, select.sql, select.params(to_micros(NOW)), rule_id="r"
    )
    return {f"e{seq}" for seq in seqs}


def _reference(ftype: FieldType, cond: dict[str, Any], values: list[Any]) -> set[str]:
    model = Condition.model_validate(cond)
    return {
        f"e{i}"
        for i, value in enumerate(values, start=1)
        if evaluate(model, ftype, None if value is ABSENT else value, now_us=to_micros(NOW))
    }


@st.composite
def _cases(draw: st.DrawFn) -> tuple[FieldType, dict[str, Any], list[Any]]:
    ftype = draw(st.sampled_from(TYPES))
    cond = draw(_conditions(ftype))
    values = draw(st.lists(_values(ftype), min_size=1, max_size=8))
    return ftype, cond, values


def _agree(ftype: FieldType, cond: dict[str, Any], values: list[Any]) -> None:
    try:
        compiled = compile_ok(_pack_text(ftype, cond))
    except IRError as exc:  # pragma: no cover - the strategy only draws valid conditions
        raise AssertionError(f"valid condition refused: {cond} on {ftype}: {exc}") from exc
    episodes = _episodes(values)
    expected = _reference(ftype, cond, values)
    clips = _clips_matches(compiled, episodes)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        asyncio.run(_store(db, episodes))
        sql = _sql_matches(compiled, db, episodes)
    shown = {f"e{i}": v for i, v in enumerate(values, start=1)}
    assert clips == expected, f"CLIPS {sorted(clips)} vs reference {sorted(expected)}: {shown}"
    assert sql == expected, f"SQL {sorted(sql)} vs reference {sorted(expected)}: {shown}"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_cases())
def test_clips_sql_and_reference_agree(case: tuple[FieldType, dict[str, Any], list[Any]]) -> None:
    _agree(*case)


def _every_operator_cases() -> list[tuple[str, FieldType, dict[str, Any]]]:
    literal: dict[FieldType, Any] = {
        "string": "ab",
        "integer": 2,
        "number": 0.5,
        "boolean": True,
        "timestamp": TIMES[1],
        "list": "a",
    }
    cases = []
    for op in OPERATORS.values():
        for ftype in sorted(op.field_types):
            if op.operand == "flag":
                operand: Any = True
            elif op.operand == "duration":
                operand = {"days": 200}
            elif op.operand == "values":
                operand = [literal[ftype], literal[ftype]]
            else:
                operand = literal[ftype]
            cases.append((op.name, ftype, {op.name: operand}))
    return cases


SAMPLES: dict[FieldType, list[Any]] = {
    "string": ["ab", "abc", "xab", "", None, ABSENT, 2, "Ab"],
    "integer": [2, 1, 3, None, ABSENT, "2", 2.0, True],
    "number": [0.5, 0, 1, None, ABSENT, "0.5", False],
    "boolean": [True, False, None, ABSENT, 1, "true"],
    "timestamp": [TIMES[0], TIMES[1], TIMES[3], TIMES[4], None, ABSENT, "2026-01-01", 5],
    "list": [["a"], ["b", "a"], ["ab"], [], None, ABSENT, "a", ["a", 1], ["a b"]],
}


@pytest.mark.parametrize(
    ("op", "ftype", "cond"),
    _every_operator_cases(),
    ids=[f"{op}-{ftype}" for op, ftype, _ in _every_operator_cases()],
)
def test_every_operator_runs_in_select_and_clips(
    op: str, ftype: FieldType, cond: dict[str, Any]
) -> None:
    """Each operator on each field type it allows, through a real database and CLIPS."""
    _agree(ftype, cond, SAMPLES[ftype])


def test_select_on_a_list_field_runs_on_the_database() -> None:
    """``contains`` on a list compiles to json_each, which the select authorizer allows."""
    values: list[Any] = [["urgent", "x"], ["later"], ABSENT]
    compiled = compile_ok(_pack_text("list", {"contains": "urgent"}))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        asyncio.run(_store(db, _episodes(values)))
        assert _sql_matches(compiled, db, _episodes(values)) == {"e1"}


def test_timestamp_metadata_compares_instants_not_text() -> None:
    """+01:00 at 01:00 is the same instant as 00:00 UTC: equal in every backend."""
    cond = {"eq": "2026-01-01T00:00:00+00:00"}
    values = ["2026-01-01T01:00:00+01:00", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01Z"]
    assert _reference("timestamp", cond, values) == {"e1", "e2"}
    _agree("timestamp", cond, values)
