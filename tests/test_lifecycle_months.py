"""Facts over months: the README's step-by-step example run verbatim, and nightly sweeps
against the same months in a few steps (the decay curve does not depend on the nights)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backends import NewLocation
from readme_helpers import ROOT, check_transcript

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import FactNotFoundError
from stargraph_mem.model.episodes import Episode

PACK = ROOT / "rules" / "fact_lifecycle.yaml"


def test_readme_months_example_runs_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rules").mkdir()
    shutil.copy(PACK, tmp_path / "rules")
    monkeypatch.chdir(tmp_path)
    check_transcript("Simulated months, one `--now` step at a time", 12)


def _opera(n: int, at: datetime) -> Episode:
    return Episode(
        id=f"o{n}",
        content="Alice likes opera",
        timestamp=at,
        user="alice",
        session=f"s{n}",
        agent="rag",
        metadata={"subject": "alice", "predicate": "likes", "object": "opera"},
    )


async def _confidences(location: str, nights: list[datetime]) -> dict[datetime, float]:
    """Opera's current confidence after each of ``nights`` (consolidated at 04:00)."""
    out: dict[datetime, float] = {}
    async with Consolidator.open(location, [PACK]) as mem:
        await mem.memory.put_many([_opera(1, datetime(2026, 1, 1, 9, tzinfo=UTC))])
        for night in nights:
            await mem.consolidate(now=night)
            (fact,) = await mem.facts(user="alice")
            out[night] = fact.confidence
    return out


async def test_nightly_decay_equals_the_same_months_in_few_steps(
    new_location: NewLocation,
) -> None:
    first = datetime(2026, 1, 2, 4, tzinfo=UTC)
    nightly = [first + timedelta(days=d) for d in range(31)]
    few = [first, first + timedelta(days=10), first + timedelta(days=30)]
    every = await _confidences(new_location(), nightly)
    some = await _confidences(new_location(), few)
    assert some[few[1]] == pytest.approx(0.6 * 2.718281828459045 ** (-0.05 * 10**0.8), abs=1e-9)
    for night in few:  # each night rounds to 9 decimals: at most 5e-10 apart per night
        assert every[night] == pytest.approx(some[night], abs=5e-10 * len(nightly)), night
    assert every[nightly[7]] < every[nightly[6]] == 0.6  # the first night a week after


PINS = """\
ir_version: 1
pack: pins
version: "1"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {every: 1}}
rules:
  - id: add
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
  - id: keep_pinned
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}, pinned: true}
    emit: {kind: noop, reason: "{o} ignored: pinned"}
  - id: replace
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}, object: {ne: {var: o}}, pinned: false}
    emit: {kind: update, subject: "{s}", predicate: "{p}", object: "{o}", replaces: [f]}
"""


async def test_a_pin_between_records_is_seen_by_the_next_pass(new_location: NewLocation) -> None:
    """Rules with an episode pattern that test ``pinned`` see a pin made between two
    records of the same Consolidator (its facts are not reused across runs)."""
    t = datetime(2026, 1, 1, 9, tzinfo=UTC)
    async with Consolidator(new_location(), [compile_text(PINS)], clock=lambda: t) as mem:
        tea = _opera(1, t).model_copy(
            update={"metadata": {**_opera(1, t).metadata, "object": "tea"}}
        )
        await mem.record(tea)
        (fact,) = await mem.facts(user="alice")
        assert await mem.pin(fact.id)
        report = await mem.record(_opera(2, t))
        assert [d.rule_id for p in report.passes for d in p.deltas] == ["keep_pinned"]
        assert [f.object for f in await mem.facts(user="alice")] == ["tea"]


async def test_record_access_counts_reads_and_refuses_unknown_ids(
    new_location: NewLocation,
) -> None:
    t = datetime(2026, 1, 1, 9, tzinfo=UTC)
    async with Consolidator(new_location(), [compile_text(PINS)], clock=lambda: t) as mem:
        await mem.record(_opera(1, t))
        (fact,) = await mem.facts(user="alice")
        await mem.record_access([fact.id], at=t + timedelta(days=2))
        await mem.record_access([fact.id], at=t + timedelta(days=1))  # never moves back
        access = await mem.access(fact.id)
        assert (access.count, access.last_access) == (2, t + timedelta(days=2))
        with pytest.raises(FactNotFoundError):
            await mem.record_access([fact.id, "f-nope"])
        with pytest.raises(ValueError):
            await mem.record_access([fact.id], at=datetime(2026, 1, 5))  # naive
        assert (await mem.access(fact.id)).count == 2  # nothing recorded by either
