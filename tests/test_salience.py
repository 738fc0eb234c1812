"""Salience: property tests for RuleBasedScorer's bounds and monotonicity, and the gate."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.salience import (
    DEFAULT_FREQUENCY_SCALE,
    DEFAULT_TAU_SECONDS,
    RuleBasedScorer,
    SalienceContext,
    SalienceScorer,
    gate,
)
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

offsets = st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(
    lambda m: timezone(timedelta(minutes=m))
)
aware = st.datetimes(timezones=offsets)
counts = st.integers(min_value=0, max_value=10**12)
unit = st.floats(min_value=0.0, max_value=1.0)
weight = st.floats(min_value=0.0, max_value=1e6)
positive = st.floats(min_value=1e-9, max_value=1e12)
seconds = st.floats(min_value=0.0, max_value=1e10)


def record(
    timestamp: datetime = NOW,
    seq: int = 1,
    content: str = "likes tea",
    last_accessed: datetime | None = None,
    access_count: int = 0,
) -> EpisodeRecord:
    return EpisodeRecord(
        seq=seq,
        id=f"e{seq}",
        content=content,
        timestamp=timestamp,
        source_node=None,
        user="u",
        session="s",
        agent="a",
        last_accessed=last_accessed,
        access_count=access_count,
    )


def episode(timestamp: datetime = NOW) -> Episode:
    return Episode(id="e1", content="c", timestamp=timestamp, user="u", session="s", agent="a")


@st.composite
def scorers(draw: st.DrawFn) -> RuleBasedScorer:
    w = (draw(weight), draw(weight), draw(weight))
    if sum(w) == 0:
        w = (1.0, w[1], w[2])
    return RuleBasedScorer(
        tau=draw(positive),
        w_recency=w[0],
        w_relevance=w[1],
        w_importance=w[2],
        frequency_scale=draw(positive),
    )


@st.composite
def contexts(draw: st.DrawFn) -> SalienceContext:
    return SalienceContext(
        now=draw(aware),
        last_accessed=draw(st.none() | aware),
        access_count=draw(counts),
        rule_match=draw(unit),
        importance=draw(unit),
        relevance=draw(st.none() | st.floats(min_value=-1.0, max_value=1.0)),
        tau_seconds=draw(st.none() | positive),
    )


@given(scorer=scorers(), timestamp=aware, ctx=contexts(), as_model=st.booleans())
def test_score_is_in_unit_interval(
    scorer: RuleBasedScorer, timestamp: datetime, ctx: SalienceContext, as_model: bool
) -> None:
    ep = episode(timestamp) if as_model else record(timestamp)
    value = scorer.score_sync(ep, ctx)
    assert math.isfinite(value)
    assert 0.0 <= value <= 1.0


@given(scorer=scorers(), ages=st.tuples(seconds, seconds).map(sorted), ctx=contexts())
def test_older_last_access_never_scores_higher(
    scorer: RuleBasedScorer, ages: list[float], ctx: SalienceContext
) -> None:
    younger, older = (replace(ctx, now=NOW, last_accessed=NOW - timedelta(seconds=a)) for a in ages)
    assert scorer.score_sync(record(), older) <= scorer.score_sync(record(), younger)


@given(scorer=scorers(), counts_=st.tuples(counts, counts).map(sorted), ctx=contexts())
def test_more_accesses_never_score_lower(
    scorer: RuleBasedScorer, counts_: list[int], ctx: SalienceContext
) -> None:
    fewer, more = (replace(ctx, access_count=n) for n in counts_)
    assert scorer.score_sync(record(), fewer) <= scorer.score_sync(record(), more)


@given(
    w_recency=st.floats(min_value=1e-3, max_value=1e6),
    tau=positive,
    rule_match=unit,
    age=st.floats(min_value=0.0, max_value=7 * 86400.0),
)
def test_fresh_never_accessed_episode_scores_above_zero(
    w_recency: float, tau: float, rule_match: float, age: float
) -> None:
    scorer = RuleBasedScorer(w_recency=w_recency, tau=max(tau, 3600.0))
    ctx = SalienceContext(now=NOW, rule_match=rule_match)
    assert scorer.score_sync(record(NOW - timedelta(seconds=age)), ctx) > 0.0


def test_v1_fresh_episode_scores_exactly() -> None:
    scorer = RuleBasedScorer()
    assert scorer.score_sync(record(), SalienceContext(now=NOW)) == 0.5
    assert scorer.score_sync(record(), SalienceContext(now=NOW, rule_match=0.0)) == 0.25


def test_formula_at_a_known_point() -> None:
    scorer = RuleBasedScorer(w_recency=0.5, w_relevance=0.25, w_importance=0.25)
    ctx = SalienceContext(
        now=NOW,
        last_accessed=NOW - timedelta(seconds=DEFAULT_TAU_SECONDS),
        access_count=int(DEFAULT_FREQUENCY_SCALE),
        rule_match=0.5,
        relevance=0.8,
        importance=0.4,
    )
    base = 0.5 * math.exp(-1) + 0.25 * 0.8 + 0.25 * 0.4
    expected = base * (1 - 0.5 * math.exp(-1)) * 0.75
    assert scorer.score_sync(record(), ctx) == pytest.approx(expected, rel=1e-12)
    negative = SalienceContext(now=NOW, relevance=-0.9)
    assert scorer.score_sync(record(), negative) == scorer.score_sync(
        record(), SalienceContext(now=NOW)
    )


def test_context_tau_overrides_the_scorers_tau() -> None:
    scorer = RuleBasedScorer(tau=DEFAULT_TAU_SECONDS)
    hour_old = record(NOW - timedelta(hours=1))
    own = scorer.score_sync(hour_old, SalienceContext(now=NOW))
    given = scorer.score_sync(hour_old, SalienceContext(now=NOW, tau_seconds=3600))
    assert own == pytest.approx(0.5 * math.exp(-1 / 24), rel=1e-12)
    assert given == pytest.approx(0.5 * math.exp(-1), rel=1e-12)


def test_last_accessed_is_used_instead_of_timestamp() -> None:
    scorer = RuleBasedScorer()
    old = record(NOW - timedelta(days=30))
    never = scorer.score_sync(old, SalienceContext(now=NOW))
    touched = scorer.score_sync(old, SalienceContext(now=NOW, last_accessed=NOW))
    assert never < 1e-12
    assert touched == scorer.score_sync(record(NOW), SalienceContext(now=NOW))
    hour_ago = SalienceContext(now=NOW, last_accessed=NOW - timedelta(hours=1))
    assert scorer.score_sync(old, hour_ago) == scorer.score_sync(record(), hour_ago)


def test_future_access_counts_as_now() -> None:
    scorer = RuleBasedScorer()
    future = SalienceContext(now=NOW, last_accessed=NOW + timedelta(days=3))
    assert scorer.score_sync(record(), future) == scorer.score_sync(
        record(), SalienceContext(now=NOW)
    )


def test_offsets_do_not_change_elapsed_time() -> None:
    scorer = RuleBasedScorer()
    tokyo = NOW.astimezone(timezone(timedelta(hours=9)))
    assert scorer.score_sync(record(tokyo), SalienceContext(now=NOW)) == 0.5


def test_naive_datetimes_are_rejected() -> None:
    naive = datetime(2026, 6, 1, 12, 0)
    with pytest.raises(ValueError, match="now"):
        SalienceContext(now=naive)
    with pytest.raises(ValueError, match="last_accessed"):
        SalienceContext(now=NOW, last_accessed=naive)
    with pytest.raises(ValueError, match=r"episode\.timestamp"):
        RuleBasedScorer().score_sync(record(naive), SalienceContext(now=NOW))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0])
@pytest.mark.parametrize(
    "name", ["w_recency", "w_relevance", "w_importance", "tau", "frequency_scale"]
)
def test_bad_scorer_parameters_are_rejected(name: str, bad: float) -> None:
    with pytest.raises(ValueError, match=name):
        RuleBasedScorer(**{name: bad})


def test_zero_tau_and_all_zero_weights_are_rejected() -> None:
    with pytest.raises(ValueError, match="tau"):
        RuleBasedScorer(tau=0.0)
    with pytest.raises(ValueError, match="at least one"):
        RuleBasedScorer(w_recency=0.0)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("rule_match", math.nan),
        ("rule_match", 1.5),
        ("importance", math.inf),
        ("importance", -0.1),
        ("relevance", math.nan),
        ("relevance", 1.01),
        ("access_count", -1),
        ("access_count", True),
        ("query_embedding", (1.0, math.nan)),
        ("tau_seconds", 0.0),
        ("tau_seconds", -60.0),
        ("tau_seconds", math.nan),
        ("tau_seconds", math.inf),
        ("tau_seconds", "3600"),
        ("tau_seconds", True),
    ],
)
def test_bad_context_values_are_rejected(field: str, bad: object) -> None:
    with pytest.raises(ValueError, match=field):
        SalienceContext(now=NOW, **{field: bad})  # type: ignore[arg-type]


def test_context_for_record_carries_access_statistics() -> None:
    touched = record(
        NOW - timedelta(days=9), last_accessed=NOW - timedelta(hours=2), access_count=4
    )
    ctx = SalienceContext.for_record(touched, now=NOW, rule_match=0.5)
    assert (ctx.last_accessed, ctx.access_count, ctx.rule_match) == (
        touched.last_accessed,
        4,
        0.5,
    )


class LengthScorer:
    """A custom scorer that subclasses nothing: longer content is more salient."""

    async def score(self, episode: Episode | EpisodeRecord, context: SalienceContext) -> float:
        return min(1.0, len(episode.content) / 10)


class BrokenScorer:
    async def score(self, episode: Episode | EpisodeRecord, context: SalienceContext) -> float:
        return math.nan


def test_protocol_recognises_structural_scorers() -> None:
    assert isinstance(LengthScorer(), SalienceScorer)
    assert isinstance(RuleBasedScorer(), SalienceScorer)
    assert not isinstance(object(), SalienceScorer)


async def test_async_score_matches_score_sync() -> None:
    scorer = RuleBasedScorer()
    ctx = SalienceContext(now=NOW, last_accessed=NOW - timedelta(hours=5), access_count=2)
    assert await scorer.score(record(), ctx) == scorer.score_sync(record(), ctx)


async def test_gate_uses_custom_scores_and_keeps_order() -> None:
    ctx = SalienceContext(now=NOW)
    contents = ["a" * 9, "a", "a" * 5, "a" * 20, "a" * 4]
    episodes = [record(seq=i, content=text) for i, text in enumerate(contents)]
    kept, dropped = await gate(LengthScorer(), [(e, ctx) for e in episodes], 0.5)
    assert [e.id for e in kept] == ["e0", "e2", "e3"]
    assert [e.id for e in dropped] == ["e1", "e4"]


async def test_gate_with_rule_based_scorer_drops_stale_episodes() -> None:
    ctx = SalienceContext(now=NOW)
    fresh, stale = record(NOW, seq=1), record(NOW - timedelta(days=10), seq=2)
    kept, dropped = await gate(RuleBasedScorer(), [(stale, ctx), (fresh, ctx)], 0.1)
    assert (kept, dropped) == ([fresh], [stale])
    assert await gate(RuleBasedScorer(), [], 0.1) == ([], [])


async def test_gate_rejects_contract_breaking_scores_and_bad_minimum() -> None:
    ctx = SalienceContext(now=NOW)
    with pytest.raises(ValueError, match="BrokenScorer"):
        await gate(BrokenScorer(), [(record(), ctx)], 0.1)
    with pytest.raises(ValueError, match="minimum"):
        await gate(LengthScorer(), [(record(), ctx)], math.nan)


@settings(max_examples=25)
@given(minimum=unit, contents=st.lists(st.text(max_size=15), max_size=8))
def test_gate_partitions_by_minimum(minimum: float, contents: list[str]) -> None:
    ctx = SalienceContext(now=NOW)
    episodes = [record(seq=i, content=c) for i, c in enumerate(contents)]
    kept, dropped = asyncio.run(gate(LengthScorer(), [(e, ctx) for e in episodes], minimum))
    assert kept == [e for e in episodes if min(1.0, len(e.content) / 10) >= minimum]
    assert dropped == [e for e in episodes if min(1.0, len(e.content) / 10) < minimum]
