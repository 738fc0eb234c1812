"""Specification 004's retention modes (l2, huber, elastic) and 003's decay from the last
access, with source trust: the operator table's curves, the CLIPS emitter against the
reference evaluator, and the properties each mode keeps (bounds, monotone in time,
the same result however often a sweep runs)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import clips
import pytest
from backends import open_backend, raw_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from packs_helpers import PARTITION, T0, engine_fact

from stargraph_mem.compiler.expressions import RETENTION_CLIPS
from stargraph_mem.compiler.pack import compile_file, compile_text, validate_file
from stargraph_mem.compiler.sweep_sql import RETENTION_SQL
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import IRError
from stargraph_mem.ir.operators import RETENTION_MODES, retention_table
from stargraph_mem.ir.reference import RETENTION, access_boost, boosted, read_boost, retention
from stargraph_mem.model.deltas import UpdateDelta
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.fact import EngineFact

DAY = timedelta(days=1)
MODES = tuple(RETENTION_MODES)


def test_every_mode_has_every_backend() -> None:
    assert set(RETENTION) == set(RETENTION_CLIPS) == set(RETENTION_SQL) == set(MODES)
    assert MODES == ("l2", "huber", "elastic")


@pytest.mark.parametrize("mode", MODES)
def test_each_curve_is_one_at_zero_and_half_at_the_half_life(mode: str) -> None:
    assert RETENTION[mode](0.0) == 1.0
    assert RETENTION[mode](1.0) == pytest.approx(0.5, abs=1e-15)


def test_the_modes_differ_past_the_half_life_as_documented() -> None:
    # huber: linear after x = 1, reaching 0 at 1 + 1/ln 2; elastic keeps more than l2
    # before the half-life and less after it
    assert RETENTION["huber"](2.0) == pytest.approx(0.5 * (1 - math.log(2)))
    assert RETENTION["huber"](1 + 1 / math.log(2) + 1e-9) == 0.0
    assert RETENTION["elastic"](2.0) == pytest.approx(2.0**-3)
    assert RETENTION["l2"](2.0) == 0.25
    assert RETENTION["l2"](0.5) < RETENTION["elastic"](0.5) < 1


def test_access_boost_is_003s_capped_at_0_3() -> None:
    assert access_boost(0) == 0.0
    assert access_boost(20) == pytest.approx(0.05 * math.log(2))
    assert access_boost(10**9) == 0.3
    assert retention("l2", 1.0, 20) == pytest.approx(0.5 + 0.05 * math.log(2))
    assert retention("l2", 0.0, 10**9) == 1.0


AGES = st.floats(min_value=0, max_value=50, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(mode=st.sampled_from(MODES), x=AGES)
def test_the_clips_curve_is_the_reference_curve(mode: str, x: float) -> None:
    env = clips.Environment()
    value = env.eval(RETENTION_CLIPS[mode](repr(float(x))))
    assert float(value) == pytest.approx(RETENTION[mode](x), rel=1e-12, abs=1e-15)


@settings(max_examples=150, deadline=None)
@given(mode=st.sampled_from(MODES), a=AGES, b=AGES)
def test_each_curve_is_bounded_and_non_increasing(mode: str, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert 0.0 <= RETENTION[mode](hi) <= RETENTION[mode](lo) <= 1.0


def _pack(confidence: str, defaults: str = "") -> str:
    return f"""\
ir_version: 1
pack: nightly
version: "1"
{defaults}
rules:
  - id: forget
    cadence: {{cron: "0 3 * * *"}}
    when:
      - fact:
          as: f
          subject: {{bind: s}}
          predicate: {{bind: p}}
          object: {{bind: o}}
          valid_from: {{older_than: {{hours: 12}}}}
    emit:
      kind: update
      subject: "{{s}}"
      predicate: "{{p}}"
      object: "{{o}}"
      replaces: [f]
      sources: [f]
      confidence: {confidence}
"""


def _nightly(text: str, fact: EngineFact, nights: list[int]) -> EngineFact:
    """The fact after a sweep each of ``nights`` days apart (checking CLIPS' own value)."""
    runtime = PackRuntime(compile_text(text))
    now = T0
    try:
        for days in nights:
            now += days * DAY
            out = runtime.run_pass(partition=PARTITION, now=now, episodes=[], facts=[fact])
            (delta,) = out.deltas
            assert out.facts_after is not None
            (fact,) = out.facts_after
            assert fact.confidence == delta.confidence
    finally:
        runtime.close()
    return fact


SCHEDULES = st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    nights=SCHEDULES,
    reads=st.integers(min_value=0, max_value=500),
    trust=st.sampled_from([1.0, 0.7, 0.5]),
)
def test_retention_is_the_same_however_often_the_sweep_runs(
    mode: str, nights: list[int], reads: int, trust: float
) -> None:
    """Bounds, monotone in time, and idempotent across schedules: nightly or once, a fact
    ends on c0·Rt(x) (to the 9 decimals a confidence keeps, per run)."""
    text = _pack(f"{{retention: {{fact: f, mode: {mode}, half_life: 10d}}}}")
    start = replace(
        engine_fact("f1", ("s", "p", "o"), confidence=0.9),
        access_count=reads,
        last_access_us=to_us(T0) if reads else 0,
        trust=trust,
    )
    total = sum(nights)
    once = _nightly(text, start, [total])
    stepped = _nightly(text, start, nights)
    assert stepped.confidence == pytest.approx(once.confidence, abs=len(nights) * 1e-9)
    speed = 1.0 if trust == 1.0 else 3.0
    # confidences are stored to 9 places: a small one is within that step, not 1e-6 of it
    assert once.confidence == pytest.approx(
        0.9 * retention(mode, total * speed / 10, reads), rel=1e-6, abs=1e-9
    )
    assert 0.0 <= once.confidence <= 0.9
    later = _nightly(text, start, [total + 1])
    assert later.confidence <= once.confidence


def test_a_read_restarts_the_curve_from_the_current_confidence() -> None:
    text = _pack("{retention: {fact: f, mode: l2, half_life: 10d, boost: false}}")
    read = replace(
        engine_fact("f1", ("s", "p", "o"), confidence=0.8),
        access_count=1,
        last_access_us=to_us(T0 + 5 * DAY),
    )
    after = _nightly(text, read, [15])
    assert after.confidence == round(0.8 * 0.5, 9)  # 10 days since the read


def test_without_a_half_life_the_pack_gives_the_layers() -> None:
    text = _pack(
        "{retention: {fact: f, mode: l2, boost: false}}",
        "defaults: {half_lives: {episodic: 20d, semantic: null}}",
    )
    base = engine_fact("f1", ("s", "p", "o"), confidence=0.8)
    assert _nightly(text, base, [20]).confidence == 0.4
    assert _nightly(text, replace(base, layer="semantic"), [20]).confidence == 0.8
    assert _nightly(text, replace(base, layer="procedural"), [20]).confidence == 0.8
    assert _nightly(text, replace(base, layer="working"), [20]).confidence == 0.8


def test_ebbinghaus_from_the_last_access_with_trust_is_003s_decay() -> None:
    text = _pack(
        "{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8, since: last_access, untrusted_speed: 3}}"
    )
    read = replace(
        engine_fact("f1", ("s", "p", "o"), confidence=0.9),
        access_count=5,
        last_access_us=to_us(T0 + 10 * DAY),
    )
    assert _nightly(text, read, [30]).confidence == round(0.9 * math.exp(-0.1 * 20**0.8), 9)
    extracted = replace(read, trust=0.7)
    assert _nightly(text, extracted, [30]).confidence == round(0.9 * math.exp(-0.3 * 20**0.8), 9)
    # from reinforced_at, as before: reads change nothing
    plain = _pack("{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8}}")
    assert _nightly(plain, read, [30]).confidence == round(0.9 * math.exp(-0.1 * 30**0.8), 9)


BOOSTED = "{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8, since: last_access, boost: true}}"


def test_read_boost_is_003s_uncapped_and_the_confidence_stays_at_most_1() -> None:
    assert read_boost(0) == 0.0
    assert read_boost(20) == pytest.approx(0.05 * math.log(2))
    assert read_boost(10**6) > 0.3  # no 0.3 cap: 003 caps the confidence, not the boost
    assert boosted(0.5, 20, read_since=True) == pytest.approx(0.5 + 0.05 * math.log(2))
    assert boosted(0.5, 20, read_since=False) == 0.5
    assert boosted(0.99, 10**6, read_since=True) == 1.0


def test_ebbinghaus_boost_adds_003s_access_reinforcement_to_a_read_fact() -> None:
    # read 4 times, last 10 days after the fact was made; a sweep 30 days after it:
    # (0.6 + 0.05·ln(1 + 4/20)) · exp(−0.1 · 20^0.8) from the read
    read = replace(
        engine_fact("f1", ("s", "p", "o"), confidence=0.6),
        access_count=4,
        last_access_us=to_us(T0 + 10 * DAY),
    )
    expected = (0.6 + 0.05 * math.log(1.2)) * math.exp(-0.1 * 20**0.8)
    assert _nightly(_pack(BOOSTED), read, [30]).confidence == round(expected, 9)
    # never read since it was made: the plain curve
    unread = engine_fact("f1", ("s", "p", "o"), confidence=0.6)
    plain = 0.6 * math.exp(-0.1 * 30**0.8)
    assert _nightly(_pack(BOOSTED), unread, [30]).confidence == round(plain, 9)
    # the boost never lifts a confidence above 1
    many = replace(read, confidence=1.0, access_count=10**6)
    assert _nightly(_pack(BOOSTED), many, [10]).confidence == 1.0


@settings(max_examples=40, deadline=None)
@given(nights=SCHEDULES, reads=st.integers(min_value=0, max_value=5000))
def test_ebbinghaus_boost_is_earned_once_per_read_spell(nights: list[int], reads: int) -> None:
    """A read before the first sweep boosts once; the later sweeps (no new read) continue
    the curve from the read, so any schedule gives the one-shot value (CLIPS' working-memory
    value is checked against the Python one at every sweep)."""
    start = replace(
        engine_fact("f1", ("s", "p", "o"), confidence=0.7),
        access_count=reads,
        last_access_us=to_us(T0 + DAY / 2) if reads else 0,
    )
    total = sum(nights)
    once = _nightly(_pack(BOOSTED), start, [total])
    stepped = _nightly(_pack(BOOSTED), start, nights)
    assert stepped.confidence == pytest.approx(once.confidence, abs=len(nights) * 1e-9)
    days = total - 0.5 if reads else total
    expected = boosted(0.7, reads, reads > 0) * math.exp(-0.1 * days**0.8)
    assert once.confidence == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_ebbinghaus_boost_keeps_the_hash_of_packs_without_it() -> None:
    plain = compile_text(_pack("{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8}}"))
    explicit = compile_text(_pack("{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8, boost: false}}"))
    boosted_pack = compile_text(_pack(BOOSTED))
    assert plain.sha256 == explicit.sha256 != boosted_pack.sha256


@pytest.mark.parametrize(
    ("confidence", "message"),
    [
        (
            "{retention: {fact: s, mode: l2}}",
            "rules[0].emit.confidence.retention.fact: 's' is not a named 'fact' pattern",
        ),
        (
            "{retention: {fact: f, mode: l3}}",
            "rules[0].emit.confidence.retention.mode: expected 'l2', 'huber' or 'elastic'",
        ),
        ("{retention: {fact: f, half_life: 0d}}", "'half_life' must be a positive duration"),
    ],
)
def test_retention_errors_name_where(confidence: str, message: str) -> None:
    with pytest.raises(IRError) as caught:
        compile_text(_pack(confidence))
    assert message in str(caught.value)


DOCS = Path(__file__).parent.parent / "docs" / "rule-packs.md"
SECTION = "## Layers, memory types, trust and retention\n"


def test_the_docs_list_each_mode_with_its_formula() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("<!-- retention:start -->\n", 1)[1].split("<!-- retention:end -->", 1)[0]
    assert block == retention_table()


def test_the_docs_layers_example_validates_and_runs(tmp_path: Path) -> None:
    section = DOCS.read_text(encoding="utf-8").split(SECTION, 1)[1]
    path = tmp_path / "layered.yaml"
    path.write_text(section.split("```yaml\n", 1)[1].split("```\n", 1)[0], encoding="utf-8")
    assert validate_file(path) == []
    compiled = compile_file(path)
    old = replace(engine_fact("f1", ("s", "p", "o"), confidence=0.8), trust=0.5)
    runtime = PackRuntime(compiled)
    try:
        out = runtime.run_pass(partition=PARTITION, now=T0 + 10 * DAY, episodes=[], facts=[old])
    finally:
        runtime.close()
    (delta,) = out.deltas
    assert isinstance(delta, UpdateDelta)
    assert delta.confidence == 0.4  # 10 days × 3 (trust 0.5) = one 30-day half-life
    assert delta.trust == 0.5


@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
async def test_the_sql_curves_are_the_reference_curves(backend_name: str, tmp_path: Path) -> None:
    ages = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.4, 2.5, 3.0, 10.0]
    async with open_backend(backend_name, tmp_path) as backend:
        for mode in MODES:
            for x in ages:
                sql = f"SELECT {RETENTION_SQL[mode](repr(x))}"
                ((value,),) = await raw_rows(backend.facts, sql)
                assert float(value) == pytest.approx(RETENTION[mode](x), rel=1e-12, abs=1e-15)
