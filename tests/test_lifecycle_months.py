"""Facts over months: the README's step-by-step example run verbatim, and nightly sweeps
against the same months in a few steps (the decay curve does not depend on the nights)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backends import NewLocation
from readme_helpers import ROOT, check_transcript

from stargraph_mem.engine.api import Consolidator
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
