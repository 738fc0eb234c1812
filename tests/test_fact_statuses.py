"""The full status set (specification 004), on both backends: ``challenged`` keeps a fact
current but flagged (out of search and recall unless asked for), ``merged`` closes it into
another current fact; rules emit both, ``update_status`` sets them by hand (API, CLI, MCP)
with every refusal leaving the store unchanged; ``status_history`` in the specification's
shape ``{old, new, reason, changed_at}``."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from backends import AnyFactStore, Backend, NewLocation, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from packs_helpers import engine_fact, first_issue, run_pass
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import FactNotFoundError, FactStatusError
from stargraph_mem.integrations.mcp_server import build_server
from stargraph_mem.model.deltas import DeleteDelta
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import FactPattern, StatusChange, status_changes
from stargraph_mem.model.lifecycle import (
    CHALLENGED,
    CLOSING,
    CURRENT,
    TRANSITIONS,
    transition_problem,
)
from stargraph_mem.stores import AddDelta, FactPayload

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
NOW = T0 + timedelta(days=3)
HOUR = timedelta(hours=1)


def add(obj: str, *, user: str = "alice", predicate: str = "likes") -> AddDelta:
    return AddDelta(
        user=user,
        agent="a1",
        source_episode_ids=[f"e-{user}-{predicate}-{obj}"],
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.7,
        fact=FactPayload(subject=user, predicate=predicate, object=obj),
    )


# --- the pure model -------------------------------------------------------------------------


def test_the_transition_table_keeps_challenged_current_and_closed_facts_closed() -> None:
    assert TRANSITIONS[CURRENT] == {CHALLENGED, *CLOSING}
    assert TRANSITIONS[CHALLENGED] == {CURRENT, *CLOSING}
    assert transition_problem("current", "challenged") is None
    assert transition_problem("challenged", "active") is None
    assert transition_problem("current", "active") == "it is active already"
    assert transition_problem("superseded", "active") == (
        "it is superseded: a closed fact keeps its status"
    )
    assert transition_problem("archived", "current") == (
        "it is archived: a closed fact keeps its status (restore it instead: a new fact)"
    )


def test_a_delete_delta_takes_challenged_and_merged_or_superseded_with_its_target() -> None:
    base: dict[str, Any] = {
        "user": "alice",
        "agent": "a1",
        "replaces": ["f1"],
        "source_episode_ids": ["e1"],
        "promotion_ts": T0,
        "rule_id": "r",
        "confidence": 0.5,
    }
    flag = DeleteDelta(**base, status="challenged")
    assert flag.flags and flag.successor_id is None
    merge = DeleteDelta(**base, status="merged", merged_into="f2")
    assert not merge.flags and merge.successor_id == "f2" and merge.named_ids == ["f1", "f2"]
    assert DeleteDelta(**base).delta_id == DeleteDelta(**base, status="deleted").delta_id
    replaced = DeleteDelta(**base, status="superseded", merged_into="f2")
    assert replaced.successor_id == "f2" and replaced.close_status == "superseded"
    assert replaced.delta_id != merge.delta_id
    for status in ("merged", "superseded"):
        with pytest.raises(ValueError, match=f"status '{status}' needs merged_into"):
            DeleteDelta(**base, status=status)
        with pytest.raises(ValueError, match="cannot be merged into or superseded by itself"):
            DeleteDelta(**base, status=status, merged_into="f1")
    with pytest.raises(ValueError, match="merged_into goes with status 'merged' or 'superseded'"):
        DeleteDelta(**base, merged_into="f2")


# --- update_status on the store -------------------------------------------------------------


async def test_challenge_clear_merge_and_invalidate_by_hand(backend: Backend) -> None:
    store = backend.facts
    tea, gin, rum = add("tea"), add("gin"), add("rum")
    await store.apply_deltas([tea, gin, rum])
    t, g, r = tea.new_fact_id, gin.new_fact_id, rum.new_fact_id

    flagged = await store.update_status(t, "challenged", reason="new source disagrees", at=NOW)
    assert (flagged.status, flagged.is_current) == ("challenged", True)
    assert [h.fact.object for h in await store.search("tea gin", touch=False)] == ["gin"]
    found = await store.search("tea gin", touch=False, include_challenged=True)
    assert sorted(h.fact.object for h in found) == ["gin", "tea"]
    assert sorted(f.object for f in await store.query(FactPattern())) == ["gin", "rum", "tea"]
    assert [f.object for f in await store.query(FactPattern(status="challenged"))] == ["tea"]
    assert sorted(f.object for f in await store.query(FactPattern(status="active"))) == [
        "gin",
        "rum",
    ]
    [engine] = [f for f in await store.current_facts(_alice()) if f.id == t]
    assert engine.status == "challenged"  # rules see the flag

    cleared = await store.update_status(t, "active", reason="checked: still true", at=NOW + HOUR)
    assert cleared.status == "current"
    merged = await store.update_status(g, "merged", merged_into=r, at=NOW + HOUR)
    assert (merged.status, merged.superseded_by, merged.is_current) == ("merged", r, False)
    await store.update_status(t, "challenged", reason="again", at=NOW + 2 * HOUR)
    gone = await store.update_status(t, "invalidated", reason="confirmed wrong", at=NOW + 3 * HOUR)
    assert (gone.status, gone.valid_until) == ("invalidated", NOW + 3 * HOUR)

    assert await store.status_history(t, shape="spec") == [
        StatusChange(old="active", new="challenged", reason="new source disagrees", changed_at=NOW),
        StatusChange(
            old="challenged", new="active", reason="checked: still true", changed_at=NOW + HOUR
        ),
        StatusChange(old="active", new="challenged", reason="again", changed_at=NOW + 2 * HOUR),
        StatusChange(
            old="challenged", new="invalidated", reason="confirmed wrong", changed_at=NOW + 3 * HOUR
        ),
    ]
    events = await store.status_history(t)
    assert [(e.event, e.status, e.rule_id) for e in events] == [
        ("created", "current", "r1"),
        ("challenged", "challenged", "update_status"),
        ("current", "current", "update_status"),
        ("challenged", "challenged", "update_status"),
        ("invalidated", "invalidated", "update_status"),
    ]
    [merge_event] = [e for e in await store.status_history(g) if e.event == "merged"]
    assert merge_event.related_fact_id == r
    # audited: each flag and close is a delete delta of rule update_status
    audited = [(a.delta.kind, a.rule_id) for a in await store.audit_rows()]
    assert audited.count(("delete", "update_status")) == 4
    assert [h.fact.object for h in await store.search("tea gin rum", touch=False)] == ["rum"]


async def test_a_fact_superseded_by_hand_names_its_newer_successor(backend: Backend) -> None:
    """Specification 004's ``superseded`` ("replaced by a newer memory") set by hand: the
    fact is closed, names its successor (a current fact of its user and agent, not older
    than it), leaves search, and its history says so; an older successor is refused."""
    store = backend.facts
    old, new = add("tea"), add("green_tea")
    new = new.model_copy(update={"promotion_ts": T0 + HOUR})
    await store.apply_deltas([old, new])
    o, n = old.new_fact_id, new.new_fact_id
    before = await snapshot(store)
    with pytest.raises(FactStatusError, match=f"fact {o} is older .*superseded by a newer one"):
        await store.update_status(n, "superseded", merged_into=o, reason="r", at=NOW)
    assert await snapshot(store) == before
    done = await store.update_status(o, "superseded", merged_into=n, reason="more precise", at=NOW)
    assert (done.status, done.superseded_by, done.valid_until) == ("superseded", n, NOW)
    assert [h.fact.id for h in await store.search("tea", touch=False)] == [n]
    assert await store.status_history(o, shape="spec") == [
        StatusChange(old="active", new="superseded", reason="more precise", changed_at=NOW)
    ]
    [event] = [e for e in await store.status_history(o) if e.event == "superseded"]
    assert (event.related_fact_id, event.rule_id) == (n, "update_status")
    with pytest.raises(FactStatusError, match="it is superseded: a closed fact keeps"):
        await store.update_status(o, "active", reason="undo", at=NOW + HOUR)


def _alice() -> Any:
    from stargraph_mem.stores import Partition

    return Partition("alice", "a1")


async def test_refused_changes_name_the_problem_and_change_nothing(backend: Backend) -> None:
    store = backend.facts
    tea, gin, bob = add("tea"), add("gin"), add("tea", user="bob")
    await store.apply_deltas([tea, gin, bob])
    t, g = tea.new_fact_id, gin.new_fact_id
    await store.update_status(g, "deleted")
    before = await snapshot(store)
    cases: list[tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
        (("fnope", "challenged"), {"reason": "x"}, FactNotFoundError, "no fact with id 'fnope'"),
        ((t, "challenged"), {}, FactStatusError, "a reason is required"),
        ((t, "invalidated"), {"reason": "  "}, FactStatusError, "a reason is required"),
        ((t, "active"), {}, FactStatusError, "it is active already"),
        ((g, "active"), {}, FactStatusError, f"cannot make fact {g} active: it is deleted"),
        ((t, "superseded"), {}, FactStatusError, "merged_into must name the fact that replaces"),
        ((t, "superseded"), {"merged_into": t}, FactStatusError, "cannot be superseded by itself"),
        ((t, "gone"), {}, FactStatusError, "status must be one of active, current, challenged"),
        ((t, "merged"), {}, FactStatusError, "merged_into must name the fact"),
        ((t, "merged"), {"merged_into": t}, FactStatusError, "cannot be merged into itself"),
        ((t, "deleted"), {"merged_into": g}, FactStatusError, "goes with status merged or"),
        ((t, "superseded"), {"merged_into": g}, FactStatusError, f"fact {g} is deleted"),
        ((t, "merged"), {"merged_into": g}, FactStatusError, f"fact {g} is deleted"),
        (
            (t, "merged"),
            {"merged_into": bob.new_fact_id},
            FactStatusError,
            "belongs to another (user, agent)",
        ),
        ((t, "merged"), {"merged_into": "fnope"}, FactNotFoundError, "no fact with id 'fnope'"),
        (
            (t, "challenged"),
            {"reason": "x", "at": datetime(2026, 5, 2)},  # naive on purpose
            FactStatusError,
            "naive datetime",
        ),
        ((t, "challenged"), {"reason": "a\x00b"}, FactStatusError, "NUL"),
        (
            (t, "deleted"),
            {"user": "bob"},
            FactStatusError,
            "it belongs to user 'alice' agent 'a1', not user 'bob' agent None",
        ),
        ((t, "deleted"), {"agent": "a2"}, FactStatusError, "not user None agent 'a2'"),
        (
            (t, "deleted"),
            {"at": T0 - HOUR},
            FactStatusError,
            "2026-05-01T08:00:00+00:00 is before it became valid (2026-05-01T09:00:00+00:00)",
        ),
    ]
    for args, kwargs, error, message in cases:
        with pytest.raises(error, match=re.escape(message)):
            await store.update_status(*args, **kwargs)
    assert await snapshot(store) == before
    done = await store.update_status(t, "deleted", user="alice", agent="a1", at=T0)
    assert (done.status, done.valid_until) == ("deleted", T0)


async def test_a_change_stamped_before_the_last_one_recorded_is_refused(
    backend: Backend,
) -> None:
    """A history says what a fact's status was at each time: a change stamped before one
    already recorded would claim the fact was active then closed, where it was challenged.
    And a merge into a fact that does not exist says so, whatever its time."""
    store = backend.facts
    tea = add("tea")
    await store.apply_deltas([tea])
    t = tea.new_fact_id
    await store.update_status(t, "challenged", reason="doubt", at=T0 + 10 * HOUR)
    before = await snapshot(store)
    with pytest.raises(FactNotFoundError, match="no fact with id 'fnope'"):
        await store.update_status(t, "merged", merged_into="fnope", at=T0 - HOUR)
    for status in ("invalidated", "active", "deleted"):
        with pytest.raises(
            FactStatusError,
            match=re.escape(
                "2026-05-01T16:00:00+00:00 is before its last recorded change "
                "(2026-05-01T19:00:00+00:00)"
            ),
        ):
            await store.update_status(t, status, reason="wrong", at=T0 + 7 * HOUR)
    assert await snapshot(store) == before
    await store.update_status(t, "invalidated", reason="wrong", at=T0 + 10 * HOUR)
    changes = await store.status_history(t, shape="spec")
    assert [(c.old, c.new) for c in changes] == [
        ("active", "challenged"),
        ("challenged", "invalidated"),
    ]


# --- rules emit them ------------------------------------------------------------------------

PACK = """\
ir_version: 1
pack: doubts
version: "1"
fields:
  subject: string
  predicate: string
  object: string
  intent: string
defaults:
  cadence: {every: 1}
  confidence: 0.8
rules:
  - id: doubt
    priority: 30
    when:
      - episode: {intent: {eq: doubt}, subject: {bind: s}, predicate: {bind: p}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}, status: {eq: current}}
    emit:
      kind: delete
      replaces: [f]
      status: challenged
      reason: "({s}, {p}) doubted"
  - id: merge
    priority: 20
    when:
      - episode: {intent: {eq: merge}, subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - fact: {as: keep, subject: {var: s}, predicate: {var: p}, object: {var: o}}
      - fact: {as: dup, subject: {var: s}, predicate: {ne: {var: p}}, object: {var: o}}
    emit:
      kind: delete
      replaces: [dup]
      status: merged
      merged_into: keep
      reason: "merged into ({s}, {p}, {o})"
  - id: learn
    priority: 10
    when:
      - episode: {intent: {eq: learn}, subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}}
    emit:
      kind: add
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
"""


def _said(n: int, intent: str, predicate: str, obj: str) -> Episode:
    return Episode(
        id=f"e{n}",
        content=f"alice {predicate} {obj}",
        timestamp=T0 + n * HOUR,
        user="alice",
        session="s1",
        agent="a1",
        metadata={"intent": intent, "subject": "alice", "predicate": predicate, "object": obj},
    )


STREAM = [
    _said(1, "learn", "likes", "tea"),
    _said(2, "learn", "drinks", "tea"),
    _said(3, "learn", "owns", "cat"),
    _said(4, "doubt", "owns", "cat"),
    _said(5, "doubt", "owns", "cat"),  # challenged already: the rule does not match again
    _said(6, "merge", "likes", "tea"),
]


async def test_rules_challenge_and_merge_facts(new_location: NewLocation, tmp_path: Path) -> None:
    pack = tmp_path / "doubts.yaml"
    pack.write_text(PACK)
    async with Consolidator.open(new_location(), [pack], clock=lambda: NOW) as mem:
        for episode in STREAM:
            await mem.record(episode)
        facts = {f.predicate: f for f in await mem.facts(status="all")}
        assert {p: f.status for p, f in facts.items()} == {
            "likes": "current",
            "drinks": "merged",
            "owns": "challenged",
        }
        assert facts["drinks"].superseded_by == facts["likes"].id
        changes = await mem.status_history(facts["owns"].id, shape="spec")
        assert [(c.old, c.new, c.reason) for c in changes] == [
            ("active", "challenged", "(alice, owns) doubted")
        ]
        assert [h.fact.predicate for h in await mem.search("alice", touch=False)] == ["likes"]
        why = await mem.explain(facts["drinks"].id)
        assert why.status_history[-1].related_fact_id == facts["likes"].id
        owns = facts["owns"].id
        recalled = await mem.recall("cat", user="alice", agent="a1", kinds="facts", touch=False)
        assert owns not in [h.id for h in recalled.hits]
        recalled = await mem.recall(
            "cat", user="alice", agent="a1", kinds="facts", touch=False, include_challenged=True
        )
        assert recalled.hits[0].id == owns
        assert set(recalled.hits[0].strategies) >= {"fts", "vector"}
        assert await mem.pin(owns, reason="keep while in doubt") is True  # current: pinnable
        assert [e.status for e in await mem.status_history(owns)][-1] == "challenged"


async def test_a_rule_supersedes_a_fact_by_another(
    new_location: NewLocation, tmp_path: Path
) -> None:
    """``status: superseded`` in a delete names the fact that replaces the ones it closes,
    as ``merged`` names the one they were merged into."""
    pack = tmp_path / "doubts.yaml"
    pack.write_text(PACK.replace("status: merged", "status: superseded"))
    async with Consolidator.open(new_location(), [pack], clock=lambda: NOW) as mem:
        for episode in STREAM:
            await mem.record(episode)
        facts = {f.predicate: f for f in await mem.facts(status="all")}
        assert (facts["drinks"].status, facts["drinks"].superseded_by) == (
            "superseded",
            facts["likes"].id,
        )
        why = await mem.explain(facts["drinks"].id)
        assert why.status_history[-1].event == "superseded"
        assert why.status_history[-1].related_fact_id == facts["likes"].id


def test_the_compiler_checks_merged_into() -> None:
    assert first_issue(PACK) == ""
    compile_text(PACK)
    no_target = PACK.replace("      merged_into: keep\n", "")
    assert first_issue(no_target) == (
        "rules/x.yaml:32:7: rules[1].emit.status: 'status: merged' needs 'merged_into': the "
        "named fact pattern the replaced facts were merged into, or that replaces them"
    )
    itself = PACK.replace("merged_into: keep", "merged_into: dup")
    assert first_issue(itself) == (
        "rules/x.yaml:33:7: rules[1].emit.merged_into: 'dup' is also in 'replaces': a fact "
        "cannot be merged into itself"
    )
    wrong = PACK.replace("status: challenged", "status: challenged\n      merged_into: f")
    assert first_issue(wrong) == (
        "rules/x.yaml:22:7: rules[0].emit.merged_into: 'merged_into' goes with 'status: "
        "merged' or 'status: superseded'"
    )
    replaced = no_target.replace("status: merged", "status: superseded")
    assert first_issue(replaced) == (
        "rules/x.yaml:32:7: rules[1].emit.status: 'status: superseded' needs 'merged_into': "
        "the named fact pattern the replaced facts were merged into, or that replaces them"
    )
    assert first_issue(PACK.replace("status: merged", "status: superseded")) == ""


DOUBT_SWEEP = """\
ir_version: 1
pack: doubt_sweep
version: "1"
rules:
  - id: doubt_weak
    cadence: {cron: "0 3 * * *"}
    when:
      - fact: {as: f, confidence: {lt: 0.3}}
    emit: {kind: delete, replaces: [f], sources: [f], status: challenged, reason: weak}
  - id: see_archived
    cadence: {cron: "0 3 * * *"}
    when:
      - fact: {as: a, status: archived, confidence: {lt: 0.1}}
    emit: {kind: noop, sources: [a]}
"""


def test_a_flagging_rule_flags_each_fact_once() -> None:
    """A rule that challenges facts matches only those not challenged yet (in the store,
    or earlier in the pass: the fact is marked in CLIPS), so it never loops; its patterns
    keep one test per slot beside a pack's archived-facts test."""
    compiled = compile_text(DOUBT_SWEEP)
    assert '(f_status ~"archived"&~"challenged")' in compiled.clips
    assert '(modify ?i_fa_f (f_status "challenged"))' in compiled.clips
    weak = replace(engine_fact("f1", ("s", "p", "o")), confidence=0.2)
    flagged = replace(engine_fact("f2", ("s", "p", "q")), confidence=0.2, status="challenged")
    strong = replace(engine_fact("f3", ("s", "p", "r")), confidence=0.9)
    out = run_pass(compiled, [], [weak, flagged, strong], now=NOW)
    deletes = [d for d in out.deltas if isinstance(d, DeleteDelta)]
    assert len(deletes) == len(out.deltas)
    assert [(d.kind, d.replaces, d.status) for d in deletes] == [("delete", ["f1"], "challenged")]
    assert out.facts_after is not None
    assert {f.id: f.status for f in out.facts_after} == {
        "f1": "challenged",
        "f2": "challenged",
        "f3": "current",
    }
    again = run_pass(compiled, [], list(out.facts_after), now=NOW + HOUR)
    assert list(again.deltas) == []


# --- a property: any sequence of requested changes ------------------------------------------

REQUESTS = st.lists(
    st.tuples(
        st.sampled_from(["active", "challenged", "merged", "invalidated", "deleted", "archived"]),
        st.booleans(),  # with a reason
    ),
    max_size=6,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(requests=REQUESTS)
async def test_requested_changes_follow_the_transition_table(
    backend: Backend, requests: list[tuple[str, bool]]
) -> None:
    """Whatever is asked, in whatever order: a change is applied exactly when the table
    allows it (and its reason is there), a refused one changes nothing, and the history's
    changes chain (each ``old`` is the previous ``new``) to the fact's status."""
    store = backend.facts
    first, other = add(f"x{len(requests)}-{id(requests)}"), add(f"y{id(requests)}")
    await store.apply_deltas([first, other])
    fid = first.new_fact_id
    status = CURRENT
    for k, (wanted, with_reason) in enumerate(requests):
        reason = "because" if with_reason else ""
        into = other.new_fact_id if wanted == "merged" else None
        allowed = transition_problem(status, wanted) is None and (
            with_reason or wanted not in ("challenged", "invalidated")
        )
        at = NOW + k * HOUR
        if allowed:
            fact = await store.update_status(fid, wanted, reason=reason, merged_into=into, at=at)
            status = "current" if wanted == "active" else wanted
            assert fact.status == status
        else:
            with pytest.raises(FactStatusError):
                await store.update_status(fid, wanted, reason=reason, merged_into=into, at=at)
    assert (await store.get(fid)).status == status
    changes = await store.status_history(fid, shape="spec")
    assert changes == status_changes(await store.status_history(fid))
    chain = ["active", *(c.new for c in changes)]
    assert all(c.old == chain[i] for i, c in enumerate(changes))
    assert chain[-1] == ("active" if status == "current" else status)


# --- CLI ------------------------------------------------------------------------------------


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


async def _two_facts(location: str) -> tuple[str, str]:
    tea, gin = add("tea"), add("gin")
    async with Consolidator(location, []) as mem:
        await mem.fact_store.apply_deltas([tea, gin])
    return tea.new_fact_id, gin.new_fact_id


def test_cli_update_status_history_and_facts_by_status(new_location: NewLocation) -> None:
    db = new_location()
    t, g = asyncio.run(_two_facts(db))
    at = "2026-05-04T09:00:00+00:00"
    assert _cli("update-status", t, "challenged", "--db", db, "--at", at, "--reason", "doubt") == (
        0,
        f"{t}: active -> challenged\n",
        "",
    )
    assert _cli("update-status", g, "merged", "--db", db, "--merged-into", t, "--at", at) == (
        0,
        f"{g}: active -> merged into {t}\n",
        "",
    )
    code, out, _ = _cli("facts", "--db", db, "--status", "challenged")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == [t]
    assert out.splitlines()[0].split() == [
        "ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "STATUS", "OBJECT",
    ]  # fmt: skip
    code, out, _ = _cli("facts", "--db", db, "--status", "merged", "--json")
    assert [json.loads(line)["superseded_by"] for line in out.splitlines()] == [t]
    assert _cli("facts", "--db", db, "--search", "tea")[1].splitlines()[1:] == []
    code, out, _ = _cli("facts", "--db", db, "--search", "tea", "--include-challenged")
    assert [line.split()[0] for line in out.splitlines()[1:]] == [t]
    assert _cli("history", t, "--db", db, "--spec") == (
        0,
        f"{at} active -> challenged reason=doubt\n",
        "",
    )
    code, out, _ = _cli("history", t, "--db", db, "--spec", "--json")
    assert json.loads(out) == [
        {
            "old": "active",
            "new": "challenged",
            "reason": "doubt",
            "changed_at": "2026-05-04T09:00:00Z",
        }
    ]
    code, out, _ = _cli("explain", g, "--db", db)
    assert out.splitlines()[-1] == f"  change     {at} active -> merged"
    assert _cli("update-status", g, "active", "--db", db) == (
        1,
        "",
        f"error: cannot make fact {g} active: it is merged: a closed fact keeps its status\n",
    )
    assert _cli("update-status", t, "active", "--db", db, "--at", "2026-05-04T09:00:00") == (
        1,
        "",
        "error: --at '2026-05-04T09:00:00' has no UTC offset (write e.g. "
        "2026-05-04T09:00:00+00:00)\n",
    )
    for args in ([g, "merged"], [g, "superseded"], [g, "active", "--superseded-by", t]):
        code, out, err = _cli("update-status", *args, "--db", db)
        assert (code, out) == (2, "")
        assert "--merged-into (or --superseded-by) names the fact it was merged into" in err
    assert _cli("update-status", "fnope", "invalidated", "--db", db, "--reason", "x") == (
        1,
        "",
        "error: no fact with id 'fnope'\n",
    )


def test_cli_help_of_update_status() -> None:
    code, out, _ = _cli("update-status", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "Change a fact's status (specification 004's update_status)" in text
    assert "--merged-into" in text and "--reason" in text and "--at" in text
    assert "--superseded-by" in text


def test_cli_supersedes_a_fact_by_a_newer_one(new_location: NewLocation) -> None:
    db = new_location()
    t, g = asyncio.run(_two_facts(db))
    at = "2026-05-04T09:00:00+00:00"
    args = ("--db", db, "--at", at, "--reason", "gin is the news")
    assert _cli("update-status", t, "superseded", "--superseded-by", g, *args) == (
        0,
        f"{t}: active -> superseded by {g}\n",
        "",
    )
    code, out, _ = _cli("facts", "--db", db, "--status", "superseded", "--json")
    assert code == 0
    assert [
        (json.loads(line)["id"], json.loads(line)["superseded_by"]) for line in out.splitlines()
    ] == [(t, g)]
    assert _cli("history", t, "--db", db, "--spec") == (
        0,
        f"{at} active -> superseded reason=gin is the news\n",
        "",
    )


# --- MCP ------------------------------------------------------------------------------------


async def test_mcp_update_status_and_status_history(new_location: NewLocation) -> None:
    db = new_location()
    t, g = await _two_facts(db)
    async with Consolidator(db, []) as mem, Client(build_server(mem)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["update_status"].input_schema["additionalProperties"] is False
        done = await client.call_tool(
            "update_status",
            {"fact_id": t, "status": "challenged", "reason": "doubt", "at": "2026-05-04T09:00:00Z"},
        )
        assert not done.is_error
        result = done.structured_content
        assert result is not None
        assert (result["old"], result["new"], result["fact"]["status"]) == (
            "active",
            "challenged",
            "challenged",
        )
        assert result["status_history"] == [
            {
                "old": "active",
                "new": "challenged",
                "reason": "doubt",
                "changed_at": "2026-05-04T09:00:00Z",
            }
        ]
        before = await snapshot(cast(AnyFactStore, mem.fact_store))
        for arguments, message in [
            ({"fact_id": g, "status": "challenged"}, "a reason is required"),
            ({"fact_id": g, "status": "superseded"}, "merged_into must name the fact that"),
            ({"fact_id": g, "status": "replaced", "merged_into": t}, "status"),
            ({"fact_id": g, "status": "merged", "merged_into": g}, "merged into itself"),
            ({"fact_id": g, "status": "deleted", "users": "x"}, "users"),
            ({"fact_id": g, "status": "deleted", "at": "2026-05-04T09:00:00"}, "UTC offset"),
            ({"fact_id": g, "status": "deleted", "user": "bob"}, "it belongs to user 'alice'"),
            ({"fact_id": "fnope", "status": "deleted"}, "no fact with id"),
        ]:
            refused = await client.call_tool("update_status", arguments)
            assert refused.is_error
            assert message in refused.content[0].text  # type: ignore[union-attr]
        assert await snapshot(cast(AnyFactStore, mem.fact_store)) == before
        later = {"at": "2026-05-04T10:00:00Z", "reason": "said better"}
        done = await client.call_tool(
            "update_status", {"fact_id": g, "status": "superseded", "merged_into": t, **later}
        )
        assert done.structured_content is not None
        assert done.structured_content["fact"]["superseded_by"] == t
        assert done.structured_content["new"] == "superseded"
        found = await client.call_tool("search_facts", {"query": "tea gin"})
        assert found.structured_content is not None
        assert found.structured_content["hits"] == []  # tea challenged, gin superseded
        found = await client.call_tool(
            "search_facts", {"query": "tea gin", "include_challenged": True}
        )
        assert found.structured_content is not None
        assert [h["fact"]["object"] for h in found.structured_content["hits"]] == ["tea"]
        shown = await client.call_tool("status_history", {"fact_id": t})
        assert shown.structured_content is not None
        assert shown.structured_content["status"] == "challenged"
        assert len(shown.structured_content["status_history"]) == 1
