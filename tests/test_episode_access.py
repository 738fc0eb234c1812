"""Episode access statistics in rules, on both backends: ``access_count`` counts the
access-recording reads that returned an episode (``recent``, recall, ``record_access``),
``last_access`` is the latest of them, or the episode's timestamp when it was never read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from backends import NewLocation

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import IRError, StoreError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.stores.database import open_database

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
READ_AT = T0 + timedelta(days=35)
NIGHT = T0 + timedelta(days=40, hours=-6)  # 03:00, five days after the reads

NIGHTLY = """\
ir_version: 1
pack: reads
version: "1"
defaults: {cadence: {cron: "0 3 * * *"}, confidence: 0.8}
rules:
  - id: often_read
    claim: false
    when:
      - episode: {access_count: {ge: 2}, content: {bind: c}}
    emit: {kind: add, subject: episode, predicate: often_read, object: "{c}"}
  - id: idle
    claim: false
    when:
      - episode: {last_access: {older_than: {days: 30}, bind: at}, content: {bind: c}}
    emit: {kind: add, subject: episode, predicate: idle, object: "{c}", reason: "idle since {at}"}
"""


def _episode(n: int, at: datetime) -> Episode:
    return Episode(
        id=f"e{n}",
        content=f"note {n}",
        timestamp=at,
        user="alice",
        session="s1",
        agent="rag",
    )


async def _facts_by_predicate(mem: Consolidator) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for fact in await mem.facts(user="alice", agent="rag"):
        out.setdefault(fact.predicate, []).append(fact.object)
    return {k: sorted(v) for k, v in out.items()}


async def test_rules_see_how_often_and_when_an_episode_was_read(
    new_location: NewLocation,
) -> None:
    location = new_location()
    async with open_database(location, clock=lambda: READ_AT) as db:
        await db.memory.put_many([_episode(n, T0 + timedelta(minutes=n)) for n in (1, 2, 3)])
        # newest first: e3 and e2 are read, then e3 once more; e1 never
        assert [e.id for e in await db.memory.recent("alice", limit=2)] == ["e3", "e2"]
        assert [e.id for e in await db.memory.recent("alice", limit=1)] == ["e3"]
    async with Consolidator(location, [compile_text(NIGHTLY)], clock=lambda: NIGHT) as mem:
        report = await mem.consolidate(now=NIGHT)
        assert report.counts["add"] == 2
        facts = await _facts_by_predicate(mem)
        # e3 was returned twice, e2 once, e1 never
        assert facts["often_read"] == ["note 3"]
        # e2 and e3 were read five days ago; e1 never, so its last access is its time
        assert facts["idle"] == ["note 1"]
        (idle,) = [f for f in await mem.facts(user="alice") if f.predicate == "idle"]
        why = await mem.explain(idle.id)
        assert why.reason == f"idle since {(T0 + timedelta(minutes=1)).isoformat()}"
        assert why.bindings["at"] == (T0 + timedelta(minutes=1)).isoformat()


async def test_last_access_is_the_latest_read(new_location: NewLocation) -> None:
    """A read moves last_access forward: an old episode read recently is not idle, one
    read long ago is (and a timestamp test compares the read, not the episode's time)."""
    location = new_location()
    async with open_database(location, clock=lambda: T0 + timedelta(days=1)) as db:
        await db.memory.put_many([_episode(1, T0), _episode(2, T0 + timedelta(minutes=1))])
        await db.memory.recent("alice", limit=2)  # both read on day 1
    async with open_database(location, clock=lambda: READ_AT) as db:
        await db.memory.recent("alice", limit=1)  # e2 again on day 35
    pack = NIGHTLY.replace("{ge: 2}", "{eq: 1}")
    async with Consolidator(location, [compile_text(pack)], clock=lambda: NIGHT) as mem:
        await mem.consolidate(now=NIGHT)
        facts = await _facts_by_predicate(mem)
        assert facts == {"often_read": ["note 1"], "idle": ["note 1"]}


STREAMING = """\
ir_version: 1
pack: fresh
version: "1"
defaults: {cadence: {every: 1}, confidence: 0.8}
rules:
  - id: unread
    claim: false
    when:
      - episode: {access_count: {eq: 0, bind: n}, last_access: {bind: at}, content: {bind: c}}
    emit: {kind: add, subject: episode, predicate: "unread {n}", object: "{c}", reason: "{at}"}
  - id: read
    claim: false
    when:
      - episode: {access_count: {gt: 0}, content: {bind: c}}
    emit: {kind: add, subject: episode, predicate: read, object: "{c}"}
"""


async def test_a_streamed_episode_has_not_been_read(new_location: NewLocation) -> None:
    now = T0 + timedelta(hours=1)
    async with Consolidator(new_location(), [compile_text(STREAMING)], clock=lambda: now) as mem:
        report = await mem.record(_episode(1, T0))
        (one,) = report.passes
        assert one.fired == {"unread": 1}  # not "read": nothing returned it yet
        (fact,) = await mem.facts(user="alice", agent="rag")
        assert (fact.predicate, fact.object) == ("unread 0", "note 1")
        why = await mem.explain(fact.id)
        assert why.reason == T0.isoformat()  # never read: its last access is its time


def _error(text: str) -> str:
    with pytest.raises(IRError) as caught:
        compile_text(text, "reads.yaml")
    return str(caught.value)


def test_a_wrong_type_is_refused_with_its_path() -> None:
    message = _error(NIGHTLY.replace("{ge: 2}", '{eq: "x"}'))
    assert message == (
        "reads.yaml:9:34: rules[0].when[0].episode.access_count.eq: "
        "type mismatch: 'access_count' is integer, got string 'x'"
    )
    message = _error(NIGHTLY.replace("older_than: {days: 30}", 'gt: "yesterday"'))
    assert message.startswith("reads.yaml:14:")
    assert "rules[1].when[0].episode.last_access.gt: expected an ISO-8601 timestamp" in message


def test_a_misspelt_field_names_the_access_fields() -> None:
    message = _error(NIGHTLY.replace("access_count: {ge: 2}", "acces_count: {ge: 2}"))
    assert message.endswith(
        "rules[0].when[0].episode.acces_count: unknown field 'acces_count'; "
        "did you mean 'access_count'?"
    )


def test_access_fields_are_built_in_and_always_present() -> None:
    declared = NIGHTLY.replace('version: "1"\n', 'version: "1"\nfields: {last_access: string}\n')
    assert "fields.last_access: 'last_access' is a built-in episode field" in _error(declared)
    missing = NIGHTLY.replace("{ge: 2}", "{missing: true}")
    assert "episode.access_count.missing: field 'access_count' is always present" in (
        _error(missing)
    )


HISTORY = """\
ir_version: 1
pack: hist
version: "1"
fields: {subject: string}
rules:
  - id: r
    when:
      - episode: {subject: {bind: s}}
      - count: {keys: [subject], over: history, at_least: 2, access_count: {ge: 1}}
    emit: {kind: add, subject: "{s}", predicate: seen, object: twice}
"""


def test_history_patterns_refuse_access_statistics() -> None:
    message = _error(HISTORY)
    assert "rules[0].when[1].count.access_count: 'access_count' changes with every read" in (
        message
    )
    # over the pass it is an ordinary field of the pass's episodes
    compile_text(HISTORY.replace("over: history, ", ""))


SELECTED = """\
ir_version: 1
pack: sel
version: "1"
rules:
  - id: r
    select: {access_count: {ge: 1}, last_access: {newer_than: {days: 10}}}
    when:
      - episode: {content: {bind: c}}
    emit: {kind: add, subject: episode, predicate: selected, object: "{c}"}
"""


async def test_select_reads_access_statistics(new_location: NewLocation) -> None:
    location = new_location()
    async with open_database(location, clock=lambda: READ_AT) as db:
        await db.memory.put_many([_episode(n, T0 + timedelta(minutes=n)) for n in (1, 2)])
        await db.memory.recent("alice", limit=1)  # e2
    async with Consolidator(location, [compile_text(SELECTED)], clock=lambda: NIGHT) as mem:
        await mem.consolidate(now=NIGHT)
        assert await _facts_by_predicate(mem) == {"selected": ["note 2"]}


def test_a_pack_without_access_fields_asserts_no_access_slots() -> None:
    plain = compile_text(NIGHTLY.replace("access_count: {ge: 2}, ", ""))
    assert "f_access_count" not in plain.clips
    assert "access_count" not in plain.episode_fields


async def test_recall_counts_the_episodes_it_returns(new_location: NewLocation) -> None:
    """An episode recall returns is read, as one ``recent`` returns: counted once per
    recall that returns it (``touch=False`` counts nothing), and a rule sees the count."""
    location = new_location()
    episodes = [
        Episode(
            id=f"e{n}",
            content=text,
            timestamp=T0 + timedelta(minutes=n),
            user="alice",
            session="s1",
            agent="rag",
        )
        for n, text in enumerate(["green tea every morning", "the train to lisbon", "piano"])
    ]
    async with Consolidator(
        location, [compile_text(NIGHTLY)], clock=lambda: READ_AT, embedder="hash"
    ) as mem:
        await mem.memory.put_many(episodes)
        for _ in range(2):
            found = await mem.recall("green tea", user="alice", agent="rag", kinds="episodes")
            assert "e0" in [hit.id for hit in found.hits]
        quiet = await mem.recall(
            "green tea", user="alice", agent="rag", kinds="episodes", touch=False
        )
        assert "e0" in [hit.id for hit in quiet.hits]
        seen = {r.id: r for r in await mem.memory.by_ids(["e0", "e1", "e2"])}
        hit_ids = {hit.id for hit in found.hits}
        assert seen["e0"].access_count == 2
        assert seen["e0"].last_accessed == READ_AT  # the memory's clock
        for eid in ("e1", "e2"):  # counted only when a recall returned it
            assert seen[eid].access_count == (2 if eid in hit_ids else 0)
        report = await mem.consolidate(now=NIGHT)
        assert report.counts["add"] >= 1
        assert "green tea every morning" in (await _facts_by_predicate(mem))["often_read"]


async def test_reads_recorded_by_id(new_location: NewLocation) -> None:
    """``record_access`` counts reads made elsewhere (an episode put in a prompt), at a
    given time or now; an unknown id is left alone, and bad input changes nothing."""
    location = new_location()
    async with open_database(location, clock=lambda: READ_AT) as db:
        await db.memory.put_many([_episode(n, T0 + timedelta(minutes=n)) for n in (1, 2)])
        later = READ_AT + timedelta(hours=1)
        await db.memory.record_access(["e1", "e1", "nope"])
        await db.memory.record_access(["e2"], at=later)
        with pytest.raises(ValueError, match="naive"):
            await db.memory.record_access(["e1"], at=datetime(2026, 5, 1))
        with pytest.raises(StoreError, match="sequence of episode id strings"):
            await db.memory.record_access("e1")
        seen = {r.id: r for r in await db.memory.by_ids(["e1", "e2"])}
        assert (seen["e1"].access_count, seen["e1"].last_accessed) == (2, READ_AT)
        assert (seen["e2"].access_count, seen["e2"].last_accessed) == (1, later)
