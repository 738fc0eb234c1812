"""What ``near`` (similarity in rules) costs: the same pack with and without it, one run.

``nightly``: a partition holding ``--facts`` current facts (made by ``apply_deltas``, untimed)
gets ``--episodes`` new episodes, then one ``consolidate`` pass is timed. Pack A merges an
episode into the fact nearest in meaning (``near``, top 1, cosine ≥ 0.8) or adds it; pack B
is the same pack deciding on the exact text instead (``object: {eq: {var: c}}``). Each
round builds a fresh memory for each pack, A and B in turn; ``cold`` clears the runtime's
vectors first and none are stored (a memory's first pass with ``near``: it embeds every
fact text, then stores those vectors), ``stored`` clears them too, after storing the
facts' vectors as a recall, ``stargraph-mem embed`` or an earlier pass does
(``embed_backfill``, untimed: the pass reads them instead of embedding; every later night
of a memory), ``warm`` keeps them (a process that ranked these facts before).

``record``: the same two packs on ``every: 1``, two memories of ``--facts`` facts each, blocks
of ``--block`` records taking turns; p50 of a ``record`` (put + its pass), wall and CPU.

Half the episodes repeat a stored statement: ``--repeats paraphrased`` (the default) in
other case and punctuation, which only pack A merges (it then writes more: a merge closes
a fact and asserts one where B only adds); ``--repeats verbatim`` word for word, which both
merge, so both make the same deltas and the ratio is what the ``near`` test itself costs.
``--exact normal_eq`` has pack B compare texts in content normal form (``normal_eq``): it
then merges the paraphrased repeats as A does, so both make the same deltas on that stream
too. Each part prints the deltas each pack made, by kind.

    PYTHONPATH=. python benchmarks/bench_similarity.py
    PYTHONPATH=. python benchmarks/bench_similarity.py --facts 1000 --episodes 100 --rounds 5
    PYTHONPATH=. python benchmarks/bench_similarity.py --repeats verbatim
    PYTHONPATH=. python benchmarks/bench_similarity.py --exact normal_eq
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.engine.api import Consolidator, runtime_for
from stargraph_mem.engine.passes.report import ConsolidationReport
from stargraph_mem.model.deltas import AddDelta, FactPayload
from stargraph_mem.stores.models import Episode

NEAR_PACK = """\
ir_version: 1
pack: bench_near
version: "1"
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: merge
    priority: 10
    when:
      - episode: {content: {bind: c}}
      - fact: {as: twin, predicate: said, near: {top_k: 1, min_cosine: 0.8, cosine: cos}}
    emit:
      kind: update
      replaces: [twin]
      subject: "{c}"
      predicate: said
      object: "{c}"
      confidence: {from: cos}
      sources: [twin]
  - id: add
    when:
      - episode: {content: {bind: c}}
      - not: {predicate: said, near: {top_k: 1, min_cosine: 0.8}}
    emit: {kind: add, subject: "{c}", predicate: said, object: "{c}"}
"""

EXACT_PACK = (
    NEAR_PACK.replace("bench_near", "bench_exact")
    .replace(
        "{as: twin, predicate: said, near: {top_k: 1, min_cosine: 0.8, cosine: cos}}",
        "{as: twin, predicate: said, object: {eq: {var: c}}}",
    )
    .replace("confidence: {from: cos}", "confidence: 0.9")
    .replace(
        "{predicate: said, near: {top_k: 1, min_cosine: 0.8}}",
        "{predicate: said, object: {eq: {var: c}}}",
    )
)


def exact_pack(op: str) -> str:
    """Pack B, comparing texts with ``op`` (``eq`` or ``normal_eq``)."""
    return EXACT_PACK.replace("{eq: {var: c}}", f"{{{op}: {{var: c}}}}")


T0 = datetime(2026, 1, 1, tzinfo=UTC)
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
    "friday",
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
    "password",
    "holiday",
    "beach",
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 7)))


def seeds(n: int, rng: random.Random) -> list[AddDelta]:
    out = []
    for i in range(n):
        text = sentence(rng)
        out.append(
            AddDelta(
                user="u",
                agent="a",
                fact=FactPayload(subject=text, predicate="said", object=text),
                source_episode_ids=[f"seed{i}"],
                rule_id="seed",
                confidence=0.8,
                promotion_ts=T0 - timedelta(days=1, seconds=i),
            )
        )
    return out


def episodes(
    n: int, rng: random.Random, start: int, known: list[str], verbatim: bool = False
) -> list[Episode]:
    """Half repeat a stored statement in other case and punctuation (``verbatim``: word for
    word, so the exact pack merges them too), half are new."""
    out = []
    for i in range(start, start + n):
        repeat = rng.choice(known) if i % 2 else ""
        text = (repeat if verbatim else repeat.upper() + "!") if i % 2 else sentence(rng)
        out.append(
            Episode(
                id=f"e{i}",
                content=text,
                timestamp=T0 + timedelta(seconds=i),
                user="u",
                session="s",
                agent="a",
            )
        )
    return out


async def nightly_once(
    pack: CompiledPack, path: Path, facts: int, n: int, mode: str, verbatim: bool = False
) -> tuple[float, float, Counter[str]]:
    """One nightly pass over the same data every time (seeded alike): wall and CPU s, and
    the deltas it made by kind."""
    rng = random.Random(1)
    made = seeds(facts, rng)
    async with Consolidator(path, [pack]) as mem:
        await mem.fact_store.apply_deltas(made, pack_hash="seed")
        known = [str(d.fact.subject) for d in made]
        await mem.memory.put_many(episodes(n, rng, 0, known, verbatim))
        if mode == "stored":  # the vectors recall stores (as after a recall), untimed
            await mem.embed_backfill()
        if mode != "warm":
            runtime_for(pack)._vectors.clear()
        gc.collect()  # each pass starts from a collected heap, whatever ran before it
        w0, c0 = time.perf_counter(), time.process_time()
        report = await mem.consolidate(now=T0 + timedelta(days=1))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        return wall, cpu, kinds(report)


def kinds(report: ConsolidationReport) -> Counter[str]:
    """The deltas of ``report``'s passes, by kind."""
    return Counter(delta.kind for done in report.passes for delta in done.deltas)


def shown(made: Mapping[str, Counter[str]]) -> str:
    """Each pack's deltas by kind, for the printed line."""
    return "; ".join(
        f"{name} " + " ".join(f"{kind}={n}" for kind, n in sorted(c.items()))
        for name, c in made.items()
    )


async def nightly(args: argparse.Namespace, near: CompiledPack, exact: CompiledPack) -> None:
    for mode in args.modes:
        walls: dict[str, list[float]] = {"near": [], "exact": []}
        cpus: dict[str, list[float]] = {"near": [], "exact": []}
        made: dict[str, Counter[str]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
            for r in range(args.rounds + 1):  # round 0 warms the process up, untimed
                for name, pack in (("near", near), ("exact", exact)):
                    path = Path(tmp) / f"{name}-{r}-{mode}.db"
                    wall, cpu, made[name] = await nightly_once(
                        pack, path, args.facts, args.episodes, mode, args.repeats == "verbatim"
                    )
                    if r:
                        walls[name].append(wall)
                        cpus[name].append(cpu)
        w = {k: statistics.median(v) * 1000 for k, v in walls.items()}
        c = {k: statistics.median(v) * 1000 for k, v in cpus.items()}
        label = {
            "cold": "cold (vectors cleared, none stored)",
            "stored": "cold (vectors cleared, the facts' vectors stored)",
            "warm": "warm (fact texts embedded before)",
        }[mode]
        print(
            f"nightly {label}, {args.repeats} repeats, B by {args.exact}: {args.facts} facts, "
            f"{args.episodes} episodes, "
            f"{args.rounds} rounds: near {w['near']:.1f} ms wall ({c['near']:.1f} CPU), "
            f"exact {w['exact']:.1f} ms ({c['exact']:.1f} CPU): ratio wall "
            f"{w['near'] / w['exact']:.2f}, CPU {c['near'] / c['exact']:.2f} "
            f"(deltas: {shown(made)})"
        )


async def record(args: argparse.Namespace) -> None:
    streaming = {
        name: compile_text(text.replace('{cron: "0 3 * * *"}', "{every: 1}"))
        for name, text in (("near", NEAR_PACK), ("exact", exact_pack(args.exact)))
    }
    rng = random.Random(7)
    made = seeds(args.facts, rng)
    known = [str(d.fact.subject) for d in made]
    walls: dict[str, list[float]] = {"near": [], "exact": []}
    cpus: dict[str, list[float]] = {"near": [], "exact": []}
    deltas: dict[str, Counter[str]] = {"near": Counter(), "exact": Counter()}
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        mems = {
            name: Consolidator(Path(tmp) / f"{name}.db", [pack]) for name, pack in streaming.items()
        }
        for mem in mems.values():
            await mem.bootstrap()
            await mem.fact_store.apply_deltas(made, pack_hash="seed")
        try:
            count = args.records + args.block
            stream = episodes(count, rng, 0, known, args.repeats == "verbatim")
            for block in range(args.records // args.block + 1):
                mine = stream[block * args.block : (block + 1) * args.block]
                for name, mem in mems.items():  # each pack records the same episodes
                    for ep in mine:
                        w0, c0 = time.perf_counter(), time.process_time()
                        report = await mem.record(ep)
                        w1, c1 = time.perf_counter(), time.process_time()
                        deltas[name] += kinds(report)
                        if block:  # the first block of each warms up, untimed
                            walls[name].append(w1 - w0)
                            cpus[name].append(c1 - c0)
        finally:
            for mem in mems.values():
                await mem.close()
    w = {k: statistics.median(v) * 1000 for k, v in walls.items()}
    c = {k: statistics.median(v) * 1000 for k, v in cpus.items()}
    print(
        f"record p50, {args.repeats} repeats, B by {args.exact}: {args.facts} facts, "
        f"{len(walls['near'])} records each: "
        f"near {w['near']:.2f} ms wall ({c['near']:.2f} CPU), exact {w['exact']:.2f} ms "
        f"({c['exact']:.2f} CPU): ratio wall {w['near'] / w['exact']:.2f}, "
        f"CPU {c['near'] / c['exact']:.2f} (deltas: {shown(deltas)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--parts", nargs="+", default=["nightly", "record"])
    parser.add_argument(
        "--repeats",
        default="paraphrased",
        choices=["paraphrased", "verbatim"],
        help="how the half of the episodes that repeat a stored statement repeat it: in "
        "other case and punctuation (only near merges them) or word for word (both packs "
        "merge them: the same deltas, so the ratio is what the near test itself costs)",
    )
    parser.add_argument(
        "--exact",
        default="eq",
        choices=["eq", "normal_eq"],
        help="how pack B compares the episode with a fact's text: word for word (eq) or in "
        "content normal form (normal_eq: case and punctuation ignored, so B merges the "
        "paraphrased repeats too and both packs make the same deltas)",
    )
    parser.add_argument(
        "--modes", nargs="+", default=["cold", "stored", "warm"], choices=["cold", "stored", "warm"]
    )
    args = parser.parse_args()
    near, exact = compile_text(NEAR_PACK), compile_text(exact_pack(args.exact))
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")
    if "nightly" in args.parts:
        asyncio.run(nightly(args, near, exact))
    if "record" in args.parts:
        asyncio.run(record(args))
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
