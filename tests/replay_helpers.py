"""Shared set-up for the replay tests: a seeded database and a changed frequency pack."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from e2e_helpers import FREQUENCY, NOW, episode, spo

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode

NOW_TEXT = NOW.isoformat()

SIGHTINGS: list[tuple[str, str, str, str, int]] = [
    ("alice", "alice", "likes", "tea", 4),  # promoted by both thresholds
    ("alice", "alice", "drinks", "coffee", 2),  # promoted only with threshold 2
    ("alice", "alice", "reads", "poetry", 1),  # never promoted
    ("bob", "bob", "plays", "chess", 2),  # promoted only with threshold 2
]
"""(user, subject, predicate, object, distinct sessions) of the seeded observations."""


def sightings(rows: Sequence[tuple[str, str, str, str, int]]) -> list[Episode]:
    """One episode per (observation, session), sessions ``s1`` … ``sN``, a minute apart."""
    out: list[Episode] = []
    for user, subject, predicate, obj, sessions in rows:
        for n in range(1, sessions + 1):
            eid = f"{user}-{predicate}-{obj}-{n}"
            out.append(
                episode(eid, len(out), user=user, session=f"s{n}", **spo(subject, predicate, obj))
            )
    return out


async def seed(path: Path, rows: Sequence[tuple[str, str, str, str, int]] = SIGHTINGS) -> None:
    """Store the sightings and consolidate them once with the shipped frequency pack."""
    async with Consolidator.open(path, [FREQUENCY]) as mem:
        await mem.memory.put_many(sightings(rows))
        await mem.consolidate(now=NOW)


def frequency_pack(tmp_path: Path, at_least: int) -> Path:
    """A copy of the frequency pack that promotes at ``at_least`` distinct sessions."""
    text = FREQUENCY.read_text(encoding="utf-8")
    assert text.count("at_least: 3") == 1
    path = tmp_path / f"frequency_{at_least}.yaml"
    path.write_text(text.replace("at_least: 3", f"at_least: {at_least}"), encoding="utf-8")
    return path


def fingerprint(path: Path) -> tuple[str, list[str]]:
    """sha256 of the database file and the names of the files beside it."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, sorted(p.name for p in path.parent.iterdir())
