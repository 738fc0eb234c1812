"""Recall: retrieval quality on a generated conversation set, latency against ``search``,
the cost of an embedder on ``record``, and embedding backfill throughput.

Run (all four parts; ``--parts`` picks some, ``--no-minilm`` skips the real model when the
``embeddings`` extra is not installed, ``--postgres URL`` adds the latency part on
PostgreSQL)::

    python benchmarks/bench_recall.py
    python benchmarks/bench_recall.py --parts quality backfill
    python benchmarks/bench_recall.py --parts latency --postgres postgresql://postgres@127.0.0.1:5432/test

Parts:

- ``quality``: a seeded conversation set of ``--users`` users (one partition each, agent
  ``chat``) × ``--sessions`` sessions of ``--turns`` turns: chit-chat, assistant replies,
  near-miss sentences on the same topics, and a dozen personal statements per user drawn
  from templates (pets, home, job, food, hobbies, family, dates...). Each statement has
  two questions worded differently from it ("I adopted a beagle called Rex from the
  shelter" / "what kind of dog does he have?"), whose answer is that statement's episode.
  recall@10 (the answer among the first 10 hits of ``kinds="episodes"``, ``limit=10``) and
  MRR (1/rank of the answer within those 10, 0 when absent) for full-text only
  (``fts=1, vector=0, graph=0``), vector only (``fts=0, vector=1, graph=0``) and hybrid
  (the default weights), with the built-in embedder and with all-MiniLM-L6-v2. The memory
  is built once (``record_many`` + ``consolidate``) and copied for each embedder.
- ``backfill``: on those copies, ``embed_backfill`` of every episode, items/s per embedder.
- ``latency``: ``--facts`` current facts (``apply_deltas`` of adds) and ``--episodes``
  episodes (``put_many`` in batches of 10,000) in ONE partition, through the store
  APIs; the first recall catches up the full-text index and embeds everything with the
  built-in embedder (reported apart, as backfill); then ``--queries`` recalls and the same
  number of ``Consolidator.search`` calls (same queries, same partition, ``limit=10``,
  access recorded as by default), alternating one each: p50 / p95 and the p50 ratio.
- ``record``: streaming ``record`` p50 of an ``every: 1`` pack
  (``rules/dedup_against_facts.yaml`` on every record) with ``embedder="hash"``,
  ``"minilm"`` and ``None``, three memories, blocks of ``--block`` records taking turns;
  the ratios to ``None``. ``record`` never embeds (the backlog grows by one per record).

Figures are from one run; the machine may be shared, so compare ratios within a run. On a
loaded machine, numpy's multi-threaded BLAS can make the exact cosine of the vector
strategy wait for its threads: run with ``OPENBLAS_NUM_THREADS=1`` to see the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import re
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text
from stargraph_mem.embedding import Embedder, load_embedder
from stargraph_mem.embedding.hashing import STOPWORDS
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.model.episodes import Episode
from stargraph_mem.stores import AddDelta, FactPayload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PACK = ROOT / "rules" / "default.yaml"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 1, tzinfo=UTC)
AGENT = "chat"

# --- the conversation set ---------------------------------------------------------------

PETS = {
    "dog": ["beagle", "poodle", "labrador", "dachshund", "border collie", "greyhound"],
    "cat": ["siamese", "persian", "maine coon", "ragdoll", "sphynx", "bengal"],
}
PET_NAMES = ["Rex", "Luna", "Biscuit", "Pepper", "Milo", "Nala", "Otto", "Ziggy"]
CITIES = ["Lisbon", "Leeds", "Porto", "Utrecht", "Krakow", "Valencia", "Tallinn", "Ghent"]
JOBS = ["nurse", "carpenter", "data analyst", "pharmacist", "architect", "paramedic", "baker"]
COMPANIES = ["Northwind", "Globex", "Initech", "Vandelay", "Hooli", "Stark Logistics"]
FOODS = ["ramen", "lasagne", "pho", "paella", "goulash", "pad thai", "mushroom risotto"]
HOBBIES = ["rock climbing", "sailing", "birdwatching", "trail running", "pottery", "fencing"]
PEOPLE = ["Anna", "Tomas", "Ines", "Marek", "Sofia", "Jonas", "Lea", "Pavel", "Clara", "Hugo"]
MONTHS = ["January", "March", "April", "June", "August", "September", "October", "December"]
CARS = ["Volvo estate", "Fiat Panda", "Ford Focus", "Honda Civic", "Skoda Octavia"]
ALLERGENS = ["peanuts", "shellfish", "sesame", "kiwi", "almonds"]
INSTRUMENTS = ["cello", "violin", "saxophone", "banjo", "clarinet", "drums"]
COUNTRIES = ["Japan", "Iceland", "Peru", "Vietnam", "Morocco", "Norway", "Chile"]
LANGUAGES = ["Portuguese", "Korean", "Italian", "Swedish", "Greek", "Turkish"]
TEAMS = ["Celtic", "Ajax", "Benfica", "Everton", "Napoli", "Porto FC"]
DRINKS = ["oolong", "espresso", "matcha", "rooibos", "cold brew"]


@dataclass(frozen=True)
class Template:
    """A kind of personal statement: how it is said, and two questions asking for it
    in other words (``{he}``/``{his}`` filled by the user's pronouns)."""

    topic: str
    statement: str
    questions: tuple[str, str]


def _pet(rng: random.Random) -> dict[str, str]:
    kind = rng.choice(sorted(PETS))
    return {"kind": kind, "breed": rng.choice(PETS[kind]), "pet": rng.choice(PET_NAMES)}


TEMPLATES: list[tuple[Template, Callable[[random.Random], dict[str, str]]]] = [
    (
        Template(
            "pet",
            "I adopted a {breed} called {pet} from the shelter",
            ("What kind of {kind} does {he} have?", "Which animal lives with {him}?"),
        ),
        _pet,
    ),
    (
        Template(
            "home",
            "We finally moved into a flat in {city} last month",
            ("Which town is {his} home these days?", "Where does {he} live now?"),
        ),
        lambda r: {"city": r.choice(CITIES)},
    ),
    (
        Template(
            "job",
            "I started as a {job} at {company} on Monday",
            ("What does {he} do for a living?", "What is {his} occupation?"),
        ),
        lambda r: {"job": r.choice(JOBS), "company": r.choice(COMPANIES)},
    ),
    (
        Template(
            "food",
            "Honestly nothing beats a bowl of {food} after a long day",
            ("What is {his} favourite dish?", "Which meal does {he} love most?"),
        ),
        lambda r: {"food": r.choice(FOODS)},
    ),
    (
        Template(
            "hobby",
            "On weekends I go {hobby} with my cousin",
            ("How does {he} spend {his} free time?", "What pastime does {he} enjoy?"),
        ),
        lambda r: {"hobby": r.choice(HOBBIES)},
    ),
    (
        Template(
            "sibling",
            "My sister {person} is getting married in {month}",
            ("Which relative has a wedding coming up?", "Who in {his} family is engaged?"),
        ),
        lambda r: {"person": r.choice(PEOPLE), "month": r.choice(MONTHS)},
    ),
    (
        Template(
            "birthday",
            "I turn {age} on the {day}th of {month}",
            ("When is {his} birthday?", "How old will {he} be this year?"),
        ),
        lambda r: {
            "age": str(r.randint(25, 60)),
            "day": str(r.randint(4, 20)),
            "month": r.choice(MONTHS),
        },
    ),
    (
        Template(
            "car",
            "I finally sold my old {car} and bought a bicycle",
            ("What vehicle did {he} get rid of?", "How does {he} get around town now?"),
        ),
        lambda r: {"car": r.choice(CARS)},
    ),
    (
        Template(
            "allergy",
            "I can't eat {allergen}, my throat swells up",
            ("Does {he} have any food allergies?", "Which ingredient must {he} avoid?"),
        ),
        lambda r: {"allergen": r.choice(ALLERGENS)},
    ),
    (
        Template(
            "instrument",
            "I've been taking {instrument} lessons twice a week",
            ("Which musical instrument is {he} learning?", "Does {he} play any music?"),
        ),
        lambda r: {"instrument": r.choice(INSTRUMENTS)},
    ),
    (
        Template(
            "travel",
            "We booked flights to {country} for the summer holidays",
            ("Where is {he} going on vacation?", "Which trip abroad has {he} planned?"),
        ),
        lambda r: {"country": r.choice(COUNTRIES)},
    ),
    (
        Template(
            "language",
            "My {language} is getting better thanks to the evening classes",
            ("Which foreign tongue is {he} studying?", "What language course does {he} attend?"),
        ),
        lambda r: {"language": r.choice(LANGUAGES)},
    ),
    (
        Template(
            "partner",
            "My husband {person} works night shifts at the hospital",
            ("Who is {he} married to?", "What is {his} spouse's job?"),
        ),
        lambda r: {"person": r.choice(PEOPLE)},
    ),
    (
        Template(
            "child",
            "Our daughter {person} just started kindergarten",
            ("Does {he} have kids?", "How old is {his} little girl?"),
        ),
        lambda r: {"person": r.choice(PEOPLE)},
    ),
    (
        Template(
            "team",
            "I've supported {team} since I was a kid",
            ("Which football club is {he} a fan of?", "What soccer side does {he} follow?"),
        ),
        lambda r: {"team": r.choice(TEAMS)},
    ),
    (
        Template(
            "drink",
            "I can't start the morning without a cup of {drink}",
            ("What does {he} like to drink?", "Which beverage wakes {him} up?"),
        ),
        lambda r: {"drink": r.choice(DRINKS)},
    ),
]

CHITCHAT = [
    "The weather has been awful all week",
    "Did you see the match last night?",
    "I'm so tired, I barely slept",
    "Work has been pretty stressful lately",
    "Can you recommend a good podcast?",
    "I need to clean the kitchen at some point",
    "My phone battery keeps dying",
    "I watched a documentary about deep sea creatures",
    "What do you think about the new tax rules?",
    "Traffic on the way home was terrible",
    "I'm thinking of repainting the living room",
    "Remind me to call the plumber tomorrow",
    "I finished that mystery novel, the ending was silly",
    "The neighbours had a loud party again",
    "I forgot my umbrella and got soaked",
    "Let's plan next week's schedule",
    "Can you summarise the news for me?",
    "I should drink more water",
    "My laptop fan is making a weird noise",
    "It's been ages since I went to the cinema",
]
NEAR_MISS = [
    "My neighbour's terrier barks every single night",
    "The city council closed the park for repairs",
    "A friend of mine just got a job at a bank",
    "I saw a recipe for curry but never tried it",
    "My colleague speaks four languages, it's unreal",
    "There was a concert in the square with a brass band",
    "The airline lost someone's suitcase on the news",
    "My aunt keeps sending me photos of her garden",
    "The gym near the office raised its prices",
    "Someone parked a huge truck in front of our house",
    "The café downstairs changed its menu again",
    "My cousin's wedding photos finally arrived",
    "I read an article about sleep and memory",
    "The school down the road is hiring teachers",
    "A documentary said cats sleep sixteen hours a day",
]
REPLIES = [
    "That sounds lovely, tell me more.",
    "I understand, that must be frustrating.",
    "Good to know, I'll keep that in mind.",
    "Interesting! How do you feel about it?",
    "Sure, I can help with that.",
    "That's great news!",
    "Noted. Anything else on your mind?",
]


@dataclass(frozen=True)
class Question:
    user: str
    text: str
    answer: str
    topic: str
    shares_word: bool
    """Whether the question and its answer share a content word (or a 5-letter prefix)."""


def _content(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in STOPWORDS}


def shares_word(question: str, statement: str) -> bool:
    """Whether the two texts have a content word, or the first 5 letters of one, in common."""
    ours, theirs = _content(question), _content(statement)
    return bool(ours & theirs) or bool({w[:5] for w in ours} & {w[:5] for w in theirs})


def conversation(
    users: int, sessions: int, turns: int, seed: int
) -> tuple[list[Episode], list[Question]]:
    """Episodes of ``users`` × ``sessions`` sessions (odd turns are the assistant's) and
    the questions with their answer episode ids. Each user states 12 of the templates'
    facts, each in a user turn of some session; the other turns are chit-chat."""
    rng = random.Random(seed)
    episodes: list[Episode] = []
    questions: list[Question] = []
    for u in range(users):
        user = f"user{u:02d}"
        he, him, his = rng.choice([("he", "him", "his"), ("she", "her", "her")])
        chosen = rng.sample(TEMPLATES, 12)
        slots = rng.sample(
            [(s, t) for s in range(sessions) for t in range(0, turns, 2)], len(chosen)
        )
        statement_at = {}
        for (template, fill), slot in zip(chosen, slots, strict=True):
            values = fill(rng)
            statement_at[slot] = (template, template.statement.format(**values))
        for s in range(sessions):
            start = T0 + timedelta(days=3 * s + rng.randint(0, 2), hours=rng.randint(0, 10))
            for t in range(turns):
                eid = f"{user}-s{s:02d}-t{t:02d}"
                if (s, t) in statement_at:
                    template, content = statement_at[(s, t)]
                    for q in template.questions:
                        words = {"he": he, "him": him, "his": his, "kind": ""}
                        if template.topic == "pet":
                            words["kind"] = (
                                "dog" if any(b in content for b in PETS["dog"]) else "cat"
                            )
                        text = q.format(**words)
                        text = text[0].upper() + text[1:]
                        questions.append(
                            Question(user, text, eid, template.topic, shares_word(text, content))
                        )
                elif t % 2:
                    content = rng.choice(REPLIES)
                elif rng.random() < 0.35:
                    content = rng.choice(NEAR_MISS)
                else:
                    content = rng.choice(CHITCHAT)
                episodes.append(
                    Episode(
                        id=eid,
                        content=content,
                        timestamp=start + timedelta(minutes=2 * t),
                        user=user,
                        session=f"{user}-s{s:02d}",
                        agent=AGENT,
                    )
                )
    return episodes, questions


WEIGHTS: dict[str, dict[str, float] | None] = {
    "full-text": {"fts": 1.0, "vector": 0.0, "graph": 0.0},
    "vector": {"fts": 0.0, "vector": 1.0, "graph": 0.0},
    "hybrid": None,
}


async def score(
    mem: Consolidator, questions: Sequence[Question]
) -> dict[str, tuple[float, float, float, float]]:
    """recall@10 and MRR@10 of each weighting over ``questions``, then the same over the
    questions sharing no content word with their answer."""
    out: dict[str, tuple[float, float, float, float]] = {}
    disjoint = sum(not q.shares_word for q in questions) or 1
    for name, weights in WEIGHTS.items():
        found = found_d = 0
        reciprocal = reciprocal_d = 0.0
        for q in questions:
            result = await mem.recall(
                q.text,
                user=q.user,
                agent=AGENT,
                kinds="episodes",
                limit=10,
                weights=weights,
                touch=False,
            )
            ids = [hit.id for hit in result.hits]
            if q.answer in ids:
                found += 1
                reciprocal += 1 / (ids.index(q.answer) + 1)
                if not q.shares_word:
                    found_d += 1
                    reciprocal_d += 1 / (ids.index(q.answer) + 1)
        n = len(questions)
        out[name] = (found / n, reciprocal / n, found_d / disjoint, reciprocal_d / disjoint)
    return out


def pack() -> CompiledPack:
    return compile_file(DEFAULT_PACK)


async def quality_and_backfill(args: argparse.Namespace, embedders: Sequence[str]) -> None:
    episodes, questions = conversation(args.users, args.sessions, args.turns, args.seed)
    print(
        f"## conversation set: {args.users} users (one partition each) x {args.sessions} "
        f"sessions x {args.turns} turns = {len(episodes):,} episodes, "
        f"{len(questions)} questions (seed {args.seed})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.db"
        t0 = time.perf_counter()
        async with Consolidator(base, [pack()], clock=lambda: NOW, embedder=None) as mem:
            await mem.record_many(episodes)
            await mem.consolidate(now=NOW)
        print(f"built in {time.perf_counter() - t0:.1f} s (record_many + consolidate)")
        rows = []
        for spec in embedders:
            copy = Path(tmp) / f"{spec}.db"
            shutil.copyfile(base, copy)
            t0 = time.perf_counter()
            embedder = load_embedder(spec)
            loaded = time.perf_counter() - t0
            async with Consolidator(copy, [pack()], clock=lambda: NOW, embedder=embedder) as mem:
                t0 = time.perf_counter()
                report = await mem.embed_backfill()
                seconds = time.perf_counter() - t0
                print(
                    f"backfill {spec:7} {report.embedded:,} items ({report.episodes:,} episodes, "
                    f"{report.facts:,} facts) in {seconds:.2f} s: "
                    f"{report.embedded / seconds:,.0f} items/s (model load {loaded:.2f} s)"
                )
                t0 = time.perf_counter()
                scores = await score(mem, questions)
                took = time.perf_counter() - t0
            rows.append((spec, scores, took))
        disjoint = sum(not q.shares_word for q in questions)
        print(
            f"\n{'embedder':8} {'strategy':10} {'recall@10':>9} {'MRR@10':>7}   "
            f"no shared word ({disjoint} of {len(questions)}): recall@10, MRR@10"
        )
        per_user = len(episodes) / args.users
        print(f"{'chance':8} {'random':10} {min(1.0, 10 / per_user):9.3f}")
        for spec, scores, took in rows:
            for name, (hit_rate, mrr, hit_d, mrr_d) in scores.items():
                print(f"{spec:8} {name:10} {hit_rate:9.3f} {mrr:7.3f}   {hit_d:9.3f} {mrr_d:7.3f}")
            print(f"{'':8} ({len(WEIGHTS) * len(questions)} recalls in {took:.1f} s)")


# --- latency: recall vs search over one large partition ---------------------------------

WORDS = sorted(
    {w.lower() for s in CHITCHAT + NEAR_MISS for w in s.replace(",", "").split()}
    | {
        w.lower()
        for group in (
            CITIES,
            JOBS,
            FOODS,
            HOBBIES,
            PEOPLE,
            CARS,
            INSTRUMENTS,
            COUNTRIES,
            LANGUAGES,
            TEAMS,
            DRINKS,
        )
        for w in group
    }
)
PREDICATES = ["likes", "lives_in", "works_as", "owns", "plays", "visited", "knows", "eats"]


def large_partition(facts: int, episodes: int, seed: int) -> tuple[list[AddDelta], list[Episode]]:
    rng = random.Random(seed)
    adds = [
        AddDelta(
            user="bench-user",
            agent=AGENT,
            source_episode_ids=[f"ep-{i}"],
            promotion_ts=T0 + timedelta(seconds=i),
            rule_id="promote",
            confidence=round(rng.uniform(0.3, 1.0), 3),
            fact=FactPayload(
                subject=f"thing{i % 2_000}",
                predicate=PREDICATES[i % len(PREDICATES)],
                object=" ".join(rng.choice(WORDS) for _ in range(3)),
            ),
        )
        for i in range(facts)
    ]
    pool = CHITCHAT + NEAR_MISS + REPLIES
    eps = [
        Episode(
            id=f"ep-{i}",
            content=f"{rng.choice(pool)} {rng.choice(WORDS)} {rng.choice(WORDS)}",
            timestamp=T0 + timedelta(seconds=30 * i),
            user="bench-user",
            session=f"s{i // 20}",
            agent=AGENT,
        )
        for i in range(episodes)
    ]
    return adds, eps


@asynccontextmanager
async def location(postgres: str | None) -> AsyncIterator[str]:
    """A fresh SQLite file, or a fresh schema of ``postgres`` (dropped after)."""
    if postgres is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield str(Path(tmp) / "recall.db")
        return
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{postgres}?schema={schema}"
    finally:
        async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def pct(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


async def latency(args: argparse.Namespace, postgres: str | None) -> None:
    adds, eps = large_partition(args.facts, args.episodes, args.seed)
    rng = random.Random(args.seed + 1)
    queries = []
    for _ in range(args.queries):
        template, _fill = rng.choice(TEMPLATES)
        queries.append(
            rng.choice(template.questions).format(he="she", him="her", his="her", kind="dog")
            + f" {rng.choice(WORDS)}"
        )
    backend = "PostgreSQL" if postgres else "SQLite"
    async with (
        location(postgres) as where,
        Consolidator(where, [pack()], clock=lambda: NOW, embedder="hash") as mem,
    ):
        t0 = time.perf_counter()
        for start in range(0, len(adds), 10_000):
            await mem.fact_store.apply_deltas(adds[start : start + 10_000])
        for start in range(0, len(eps), 10_000):
            await mem.memory.put_many(eps[start : start + 10_000])
        print(
            f"## {backend}: {len(adds):,} facts + {len(eps):,} episodes in one partition, "
            f"stored in {time.perf_counter() - t0:.1f} s (apply_deltas + put_many)"
        )
        backlog = await mem.embedding_backlog()
        t0 = time.perf_counter()
        await mem.recall("warm up", user="bench-user", agent=AGENT, touch=False)
        first = time.perf_counter() - t0
        print(
            f"first recall (catch-up: full-text index and {backlog:,} items embedded): "
            f"{first:.2f} s, {backlog / first:,.0f} items/s; backlog after: "
            f"{await mem.embedding_backlog()}"
        )
        recall_ms: list[float] = []
        search_ms: list[float] = []
        by_intent: dict[str, list[float]] = {}
        for query in queries:
            t0 = time.perf_counter()
            result = await mem.recall(query, user="bench-user", agent=AGENT, limit=10)
            recall_ms.append((time.perf_counter() - t0) * 1000)
            by_intent.setdefault(result.intent, []).append(recall_ms[-1])
            t0 = time.perf_counter()
            await mem.search(query, user="bench-user", agent=AGENT, limit=10)
            search_ms.append((time.perf_counter() - t0) * 1000)
        r50, s50 = statistics.median(recall_ms), statistics.median(search_ms)
        print(
            f"recall p50 {r50:.2f} ms p95 {pct(recall_ms, 95):.2f} ms; search p50 "
            f"{s50:.2f} ms p95 {pct(search_ms, 95):.2f} ms; ratio {r50 / s50:.2f} "
            f"({len(queries)} each, alternating)"
        )
        print(
            "recall p50 by intent: "
            + ", ".join(
                f"{intent} {statistics.median(ms):.2f} ms ({len(ms)})"
                for intent, ms in sorted(by_intent.items())
            )
        )


# --- record with and without an embedder -------------------------------------------------


def streaming_pack() -> CompiledPack:
    """``rules/dedup_against_facts.yaml`` with every rule on ``every: 1``."""
    text = (ROOT / "rules" / "dedup_against_facts.yaml").read_text(encoding="utf-8")
    return compile_text(text.replace('{cron: "0 3 * * *"}', "{every: 1}"))


async def record_cost(args: argparse.Namespace, embedders: Sequence[str]) -> None:
    specs: list[str | None] = [None, *embedders]
    rng = random.Random(args.seed)
    compiled = streaming_pack()
    with tempfile.TemporaryDirectory() as tmp:
        mems: dict[str | None, Consolidator] = {}
        for spec in specs:
            embedder: Embedder | None = None if spec is None else load_embedder(spec)
            mem = Consolidator(
                Path(tmp) / f"{spec}.db", [compiled], clock=lambda: NOW, embedder=embedder
            )
            await mem.__aenter__()
            mems[spec] = mem
        times: dict[str | None, list[float]] = {spec: [] for spec in specs}
        n = 0
        try:
            for _ in range(args.records // args.block):
                for spec in specs:
                    for _ in range(args.block):
                        subject = f"s{rng.randrange(50)}"
                        episode = Episode(
                            id=f"r{n}",
                            content=f"{subject} likes {rng.choice(WORDS)} {rng.choice(WORDS)}",
                            timestamp=T0 + timedelta(seconds=20 * n),
                            user="rec-user",
                            session="s",
                            agent=AGENT,
                            metadata={
                                "subject": subject,
                                "predicate": rng.choice(PREDICATES[:3]),
                                "object": rng.choice(WORDS),
                            },
                        )
                        n += 1
                        t0 = time.perf_counter()
                        await mems[spec].record(episode)
                        times[spec].append((time.perf_counter() - t0) * 1000)
            base = statistics.median(times[None])
            print(f"## record p50, blocks of {args.block} taking turns, {len(times[None])} each")
            for spec in specs:
                p50 = statistics.median(times[spec])
                backlog = await mems[spec].embedding_backlog()
                print(
                    f"embedder={spec!s:7} p50 {p50:.2f} ms p95 {pct(times[spec], 95):.2f} ms "
                    f"ratio {p50 / base:.2f} backlog {backlog}"
                )
        finally:
            for mem in mems.values():
                await mem.__aexit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=["quality", "backfill", "latency", "record"],
        default=["quality", "backfill", "latency", "record"],
        help="quality and backfill share one build",
    )
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--episodes", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--records", type=int, default=1200, help="records per embedder")
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--no-minilm", action="store_true", help="built-in embedder only")
    parser.add_argument("--postgres", metavar="URL", help="also measure latency on PostgreSQL")
    args = parser.parse_args()
    embedders = ["hash"] if args.no_minilm else ["hash", "minilm"]
    print(
        f"# python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if {"quality", "backfill"} & set(args.parts):
        asyncio.run(quality_and_backfill(args, embedders))
    if "latency" in args.parts:
        asyncio.run(latency(args, None))
        if args.postgres:
            asyncio.run(latency(args, args.postgres))
    if "record" in args.parts:
        asyncio.run(record_cost(args, embedders))
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
