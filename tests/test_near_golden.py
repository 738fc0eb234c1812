"""``near`` decisions pinned: the facts a paraphrase pack leaves, with their confidences
(the rounded cosines), the facts each update replaced and the cosines cited, over a
seeded data set on both backends, must equal ``fixtures/near/golden.json``.

The fixture was written by an earlier version of the ranking (one ``einsum`` over every
fact, each text embedded by itself); any change to how vectors are made, cached, loaded
or ranked must leave these decisions byte for byte as they were. Regenerate only for a
deliberate change of the embedder (a new version): ``python tests/test_near_golden.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import BACKENDS, memory_location
from near_packs import merge_or_add

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.model.deltas import AddDelta, FactPayload
from stargraph_mem.stores.models import Episode

GOLDEN = Path(__file__).parent / "fixtures" / "near" / "golden.json"

PACK = merge_or_add("golden_near", 0.55)

SWEEP = """\
ir_version: 1
pack: golden_sweep
version: "1"
defaults:
  cadence: {cron: "0 4 * * *"}
rules:
  - id: fold
    when:
      - fact: {as: keep, valid_from: {bind: kept_at}}
      - fact:
          as: twin
          near: {of: keep, top_k: 3, min_cosine: 0.7, cosine: cos}
          valid_from: {gt: {var: kept_at}}
    emit:
      kind: delete
      replaces: [twin]
      confidence: {from: cos}
      sources: [twin]
"""

T0 = datetime(2026, 3, 1, tzinfo=UTC)
WORDS = [
    "tea",
    "coffee",
    "green",
    "black",
    "morning",
    "evening",
    "meeting",
    "monday",
    "tuesday",
    "project",
    "report",
    "budget",
    "dog",
    "cat",
    "garden",
    "train",
    "station",
    "lisbon",
    "paris",
    "book",
    "film",
    "music",
    "piano",
    "running",
    "swim",
    "doctor",
    "dentist",
    "birthday",
    "sister",
    "brother",
    "office",
    "laptop",
    "phone",
    "holiday",
    "beach",
    "the",
    "a",
    "is",
    "on",
    "my",
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7)))


def vary(text: str, rng: random.Random) -> str:
    """Another spelling of ``text``: case, punctuation, a word dropped or added."""
    words = text.split()
    how = rng.randrange(4)
    if how == 0:
        return text.upper() + "!"
    if how == 1 and len(words) > 2:
        del words[rng.randrange(len(words))]
    elif how == 2:
        words.insert(rng.randrange(len(words) + 1), rng.choice(WORDS))
    else:
        words = [w.capitalize() for w in words]
    return " ".join(words) + "."


def data() -> tuple[list[AddDelta], list[list[Episode]]]:
    """300 seeded facts (two users), then three nightly passes of 40 episodes each."""
    rng = random.Random(20261129)
    texts = [sentence(rng) for _ in range(300)]
    seeds = [
        AddDelta(
            user=f"u{i % 2}",
            agent="a",
            fact=FactPayload(subject=t, predicate="said", object=t),
            source_episode_ids=[f"seed{i}"],
            rule_id="seed",
            confidence=0.5,
            promotion_ts=T0 - timedelta(days=2, seconds=i),
        )
        for i, t in enumerate(texts)
    ]
    passes = []
    for p in range(3):
        batch = []
        for j in range(40):
            n = 40 * p + j
            text = vary(rng.choice(texts), rng) if rng.random() < 0.6 else sentence(rng)
            at = T0 + timedelta(days=p, minutes=j)
            batch.append(
                Episode(
                    id=f"e{n}", content=text, timestamp=at, user=f"u{n % 2}", session="s", agent="a"
                )
            )
        passes.append(batch)
    return seeds, passes


def location(backend: str) -> AbstractAsyncContextManager[str]:
    """Where a fresh memory of ``backend`` lives (dropped afterwards)."""
    return memory_location(backend, "near-golden-")


async def decisions(where: str) -> dict[str, Any]:
    """What the packs decide over :func:`data`: the deltas of every pass (kind, rule,
    statement, confidence, the replaced facts' statements, the cosines cited), then the
    facts left; then 30 streamed records (a pack on ``every: 1``) and the facts left."""
    seeds, passes = data()
    pack, sweep = compile_text(PACK), compile_text(SWEEP)
    out: dict[str, Any] = {"passes": []}
    async with Consolidator(where, [pack, sweep]) as mem:
        await mem.fact_store.apply_deltas(seeds, pack_hash="seed")
        statement = {f.id: f.subject for f in await mem.facts(status="all")}
        for p, batch in enumerate(passes):
            await mem.memory.put_many(batch)
            report = await mem.consolidate(now=T0 + timedelta(days=p, hours=5))
            for f in await mem.facts(status="all"):
                statement.setdefault(f.id, f.subject)
            made = []
            for done in report.passes:
                for delta in done.deltas:
                    bindings = delta.bindings or {}
                    made.append(
                        [
                            delta.kind,
                            delta.rule_id,
                            delta.user,
                            getattr(getattr(delta, "fact", None), "subject", None),
                            getattr(delta, "confidence", None),
                            [statement[i] for i in getattr(delta, "replaces", ()) or ()],
                            bindings.get("twin.cosine"),
                            statement.get(str(bindings.get("twin.fact"))),
                        ]
                    )
            made.sort(key=json.dumps)
            out["passes"].append(made)
        out["facts"] = sorted(
            [f.user, f.subject, round(f.confidence, 6)] for f in await mem.facts()
        )
    # then streaming: each record's pass ranks the facts the records before it left
    streaming = compile_text(PACK.replace('{cron: "0 3 * * *"}', "{every: 1}"))
    rng = random.Random(7)
    texts = sorted(row[1] for row in out["facts"])
    async with Consolidator(where, [streaming]) as mem:
        for n in range(30):
            text = vary(rng.choice(texts), rng) if n % 3 else sentence(rng)
            at = T0 + timedelta(days=5, minutes=n)
            await mem.record(
                Episode(
                    id=f"r{n}", content=text, timestamp=at, user=f"u{n % 2}", session="s", agent="a"
                )
            )
        out["streamed"] = sorted(
            [f.user, f.subject, round(f.confidence, 6)] for f in await mem.facts()
        )
    return out


@pytest.mark.parametrize("backend", BACKENDS)
async def test_near_decisions_match_the_golden_fixture(backend: str) -> None:
    async with location(backend) as where:
        got = await decisions(where)
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert json.loads(json.dumps(got)) == expected
    assert sum(len(made) for made in expected["passes"]) > 100  # the data exercises it
    kinds = {row[0] for made in expected["passes"] for row in made}
    assert kinds == {"add", "update", "delete"}


async def _write() -> None:  # pragma: no cover - run by hand to regenerate
    with tempfile.TemporaryDirectory() as tmp:
        got = await decisions(str(Path(tmp) / "m.db"))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(_write())
