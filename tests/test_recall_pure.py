"""Recall's pure parts: intents and complexity, time bounds, Reciprocal Rank Fusion, result
models and context assembly within a token budget."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import stargraph_mem
from stargraph_mem.embedding import Matrix
from stargraph_mem.engine.recall.context import (
    FLOW_ORDER,
    MAX_CITED,
    SECTION_SHARES,
    TITLE,
    ContextLine,
    SectionName,
    TokenCounter,
    approx_tokens,
    assemble_context,
)
from stargraph_mem.engine.recall.fusion import Fused, RecallWeights, hit_key, rrf
from stargraph_mem.engine.recall.intent import (
    EXEMPLARS,
    INTENTS,
    EmbeddingIntentClassifier,
    Intent,
    KeywordIntentClassifier,
    classifier_for,
    classify_complexity,
    params_for,
)
from stargraph_mem.engine.recall.models import (
    ProfileLines,
    RecallHit,
    RecallResult,
    RecallSettings,
    TemporalNeighbour,
)
from stargraph_mem.engine.recall.timefilter import (
    TimeWindow,
    parse_time_bound,
    parse_time_window,
)
from stargraph_mem.errors import RecallError, StargraphMemError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import Fact
from stargraph_mem.model.time import UTC_MAX

NOW = datetime(2026, 11, 28, 15, 30, tzinfo=UTC)


# --- intents -----------------------------------------------------------------------------

KEYWORD_TABLE: list[tuple[str, Intent]] = [
    ("Why did we move the standup?", "why"),
    ("why is the build red", "why"),
    ("How come the invoice was paid twice?", "why"),
    ("What caused the outage on Friday?", "why"),
    ("What led to the rewrite?", "why"),
    ("Tell me the reason for the delay", "why"),
    ("Explain why the tests fail", "why"),
    ("When did I last call mum?", "when"),
    ("What time is the dentist?", "when"),
    ("What date did we sign?", "when"),
    ("Which day did she arrive?", "when"),
    ("How long ago did it ship?", "when"),
    ("Did I meet Alice last week?", "when"),
    ("Anything new since yesterday", "when"),
    ("WHEN IS THE DEADLINE", "when"),
    ("Who is my manager?", "who"),
    ("Whose laptop broke?", "who"),
    ("Which person asked about the refund?", "who"),
    ("To whom did I lend the book?", "who"),
    ("Who told me why the deploy failed?", "who"),
    ("What is my cat called?", "what"),
    ("what's the wifi password", "what"),
    ("Which editor do I use?", "what"),
    ("Tell me about the Acme project", "what"),
    ("Describe the deployment setup", "what"),
    ("Show me my notes", "general"),
    ("Help me plan the week", "general"),
    ("", "general"),
    ("Somewhat whatever, whoever, whenever", "general"),
    ("Whyte and Whoville", "general"),
]


@pytest.mark.parametrize(("query", "intent"), KEYWORD_TABLE)
def test_the_keyword_classifier_reads_cue_words(query: str, intent: Intent) -> None:
    assert KeywordIntentClassifier().classify(query) == intent


def test_keyword_precedence_is_earliest_cue_then_why_when_who_what() -> None:
    classifier = KeywordIntentClassifier()
    cues = classifier.cues("What caused the fight, and who started it yesterday?")
    assert [(cue.intent, cue.text) for cue in cues] == [
        ("why", "What caused"),  # the plain "what" inside it is not a cue of its own
        ("who", "who"),
        ("when", "yesterday"),
    ]
    assert classifier.decide("when and why").model_dump() == {
        "intent": "when",
        "method": "keyword",
        "similarity": None,
        "exemplar": None,
        "embedder": None,
    }


COMPLEXITY_TABLE = [
    ("Who is my manager?", "simple"),
    ("What did Alice say yesterday?", "simple"),
    ("Show me my notes", "simple"),
    ("Who told me why the deploy failed?", "complex"),
    ("When did we meet? Where was it?", "complex"),
    ("Compare the two offers", "complex"),
    ("Summarize the history of the Acme deal", "complex"),
    ("List all the times I was late", "complex"),
    ("one two three four five six seven eight nine ten eleven twelve 13 14 15 16", "simple"),
    ("one two three four five six seven eight nine ten eleven twelve 13 14 15 16 17", "complex"),
]


@pytest.mark.parametrize(("query", "complexity"), COMPLEXITY_TABLE)
def test_complexity_follows_its_documented_rule(query: str, complexity: str) -> None:
    assert classify_complexity(query) == complexity


def test_complexity_sets_limit_depth_and_budget_as_the_specification_says() -> None:
    assert params_for("simple").model_dump() == {
        "limit": 5,
        "graph_depth": 2,
        "budget_tokens": 1000,
    }
    assert params_for("complex").model_dump() == {
        "limit": 20,
        "graph_depth": 4,
        "budget_tokens": 3000,
    }
    fixed = RecallSettings(adaptive=False, context_token_budget=1500)
    assert fixed.params("simple").model_dump() == {
        "limit": 20,
        "graph_depth": 4,
        "budget_tokens": 1500,
    }
    assert RecallSettings().params("simple") == params_for("simple")


class BagEmbedder:
    """Words hashed into a large space: cosine is word overlap (deterministic, no model)."""

    def __init__(self, name: str = "bag-of-words", dimension: int = 4096) -> None:
        self._name = name
        self._dimension = dimension

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return "1"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Matrix:
        rows = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                row[int.from_bytes(digest, "little") % self._dimension] += 1.0
            norm = float(np.linalg.norm(row))
            if norm == 0.0:
                row[0] = 1.0
            else:
                row /= norm
        return rows


class ConstantEmbedder(BagEmbedder):
    """Every text gets the same vector: every exemplar ties."""

    def embed(self, texts: Sequence[str]) -> Matrix:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        rows[:, 0] = 1.0
        return rows


def test_an_exemplar_itself_is_classified_by_its_intent_with_similarity_one() -> None:
    classifier = EmbeddingIntentClassifier(BagEmbedder())
    for intent in INTENTS:
        for text in EXEMPLARS[intent][:3]:
            decision = classifier.decide(text)
            assert decision.method == "embedding"
            assert decision.intent == intent, text
            assert decision.similarity == pytest.approx(1.0, abs=1e-6)
            assert decision.embedder == "bag-of-words@1/4096"


def test_the_embedding_classifier_reads_paraphrases_the_keywords_miss() -> None:
    classifier = EmbeddingIntentClassifier(BagEmbedder())
    assert classifier.classify("Why did we switch databases?") == "why"
    russian = "Почему отменили поездку?"
    assert KeywordIntentClassifier().classify(russian) == "general"
    decision = classifier.decide(russian)
    assert (decision.intent, decision.method) == ("why", "embedding")
    assert decision.exemplar == "По какой причине отменили поездку?"


def test_below_the_threshold_the_keyword_classifier_decides() -> None:
    classifier = EmbeddingIntentClassifier(BagEmbedder(), threshold=0.45)
    decision = classifier.decide("zzqx blorf when")
    assert decision.method == "keyword"
    assert decision.intent == "when"
    assert decision.similarity is not None and decision.similarity < 0.45
    strict = EmbeddingIntentClassifier(BagEmbedder(), threshold=1.0)
    assert strict.decide("Why did we switch databases?").method == "keyword"


def test_ties_between_exemplars_go_to_the_earlier_intent_and_exemplar() -> None:
    decision = EmbeddingIntentClassifier(ConstantEmbedder(name="constant")).decide("anything")
    assert (decision.intent, decision.exemplar) == ("why", EXEMPLARS["why"][0])


class CountingEmbedder(BagEmbedder):
    def __init__(self) -> None:
        super().__init__(name="counting")
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.texts += len(texts)
        return super().embed(texts)


def test_exemplars_are_embedded_once_per_embedder_identity() -> None:
    embedder = CountingEmbedder()
    first = EmbeddingIntentClassifier(embedder)
    embedded = embedder.texts
    assert embedded == sum(len(texts) for texts in EXEMPLARS.values())
    second = EmbeddingIntentClassifier(embedder, threshold=0.9)
    assert embedder.texts == embedded
    assert first.classify("Who is Maria?") == second.classify("Who is Maria?") == "who"
    assert embedder.texts == embedded + 2


def test_a_given_query_vector_is_used_and_checked() -> None:
    embedder = BagEmbedder()
    classifier = EmbeddingIntentClassifier(embedder)
    vector = embedder.embed(["Who is my manager?"])[0]
    assert classifier.decide("ignored text", vector=vector).intent == "who"
    with pytest.raises(RecallError, match=r"vector: expected 4096 floats") as caught:
        classifier.decide("x", vector=np.zeros(3, dtype=np.float32))
    assert caught.value.context["parameter"] == "vector"


def test_custom_exemplars_and_bad_thresholds() -> None:
    classifier = EmbeddingIntentClassifier(BagEmbedder(), exemplars={"who": ["owner of it"]})
    assert classifier.decide("the owner of it").intent == "who"
    for bad in (float("nan"), 1.5, -2, True, "0.4"):
        with pytest.raises(RecallError, match="threshold"):
            EmbeddingIntentClassifier(BagEmbedder(), threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(RecallError, match=r"exemplars: unknown intents \['how'\]"):
        EmbeddingIntentClassifier(BagEmbedder(), exemplars={"how": ["x"]})  # type: ignore[dict-item]


def test_classifier_for_picks_keywords_for_the_hashing_embedder() -> None:
    assert isinstance(classifier_for(None), KeywordIntentClassifier)
    assert isinstance(classifier_for(BagEmbedder(name="stargraph-hash")), KeywordIntentClassifier)
    chosen = classifier_for(BagEmbedder(), threshold=0.6)
    assert isinstance(chosen, EmbeddingIntentClassifier)
    assert chosen.threshold == 0.6


# --- time bounds -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "end", "expected"),
    [
        (None, False, None),
        (None, True, None),
        ("last_week", False, NOW - timedelta(days=7)),
        ("last_week", True, NOW - timedelta(days=7)),
        ("last_month", False, NOW - timedelta(days=30)),
        (" last_month ", True, NOW - timedelta(days=30)),
        ("today", False, datetime(2026, 11, 28, tzinfo=UTC)),
        ("today", True, datetime(2026, 11, 29, tzinfo=UTC)),
        ("yesterday", False, datetime(2026, 11, 27, tzinfo=UTC)),
        ("yesterday", True, datetime(2026, 11, 28, tzinfo=UTC)),
        ("2024-02-29", False, datetime(2024, 2, 29, tzinfo=UTC)),
        ("2024-02-29", True, datetime(2024, 3, 1, tzinfo=UTC)),
        (date(2024, 12, 31), True, datetime(2025, 1, 1, tzinfo=UTC)),
        ("9999-12-31", True, UTC_MAX),
        ("2024-05-01T09:30:00+02:00", False, datetime(2024, 5, 1, 7, 30, tzinfo=UTC)),
        ("2024-05-01T09:30:00Z", True, datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
        (
            datetime(2024, 5, 1, 9, 30, tzinfo=timezone(timedelta(hours=-5))),
            False,
            datetime(2024, 5, 1, 14, 30, tzinfo=UTC),
        ),
    ],
)
def test_time_bounds_in_every_accepted_form(
    value: str | date | datetime | None, end: bool, expected: datetime | None
) -> None:
    got = parse_time_bound(value, now=NOW, end=end)
    assert got == expected
    if got is not None:
        assert got.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("value", "end", "fragment"),
    [
        ("next tuesday", False, "after: 'next tuesday' is not a time bound"),
        ("LAST_WEEK", True, "before: 'LAST_WEEK' is not a time bound"),
        ("2024-02-30", False, "after: '2024-02-30' is not a calendar day"),
        ("2024-05-01T09:30:00", True, "before: '2024-05-01T09:30:00' has no UTC offset"),
        (datetime(2024, 5, 1, 9, 30), False, "after: naive datetime 2024-05-01T09:30:00"),
        (5, True, "before: expected text or a datetime, got int"),
        ("0001-01-01T00:00:00+14:00", False, "after: after 0001-01-01T00:00:00+14:00 is outside"),
    ],
)
def test_bad_time_bounds_name_the_parameter_and_the_accepted_forms(
    value: object, end: bool, fragment: str
) -> None:
    with pytest.raises(RecallError) as caught:
        parse_time_bound(value, now=NOW, end=end)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith(fragment), message
    assert "accepted: 'today', 'yesterday', 'last_week', 'last_month', 'YYYY-MM-DD'" in message
    assert message.endswith("from Python also a timezone-aware datetime, or None (open)")
    assert caught.value.context == {"parameter": "before" if end else "after", "value": value}
    assert isinstance(caught.value, StargraphMemError) and isinstance(caught.value, ValueError)


def test_now_must_be_aware_and_a_parameter_name_can_be_given() -> None:
    with pytest.raises(RecallError, match="now: a timezone-aware datetime is required"):
        parse_time_bound("today", now=datetime(2026, 1, 1), end=False)
    with pytest.raises(RecallError, match=r"^since: 'soon'"):
        parse_time_bound("soon", now=NOW, end=False, parameter="since")


def test_a_window_is_half_open_and_refuses_after_not_before_before() -> None:
    window = parse_time_window("2024-05-01", "2024-05-01", now=NOW)
    assert window == TimeWindow(
        after=datetime(2024, 5, 1, tzinfo=UTC), before=datetime(2024, 5, 2, tzinfo=UTC)
    )
    assert window.contains(datetime(2024, 5, 1, tzinfo=UTC))
    assert window.contains(datetime(2024, 5, 1, 23, 59, 59, 999999, tzinfo=UTC))
    assert not window.contains(datetime(2024, 5, 2, tzinfo=UTC))
    assert not window.contains(datetime(2024, 4, 30, 23, 59, tzinfo=UTC))
    assert parse_time_window(None, None, now=NOW).is_open
    assert parse_time_window("last_week", None, now=NOW).contains(NOW)
    with pytest.raises(RecallError) as caught:
        parse_time_window("2024-05-03", "2024-05-01", now=NOW)
    assert str(caught.value) == (
        "after '2024-05-03' (from 2024-05-03T00:00:00+00:00) is not earlier than before "
        "'2024-05-01' (until 2024-05-02T00:00:00+00:00, left out): the window would hold "
        "nothing"
    )
    with pytest.raises(RecallError, match="is not earlier than before"):
        parse_time_window("last_week", "last_week", now=NOW)


@settings(max_examples=100, deadline=None)
@given(
    day=st.dates(min_value=date(2, 1, 1), max_value=date(9998, 12, 30)),
    offset=st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_a_day_bound_brackets_every_instant_of_that_utc_day(day: date, offset: int) -> None:
    start = parse_time_bound(day.isoformat(), now=NOW, end=False)
    stop = parse_time_bound(day.isoformat(), now=NOW, end=True)
    assert start is not None and stop is not None
    assert stop - start == timedelta(days=1)
    moment = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    shown = moment.astimezone(timezone(timedelta(minutes=offset))).isoformat()
    assert parse_time_bound(shown, now=NOW, end=False) == moment
    assert TimeWindow(after=start, before=stop).contains(moment)


# --- fusion ------------------------------------------------------------------------------


def test_rrf_on_a_hand_checked_example() -> None:
    lists = {"fts": ["a", "b", "c"], "vector": ["c", "a", "d"], "graph": ["b"]}
    weights = {"fts": 1.0, "vector": 0.5, "graph": 2.0}
    fused = rrf(lists, weights=weights, k=60)
    expected = {
        "a": (Fraction(1, 61) + Fraction(1, 2) / 62, {"fts": 1, "vector": 2}),
        "b": (Fraction(1, 62) + Fraction(2, 61), {"fts": 2, "graph": 1}),
        "c": (Fraction(1, 63) + Fraction(1, 2) / 61, {"fts": 3, "vector": 1}),
        "d": (Fraction(1, 2) / 63, {"vector": 3}),
    }
    assert [item.key for item in fused] == ["b", "a", "c", "d"]
    for item in fused:
        score, ranks = expected[item.key]
        assert item.score == pytest.approx(float(score), rel=1e-15)
        assert item.ranks == ranks
    assert [item.key for item in rrf(lists, weights=weights, k=1)] == ["b", "a", "c", "d"]
    assert rrf(lists, weights=weights, k=1)[0].score == pytest.approx(1 / 3 + 2 / 2)


def test_rrf_ties_are_broken_by_key_and_duplicates_keep_their_first_rank() -> None:
    fused = rrf({"fts": ["y", "x"], "vector": ["x", "y"]}, weights={"fts": 1, "vector": 1})
    assert [item.key for item in fused] == ["x", "y"]
    assert fused[0].score == fused[1].score
    again = rrf({"fts": ["a", "b", "a"]}, weights={"fts": 1.0})
    assert again == [
        Fused(key="a", score=1 / 61, ranks={"fts": 1}),
        Fused(key="b", score=1 / 62, ranks={"fts": 2}),
    ]
    assert rrf({}, weights={}) == []
    assert len(rrf({"fts": ["a", "b", "c"]}, weights={"fts": 1}, limit=2)) == 2


def test_weight_zero_removes_a_strategy() -> None:
    lists = {"fts": ["a", "b"], "vector": ["z", "b", "a"], "graph": ["q"]}
    off = rrf(lists, weights={"fts": 1, "vector": 0, "graph": 1})
    assert off == rrf({"fts": ["a", "b"], "graph": ["q"]}, weights={"fts": 1, "graph": 1})
    assert all("vector" not in item.ranks for item in off)
    assert "z" not in {item.key for item in off}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, r"k: expected an integer ≥ 1, got 0"),
        ({"k": True}, r"k: expected an integer ≥ 1, got True"),
        ({"k": 2.5}, r"k: expected an integer ≥ 1, got 2.5"),
        ({"weights": {"fts": -1.0}}, r"weights\['fts'\]: expected a finite number ≥ 0, got -1.0"),
        ({"weights": {"fts": math.inf}}, r"weights\['fts'\]: expected a finite number"),
        ({"weights": {"fts": math.nan}}, r"weights\['fts'\]: expected a finite number"),
        ({"weights": {"fts": 1.0, "graph": 1}}, r"weights: no weight for strategies \['vector'\]"),
        ({"limit": -1}, r"limit: expected an integer ≥ 0, got -1"),
    ],
)
def test_rrf_validates_k_weights_and_limit(kwargs: dict[str, object], message: str) -> None:
    call: dict[str, object] = {"weights": {"fts": 1.0, "vector": 1.0}, **kwargs}
    with pytest.raises(RecallError, match=message):
        rrf({"fts": ["a"], "vector": ["b"]}, **call)  # type: ignore[arg-type]
    with pytest.raises(RecallError, match=r"ranked_lists\['fts'\]: expected a sequence of keys"):
        rrf({"fts": "abc"}, weights={"fts": 1.0})


def test_recall_weights_default_to_one_and_refuse_bad_numbers() -> None:
    assert RecallWeights().as_mapping() == {"fts": 1.0, "vector": 1.0, "graph": 1.0}
    for bad in ({"fts": -0.1}, {"vector": math.inf}, {"graph": math.nan}, {"fts": True}):
        with pytest.raises(ValidationError):
            RecallWeights.model_validate(bad)
    with pytest.raises(ValidationError):
        RecallSettings(rrf_k=0)
    assert RecallSettings().rrf_k == 60
    assert RecallSettings().intent_similarity_threshold == 0.45
    assert RecallSettings().context_token_budget == 2000
    assert hit_key("fact", "f1") == "fact:f1"


KEYS = st.sampled_from([f"k{i}" for i in range(12)])
RANKED = st.dictionaries(
    st.sampled_from(["fts", "vector", "graph"]), st.lists(KEYS, max_size=10, unique=True)
)
WEIGHTS = st.fixed_dictionaries(
    {
        name: st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=10.0))
        for name in ("fts", "vector", "graph")
    }
)


@settings(max_examples=200, deadline=None)
@given(lists=RANKED, weights=WEIGHTS, k=st.integers(min_value=1, max_value=200), seed=st.randoms())
def test_rrf_properties(
    lists: dict[str, list[str]], weights: dict[str, float], k: int, seed: object
) -> None:
    fused = rrf(lists, weights=weights, k=k)
    # deterministic: the mapping's order does not matter
    names = list(lists)
    seed.shuffle(names)  # type: ignore[attr-defined]
    assert rrf({name: lists[name] for name in names}, weights=weights, k=k) == fused
    # every key a live strategy ranked appears once, with the ranks it was given
    live = {name for name in lists if weights[name] > 0}
    assert sorted(item.key for item in fused) == sorted({key for n in live for key in lists[n]})
    for item in fused:
        assert set(item.ranks) <= live
        for name, rank in item.ranks.items():
            assert lists[name][rank - 1] == item.key
        exact = sum(Fraction(weights[n]) / (k + r) for n, r in item.ranks.items())
        assert item.score == pytest.approx(float(exact), rel=1e-12, abs=1e-300)
    # best first, ties by key
    assert [(-item.score, item.key) for item in fused] == sorted(
        (-item.score, item.key) for item in fused
    )


# --- models and context ------------------------------------------------------------------

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def make_fact(fact_id: str, subject: str, predicate: str, obj: str) -> Fact:
    return Fact(
        id=fact_id,
        user="u",
        agent="a",
        subject=subject,
        predicate=predicate,
        object=obj,
        confidence=0.9,
        valid_from=T0,
        recorded_at=T0,
        rule_id="r1",
        delta_id=f"d-{fact_id}",
    )


def make_episode(episode_id: str, content: str, hours: int = 0) -> Episode:
    return Episode(
        id=episode_id,
        content=content,
        timestamp=T0 + timedelta(hours=hours),
        user="u",
        session="s",
        agent="a",
    )


def fact_hit(fact: Fact, sources: Sequence[str], score: float = 0.03) -> RecallHit:
    return RecallHit(
        kind="fact",
        id=fact.id,
        fact=fact,
        score=score,
        strategies={"fts": 1},
        sources=tuple(sources),
    )


def episode_hit(episode: Episode, score: float = 0.01) -> RecallHit:
    return RecallHit(
        kind="episode",
        id=episode.id,
        episode=episode,
        score=score,
        strategies={"vector": 1},
        cosine=0.8,
    )


def result(hits: Sequence[RecallHit] = (), **extra: object) -> RecallResult:
    fields: dict[str, object] = {"query": "q", "intent": "what", "complexity": "simple"}
    fields.update(extra)
    return RecallResult(hits=tuple(hits), **fields)


def split_sections(block: str) -> dict[str, str]:
    """Section title → its text (title line included)."""
    parts = block.split("\n\n")
    assert parts[0] == TITLE
    return {part.splitlines()[0]: "\n\n" + part for part in parts[1:]}


def test_nothing_recalled_gives_the_empty_string() -> None:
    assert result().context() == ""
    assert result().context(budget_tokens=5000) == ""
    assert assemble_context({}, budget_tokens=100) == ""
    assert assemble_context({"facts": []}, budget_tokens=100) == ""


def test_the_block_cites_sources_and_leaves_out_empty_sections() -> None:
    alice = make_fact("f1", "alice", "works_at", "Acme")
    berlin = make_fact("f2", "alice", "lives_in", "Berlin")
    many = make_fact("f3", "alice", "likes", "tea")
    note = make_episode("e9", "I started at Acme\ntoday,   finally", hours=10)
    done = result(
        [
            fact_hit(alice, ["e1", "e7"]),
            fact_hit(berlin, ["e3"]),
            fact_hit(many, [f"e{i}" for i in range(MAX_CITED + 2)]),
            episode_hit(note),
        ]
    )
    block = done.context()
    assert block == "\n".join(
        [
            "## Memory",
            "",
            "### Facts",
            "- alice works_at Acme (since 2024-05-01) [sources: e1, e7]",
            "- alice lives_in Berlin (since 2024-05-01) [sources: e3]",
            "- alice likes tea (since 2024-05-01) [sources: e0, e1, e2, e3, e4, e5, e6, e7,"
            " +2 more]",
            "",
            "### Evidence",
            "- 2024-05-01 10:00Z I started at Acme today, finally [episode e9]",
        ]
    )
    assert done.facts == [alice, berlin, many]
    assert done.episodes == [note]


def test_profiles_and_temporal_context_are_rendered() -> None:
    anchor = make_episode("e2", "moved to Berlin", hours=5)
    done = result(
        profiles=(
            ProfileLines(
                name="alice",
                aliases=("Alice Smith", "Al"),
                facts=("works_at Acme",),
                timeline=("2024-05-01 moved to Berlin",),
            ),
        ),
        temporal=(TemporalNeighbour(episode=anchor, relation="before", anchor="episode:e3"),),
    )
    assert done.context() == "\n".join(
        [
            "## Memory",
            "",
            "### Entity profiles",
            "- **alice** (also: Alice Smith, Al)",
            "  - works_at Acme",
            "  - 2024-05-01 moved to Berlin",
            "",
            "### Temporal context",
            "- 2024-05-01 05:00Z moved to Berlin [episode e2, before episode:e3]",
        ]
    )


def test_citations_come_from_the_lineage_when_not_given() -> None:
    fact = make_fact("f1", "bob", "owns", "a boat").with_provenance(
        [{"rule_id": "r1", "source_episode_ids": ["e5", "e6"]}], None
    )
    hit = fact_hit(fact, [])
    assert hit.citations == ("e5", "e6")
    assert "[sources: e5, e6]" in result([hit]).context()
    bare = fact_hit(make_fact("f2", "bob", "owns", "a car"), [])
    assert "bob owns a car (since 2024-05-01) [no source episodes]" in result([bare]).context()


def test_a_long_fact_is_shortened_but_keeps_its_citation() -> None:
    fact = make_fact("f1", "alice", "said", "word " * 400)
    block = result([fact_hit(fact, ["e1", "e2"])]).context(budget_tokens=60)
    assert approx_tokens(block) <= 60
    line = block.splitlines()[-1]
    assert line.startswith("- alice said word word")
    assert line.endswith("… [sources: e1, e2]")


def many_lines(prefix: str, count: int, width: int = 60) -> list[ContextLine]:
    return [
        ContextLine(body=f"{prefix}{i:03d} " + "x" * width, suffix=f" [{prefix}{i}]")
        for i in range(count)
    ]


def test_shares_are_respected_when_every_section_overflows() -> None:
    room = 1000
    budget = room + len(TITLE)
    sections: dict[SectionName, list[ContextLine]] = {
        name: many_lines(name[:2], 50) for name in FLOW_ORDER
    }
    block = assemble_context(sections, budget_tokens=budget, counter=len)
    assert len(block) <= budget
    found = split_sections(block)
    assert len(found) == 4
    for name, text in zip(FLOW_ORDER, found.values(), strict=True):
        share = SECTION_SHARES[name] * room
        assert share - 80 <= len(text) <= share + 80, (name, len(text))


def test_unused_share_flows_in_order_facts_profiles_temporal_evidence() -> None:
    room = 1000
    budget = room + len(TITLE)
    only_evidence = assemble_context(
        {"evidence": many_lines("ev", 50)}, budget_tokens=budget, counter=len
    )
    assert len(only_evidence) > 0.9 * budget
    # profiles and temporal context are empty: their half goes to the facts first
    both = assemble_context(
        {"facts": many_lines("fa", 50), "evidence": many_lines("ev", 50)},
        budget_tokens=budget,
        counter=len,
    )
    facts, evidence = split_sections(both).values()
    assert len(facts) > 0.85 * room
    assert len(evidence) <= 0.1 * room + 2
    # a short facts section leaves its share to the profiles, then the rest
    short = assemble_context(
        {
            "facts": many_lines("fa", 1),
            "profiles": many_lines("pr", 50),
            "evidence": many_lines("ev", 50),
        },
        budget_tokens=budget,
        counter=len,
    )
    _, profiles, evidence = split_sections(short).values()
    assert len(profiles) > 0.75 * room
    assert len(evidence) <= 0.1 * room + 2


def test_the_default_budget_follows_the_complexity() -> None:
    hits = [fact_hit(make_fact(f"f{i}", "s", "p", "o" * 40), [f"e{i}"]) for i in range(400)]
    simple = result(hits).context()
    complex_ = result(hits, complexity="complex").context()
    assert 900 < approx_tokens(simple) <= 1000
    assert 2700 < approx_tokens(complex_) <= 3000
    assert approx_tokens(result(hits, budget_tokens=1500).context()) <= 1500


def test_bad_budgets_and_sections_are_refused() -> None:
    for bad in (0, -5, True, 10.5):
        with pytest.raises(RecallError, match=r"^budget_tokens: expected an integer ≥ 1"):
            result([fact_hit(make_fact("f1", "a", "b", "c"), [])]).context(
                budget_tokens=bad  # type: ignore[arg-type]
            )
    with pytest.raises(RecallError, match=r"sections: unknown sections \['notes'\]"):
        assemble_context({"notes": []}, budget_tokens=100)  # type: ignore[dict-item]
    assert result([fact_hit(make_fact("f1", "a", "b", "c"), [])]).context(budget_tokens=3) == ""


def test_hits_carry_exactly_their_item() -> None:
    fact = make_fact("f1", "a", "b", "c")
    episode = make_episode("e1", "hello")
    with pytest.raises(ValidationError, match="a fact hit carries its fact and nothing else"):
        RecallHit(kind="fact", id="f1", score=1.0)
    with pytest.raises(ValidationError, match="carries its episode and nothing else"):
        RecallHit(kind="episode", id="e1", episode=episode, fact=fact, score=1.0)
    with pytest.raises(ValidationError, match="id 'f2' is not the fact's id 'f1'"):
        RecallHit(kind="fact", id="f2", fact=fact, score=1.0)
    with pytest.raises(ValidationError, match="an episode hit has none"):
        RecallHit(kind="episode", id="e1", episode=episode, score=1.0, sources=("e0",))
    with pytest.raises(ValidationError, match=r"hits\[1\]: fact:f1 is listed twice"):
        result([fact_hit(fact, []), fact_hit(fact, [])])
    hit = episode_hit(episode)
    assert (hit.key, hit.text, hit.cosine) == ("episode:e1", "hello", 0.8)
    assert fact_hit(fact, []).text == "a b c"
    assert result([hit]).summary()["hits"] == [
        {"key": "episode:e1", "score": 0.01, "strategies": {"vector": 1}}
    ]


def test_recall_error_is_public() -> None:
    assert stargraph_mem.RecallError is RecallError
    assert issubclass(RecallError, StargraphMemError)


# --- context properties ------------------------------------------------------------------

TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    max_size=300,
)
IDS = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), unique=True, max_size=8)


def words(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def bytes_len(text: str) -> int:
    return len(text.encode("utf-8"))


COUNTERS: list[TokenCounter] = [approx_tokens, words, len, bytes_len]


@st.composite
def results(draw: st.DrawFn) -> RecallResult:
    ids = draw(IDS)
    hits: list[RecallHit] = []
    for index, item_id in enumerate(ids):
        if draw(st.booleans()):
            fact = make_fact(item_id, draw(TEXT) or "s", draw(TEXT), draw(TEXT))
            hits.append(
                fact_hit(fact, draw(st.lists(st.sampled_from(["e1", "e2", "e3"]))), 1 / (index + 1))
            )
        else:
            hits.append(episode_hit(make_episode(item_id, draw(TEXT), hours=index)))
    profiles = draw(
        st.lists(
            st.builds(
                ProfileLines,
                name=TEXT,
                aliases=st.lists(TEXT, max_size=3).map(tuple),
                facts=st.lists(TEXT, max_size=4).map(tuple),
                timeline=st.lists(TEXT, max_size=4).map(tuple),
            ),
            max_size=3,
        )
    )
    temporal = [
        TemporalNeighbour(episode=make_episode(f"t{i}", text), relation="after", anchor="e1")
        for i, text in enumerate(draw(st.lists(TEXT, max_size=4)))
    ]
    return result(hits, profiles=tuple(profiles), temporal=tuple(temporal))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recalled=results(),
    budget=st.integers(min_value=1, max_value=600),
    counter=st.sampled_from(COUNTERS),
)
def test_the_context_is_never_over_budget(
    recalled: RecallResult, budget: int, counter: TokenCounter
) -> None:
    block = recalled.context(budget_tokens=budget, counter=counter)
    assert counter(block) <= budget
    assert block == recalled.context(budget_tokens=budget, counter=counter)  # deterministic
    if block:
        assert block.startswith(TITLE + "\n\n### ")
        titles = [line for line in block.splitlines() if line.startswith("### ")]
        order = ["### Facts", "### Entity profiles", "### Temporal context", "### Evidence"]
        assert titles == [title for title in order if title in titles]
        for line in split_sections(block).get("### Facts", "").strip("\n").splitlines()[1:]:
            assert line.endswith("]") and (" [sources: " in line or "[no source episodes]" in line)
    # a larger budget never shows less
    if budget < 600:
        larger = recalled.context(budget_tokens=budget + 200, counter=counter)
        assert len(larger.splitlines()) >= len(block.splitlines())
