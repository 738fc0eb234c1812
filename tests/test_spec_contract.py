"""Code written against the specification (000, 001) runs as written, names and examples.

The specification's module paths ``stargraph.stores…`` are ``stargraph_mem.stores…`` here.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from stargraph_mem.engine.contract import RUNS_PACK
from stargraph_mem.engine.passes.filters import utc_text
from stargraph_mem.errors import (
    ConsolidationRuleError,
    DeltaValidationError,
    MigrationNotSupported,
    StoreConfigError,
)
from stargraph_mem.stores import (
    ConsolidationRule,
    Episode,
    FactPattern,
    FactStore,
    IncrementalMemoryStore,
    MemoryDelta,
    MemoryStore,
    MigrationOp,
    MigrationPlan,
    SQLiteFactStore,
    SQLiteMemoryStore,
    StoreHealth,
    mounts,
)
from stargraph_mem.stores.config import load_stores
from stargraph_mem.stores.memory import AddDelta, DeleteDelta, NoopDelta, UpdateDelta
from stargraph_mem.stores.repositories.kg_promotion import KGTriple, PromoteTriplesToFacts

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
TS = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def episode(
    eid: str,
    content: str = "",
    *,
    user: str = "alice",
    session: str = "S1",
    agent: str = "rag",
    at: datetime = T0,
    **metadata: Any,
) -> Episode:
    return Episode(
        id=eid,
        content=content or eid,
        timestamp=at,
        source_node="chat",
        user=user,
        session=session,
        agent=agent,
        metadata=metadata,
    )


async def put(store: SQLiteMemoryStore, *episodes: Episode) -> None:
    for ep in episodes:
        await store.put(ep, user=ep.user, session=ep.session, agent=ep.agent)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteMemoryStore(path=tmp_path / "memory.db") as opened:
        yield opened


# --- protocol surfaces ----------------------------------------------------------------


class SpecOnlyStore:
    """Exactly the specification's MemoryStore surface, nothing more."""

    async def bootstrap(self) -> None: ...

    async def health(self) -> StoreHealth:
        return StoreHealth(ok=True, path="", fragment_count=0)

    async def migrate(self, plan: MigrationPlan) -> None: ...

    async def put(self, episode: Episode, *, user: str, session: str, agent: str) -> None: ...

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]:
        return []

    async def consolidate(self, rule: ConsolidationRule) -> list[MemoryDelta]:
        return []


def test_a_class_with_the_specified_surface_is_a_memory_store(tmp_path: Path) -> None:
    assert isinstance(SpecOnlyStore(), MemoryStore)
    assert not isinstance(SpecOnlyStore(), IncrementalMemoryStore)
    sqlite_store = SQLiteMemoryStore(path=tmp_path / "m.db")
    assert isinstance(sqlite_store, MemoryStore)
    assert isinstance(sqlite_store, IncrementalMemoryStore)
    assert not isinstance(object(), MemoryStore)


def test_fact_store_protocol_has_migrate(tmp_path: Path) -> None:
    assert "migrate" in dir(FactStore)
    assert isinstance(SQLiteFactStore(tmp_path / "f.db"), FactStore)


# --- the delta classes as spec 000 writes them -----------------------------------------


PROVENANCE: dict[str, Any] = {
    "source_episode_ids": ["e1"],
    "promotion_ts": TS,
    "rule_id": "r",
    "confidence": 0.9,
}
PAYLOAD = {"subject": "alice", "predicate": "likes", "object": "tea"}


def spec_deltas() -> list[Any]:
    return [
        AddDelta(kind="add", fact_payload=PAYLOAD, **PROVENANCE),
        UpdateDelta(kind="update", replaces=["f1"], fact_payload=PAYLOAD, **PROVENANCE),
        DeleteDelta(kind="delete", replaces=["f1"], **PROVENANCE),
        NoopDelta(kind="noop", **PROVENANCE),
    ]


def test_spec_delta_classes_build_and_round_trip_through_the_union() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(MemoryDelta)
    spec_union = Annotated[
        AddDelta | UpdateDelta | DeleteDelta | NoopDelta, Field(discriminator="kind")
    ]
    for delta in spec_deltas():
        again = adapter.validate_python(delta.model_dump())
        assert again == delta and again.delta_id == delta.delta_id
        assert TypeAdapter(spec_union).validate_python(delta.model_dump()) == delta
    add = spec_deltas()[0]
    assert add.fact_payload == PAYLOAD  # read back exactly as written
    assert add.user is None and add.agent is None


@pytest.mark.parametrize("missing", ["source_episode_ids", "promotion_ts", "rule_id", "confidence"])
def test_provenance_fields_are_mandatory(missing: str) -> None:
    fields = {k: v for k, v in PROVENANCE.items() if k != missing}
    with pytest.raises(ValidationError, match=missing):
        AddDelta(kind="add", fact_payload=PAYLOAD, **fields)


@pytest.mark.parametrize("cls", [UpdateDelta, DeleteDelta])
def test_replaces_is_required_on_update_and_delete(cls: type[Any]) -> None:
    extra = {"fact_payload": PAYLOAD} if cls is UpdateDelta else {}
    with pytest.raises(ValidationError, match="replaces"):
        cls(**extra, **PROVENANCE)


def test_both_spellings_of_the_fact_give_one_id() -> None:
    flat = {**PAYLOAD, "since": 2020}
    spec = AddDelta(fact_payload=flat, user="u", agent="a", **PROVENANCE)
    ours = AddDelta(fact={**PAYLOAD, "payload": {"since": 2020}}, user="u", agent="a", **PROVENANCE)
    assert spec.canonical_body() == ours.canonical_body()
    assert spec.delta_id == ours.delta_id
    with pytest.raises(ValidationError, match="not both"):
        AddDelta(fact=PAYLOAD, fact_payload=PAYLOAD, **PROVENANCE)


# --- scope from the source episodes ---------------------------------------------------------


async def test_a_delta_without_scope_takes_it_from_its_source_episodes(
    store: SQLiteMemoryStore,
) -> None:
    await put(store, episode("e1", user="bob", agent="planner"))
    unscoped = AddDelta(kind="add", fact_payload=PAYLOAD, **PROVENANCE)
    scoped = unscoped.scoped("bob", "planner")
    async with SQLiteFactStore(store.path) as facts:
        result = await facts.apply_delta(unscoped)
        assert result.created_fact_ids == (scoped.new_fact_id,)
        (fact,) = await facts.query(FactPattern())
        assert (fact.user, fact.agent, fact.subject) == ("bob", "planner", "alice")
        assert (await facts.lineage(fact.id)).source_episode_ids == ("e1",)
        assert (await facts.apply_delta(scoped)).skipped == 1


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        (["e1", "ghost"], "'ghost' are not stored"),
        (["e1", "e2"], "different scopes"),
    ],
)
async def test_unresolvable_scope_is_refused_and_nothing_changes(
    store: SQLiteMemoryStore, sources: list[str], message: str
) -> None:
    await put(store, episode("e1"), episode("e2", agent="other"))
    fields = {**PROVENANCE, "source_episode_ids": sources}
    good = AddDelta(fact_payload=PAYLOAD, **PROVENANCE)
    async with SQLiteFactStore(store.path) as facts:
        with pytest.raises(DeltaValidationError, match=message) as info:
            await facts.apply_deltas([good, AddDelta(fact_payload=PAYLOAD, **fields)])
        assert info.value.context["index"] == 1
        assert await facts.query(FactPattern(include_history=True)) == []
        assert await facts.audit_rows() == []


async def test_unscoped_delta_on_a_file_without_episodes_is_refused(tmp_path: Path) -> None:
    async with SQLiteFactStore(tmp_path / "facts.db") as facts:
        with pytest.raises(DeltaValidationError, match="holds no episodes"):
            await facts.apply_delta(AddDelta(fact_payload=PAYLOAD, **PROVENANCE))


# --- ConsolidationRule ---------------------------------------------------------------------


def test_then_emits_takes_fact_channel_names() -> None:
    rule = ConsolidationRule(id="r", cadence={"every": 1}, when_filter="", then_emits=["facts"])
    assert rule.channels == ("facts",)
    assert rule.kinds == ("add", "update", "delete", "noop")
    mixed = ConsolidationRule(id="r", then_emits=["facts", "add", "noop"])
    assert (mixed.channels, mixed.kinds) == (("facts",), ("add", "noop"))
    with pytest.raises(ConsolidationRuleError, match=r"then_emits\.0"):
        ConsolidationRule(id="r", then_emits=["not a name"])


# --- recent(): the widening table ---------------------------------------------------------


async def test_recent_widens_as_the_specification_tables_say(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteMemoryStore(path=Path("./.memory"))
    await store.bootstrap()
    try:
        await put(
            store,
            episode("s1rag", at=T0),
            episode("s2rag", session="S2", at=T0 + timedelta(minutes=1)),
            episode("s1other", agent="other", at=T0 + timedelta(minutes=2)),
            episode("alice2", user="alice2", at=T0 + timedelta(minutes=3)),
            episode("Alice", user="Alice", at=T0 + timedelta(minutes=4)),
        )

        async def ids(*args: Any, **kwargs: Any) -> list[str]:
            return [e.id for e in await store.recent(*args, **kwargs, limit=10)]

        assert await ids("alice", "S1", "rag") == ["s1rag"]
        assert await ids("alice", "S1") == ["s1other", "s1rag"]
        assert await ids("alice", agent="rag") == ["s2rag", "s1rag"]
        assert await ids("alice") == ["s1other", "s2rag", "s1rag"]
        assert [e.id for e in await store.recent("alice", limit=1)] == ["s1other"]
        health = await store.health()
        assert (health.ok, health.fragment_count, health.episode_count) == (True, 5, 5)
        assert (tmp_path / ".memory").is_file()
    finally:
        await store.close()


# --- consolidate(rule): the classification table of spec 001, row by row -------------------


STREAM = ConsolidationRule(id="nightly", cadence={"every": 1}, then_emits=["facts"])


async def test_classification_table_row_by_row(store: SQLiteMemoryStore) -> None:
    await put(store, episode("a1", subject="alice", predicate="likes", object="tea"))
    (add,) = await store.consolidate(STREAM)
    assert isinstance(add, AddDelta) and add.rule_id == "nightly"
    tea = add.new_fact_id

    await put(store, episode("n1", at=T0 + timedelta(hours=1), intent="noop"))
    (noop,) = await store.consolidate(STREAM)
    assert isinstance(noop, NoopDelta) and noop.source_episode_ids == ["n1"]

    update_meta = {"subject": "alice", "predicate": "likes", "object": "coffee"}
    at = T0 + timedelta(hours=2)
    await put(store, episode("u1", at=at, intent="update", replaces=[tea], **update_meta))
    (update,) = await store.consolidate(STREAM)
    assert isinstance(update, UpdateDelta) and update.replaces == [tea]
    coffee = update.new_fact_id

    await put(store, episode("d1", at=T0 + timedelta(hours=3), intent="delete", replaces=[coffee]))
    (delete,) = await store.consolidate(STREAM)
    assert isinstance(delete, DeleteDelta) and delete.replaces == [coffee]

    later = T0 + timedelta(hours=4)
    await put(
        store,
        episode("r1", at=later, subject="bob", predicate="lives_in", object="oslo"),
        episode(
            "r2",
            at=later + timedelta(minutes=1),
            subject="bob",
            predicate="lives_in",
            object="rome",
        ),
    )
    first, repeat = await store.consolidate(STREAM)
    assert isinstance(first, AddDelta) and isinstance(repeat, UpdateDelta)
    assert repeat.replaces == [first.new_fact_id]


async def test_an_episode_without_a_full_triple_adds_a_note(store: SQLiteMemoryStore) -> None:
    await put(
        store,
        episode("c1", "call the bank"),
        episode("c2", "half", at=T0 + timedelta(minutes=1), subject="alice", predicate="likes"),
    )
    emitted = await store.consolidate(STREAM)
    deltas = [d for d in emitted if isinstance(d, AddDelta)]
    assert len(deltas) == len(emitted)
    assert [(d.kind, d.fact_payload, d.source_episode_ids) for d in deltas] == [
        (
            "add",
            {"subject": "user", "predicate": "noted", "object": "call the bank"},
            ["c1"],
        ),
        ("add", {"subject": "user", "predicate": "noted", "object": "half"}, ["c2"]),
    ]
    async with SQLiteFactStore(store.path) as facts:
        assert {f.object for f in await facts.query(FactPattern(user="alice"))} == {
            "call the bank",
            "half",
        }


# --- cadence --------------------------------------------------------------------------------


async def test_every_n_waits_for_n_pending_episodes(store: SQLiteMemoryStore) -> None:
    rule = ConsolidationRule(id="batch3", cadence={"every": 3})
    await put(store, episode("e1", "one"), episode("e2", "two", at=T0 + timedelta(minutes=1)))
    assert await store.consolidate(rule, due_only=True) == []
    await put(store, episode("e3", "three", at=T0 + timedelta(minutes=2)))
    deltas = await store.consolidate(rule, due_only=True)
    assert [d.source_episode_ids for d in deltas] == [["e1"], ["e2"], ["e3"]]
    assert await store.consolidate(rule, due_only=True) == []


async def test_a_direct_call_runs_whatever_the_cadence(store: SQLiteMemoryStore) -> None:
    rule = ConsolidationRule(id="batch3", cadence={"every": 3})
    await put(store, episode("e1", "one"), episode("e2", "two", at=T0 + timedelta(minutes=1)))
    assert [d.source_episode_ids for d in await store.consolidate(rule)] == [["e1"], ["e2"]]
    assert await store.consolidate(rule) == []  # nothing new since


async def test_cron_runs_once_then_waits_for_a_fire_time(store: SQLiteMemoryStore) -> None:
    rule = ConsolidationRule(id="sleep", cadence={"cron": "0 3 * * *"})
    await put(store, episode("e1", "one"))
    assert len(await store.consolidate(rule, due_only=True)) == 1
    await put(store, episode("e2", "two", at=T0 + timedelta(minutes=1)))
    # next 03:00 lies ahead of the last run: not due, episode stays pending
    assert await store.consolidate(rule, due_only=True) == []
    with sqlite3.connect(store.path) as db:
        (runs,) = db.execute(
            "SELECT count(*) FROM rule_runs WHERE pack = ? AND rule_id = 'sleep'", (RUNS_PACK,)
        ).fetchone()
        two_days_us = 2 * 86_400 * 1_000_000
        db.execute("UPDATE rule_runs SET last_run_us = last_run_us - ?", (two_days_us,))
    assert runs == 1
    assert [d.source_episode_ids for d in await store.consolidate(rule, due_only=True)] == [["e2"]]


# --- when_filter's timestamp column -----------------------------------------------------------


async def test_when_filter_reads_the_timestamp_column(store: SQLiteMemoryStore) -> None:
    east = datetime(2026, 1, 2, 1, 0, tzinfo=timezone(timedelta(hours=2)))  # 2026-01-01T23:00Z
    await put(
        store,
        episode("old", "old", at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC)),
        episode("east", "east", at=east),
        episode("new", "new", at=datetime(2026, 1, 2, 0, 0, tzinfo=UTC)),
    )
    rule = ConsolidationRule(
        id="recent", cadence={"every": 1}, when_filter="timestamp >= '2026-01-02'"
    )
    assert [d.source_episode_ids for d in await store.consolidate(rule)] == [["new"]]
    assert utc_text(east) == "2026-01-01T23:00:00.000000Z"


# --- migrations ---------------------------------------------------------------------------


def plan(op: str = "add_column", table: str = "facts", name: str = "m1") -> MigrationPlan:
    return MigrationPlan(name=name, operations=[MigrationOp(op=op, table=table, column="mood")])


async def test_migration_errors_name_store_and_operation(store: SQLiteMemoryStore) -> None:
    with pytest.raises(MigrationNotSupported) as info:
        await store.migrate(plan("drop_column", "episodes"))
    assert str(info.value) == (
        "memory store: migration 'm1': operations[0] (drop_column): "
        "operation 'drop_column' is not supported"
    )
    context = info.value.context
    assert {k: context[k] for k in ("store", "operation", "position", "index", "reason")} == {
        "store": "memory",
        "operation": "drop_column",
        "position": "operations[0]",
        "index": 0,
        "reason": "v1-add-column-only",
    }


async def test_fact_store_migrate_follows_the_memory_store_rules(tmp_path: Path) -> None:
    async with SQLiteFactStore(tmp_path / "f.db") as facts:
        await facts.migrate(plan())
        await facts.migrate(plan())  # the same plan again: nothing to do
        with sqlite3.connect(facts.path) as db:
            assert "mood" in {r[1] for r in db.execute("PRAGMA table_info(facts)")}
        with pytest.raises(MigrationNotSupported, match="different operations") as info:
            await facts.migrate(plan(table="lineage"))
        assert info.value.context["store"] == "fact"
        with pytest.raises(MigrationNotSupported, match="not one of this store's tables"):
            await facts.migrate(plan(table="episodes", name="m2"))
        with pytest.raises(MigrationNotSupported, match="already exists") as info:
            await facts.migrate(plan(name="m3"))
        assert info.value.context["position"] == "operations[0]"
        assert info.value.context["reason"] == "column-exists"


# --- health on network filesystems -----------------------------------------------------------


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:50 / /mnt/share rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2
41 40 8:2 / /mnt/share/local rw - ext4 /dev/sdb1 rw
42 22 0:51 / /mnt/my\\040box rw - fuse.sshfs me@host: rw
"""
PROC_MOUNTS = "/dev/sda1 / ext4 rw 0 0\n//srv/x /data cifs rw 0 0\n"


@pytest.mark.parametrize(
    ("path", "table", "kind"),
    [
        ("/mnt/share/db/memory.db", MOUNTINFO, "nfs4"),
        ("/mnt/share/local/memory.db", MOUNTINFO, "ext4"),
        ("/mnt/sharepoint/memory.db", MOUNTINFO, "ext4"),
        ("/mnt/my box/memory.db", MOUNTINFO, "fuse.sshfs"),
        ("/data/memory.db", PROC_MOUNTS, "cifs"),
        ("/database", PROC_MOUNTS, "ext4"),
    ],
)
def test_filesystem_type_takes_the_longest_mount_point(path: str, table: str, kind: str) -> None:
    assert mounts.filesystem_type(Path(path), table) == kind


async def test_health_warns_when_the_database_is_on_a_network_filesystem(
    store: SQLiteMemoryStore, tmp_path: Path, monkeypatch: Any
) -> None:
    await put(store, episode("e1"))
    table = tmp_path / "mountinfo"
    monkeypatch.setattr(mounts, "MOUNT_TABLES", (table,))
    table.write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert (await store.health()).warnings == ()
    where = store.path.resolve().parent
    table.write_text(
        f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:50 / {where} rw - nfs s:/x rw\n"
    )
    health = await store.health()
    assert health.fragment_count == 1
    (warning,) = health.warnings
    assert "network filesystem (nfs)" in warning and "WAL" in warning


# --- knowledge-graph promotion -----------------------------------------------------------------


def triple(obj: str, at: datetime, source: str) -> KGTriple:
    return KGTriple(
        subject="alice",
        predicate="works_at",
        object=obj,
        valid_at=at,
        source_id=source,
        user="alice",
        agent="rag",
    )


async def test_newer_triples_invalidate_older_facts_never_the_reverse(tmp_path: Path) -> None:
    async with SQLiteFactStore(tmp_path / "f.db") as facts:
        promote = PromoteTriplesToFacts(facts)
        first = await promote([triple("acme", T0, "edge1")])
        (acme,) = await facts.query(FactPattern(user="alice"))
        assert (acme.object, acme.valid_from, acme.rule_id) == ("acme", T0, "kg_promotion")
        assert (await facts.lineage(acme.id)).source_episode_ids == ("edge1",)
        assert first.result is not None and first.result.added == 1

        later = T0 + timedelta(days=30)
        second = await promote(
            [triple("globex", later, "edge2"), triple("initech", T0 - timedelta(days=1), "edge0")]
        )
        assert [t.source_id for t, _ in second.skipped] == ["edge0"]
        (current,) = await facts.query(FactPattern(user="alice"))
        assert (current.object, current.valid_from) == ("globex", later)
        closed = await facts.get(acme.id)
        assert (closed.valid_until, closed.superseded_by) == (later, current.id)

        again = await promote([triple("globex", later, "edge2")])
        assert again.deltas == [] and again.result is None


# --- YAML wiring -----------------------------------------------------------------------------


def test_yaml_wiring_opens_the_named_stores(tmp_path: Path) -> None:
    config = tmp_path / "stargraph.yaml"
    config.write_text('stores:\n  memory: "sqlite:./.memory"\n  facts: facts.db\n')
    stores = load_stores(config)
    assert stores.memory is not None and stores.memory.path == tmp_path / ".memory"
    assert stores.facts is not None and stores.facts.path == tmp_path / "facts.db"
    absolute = load_stores({"stores": {"memory": f"sqlite://{tmp_path}/abs.db"}})
    assert absolute.memory is not None and absolute.memory.path == tmp_path / "abs.db"
    assert absolute.facts is None


@pytest.mark.parametrize(
    ("mapping", "fragment"),
    [
        ({"memory": "postgresql://db/x"}, "stores.memory: 'postgresql://db/x': unsupported scheme"),
        ({"memory": "sqlite://host/x"}, "a host is not supported"),
        ({"memory": ""}, "stores.memory: '': expected"),
        ({"cache": "sqlite:./x"}, "stores.cache: 'sqlite:./x': unknown store"),
    ],
)
def test_yaml_wiring_refuses_what_it_cannot_open(mapping: dict[str, Any], fragment: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        load_stores({"stores": mapping})
    assert fragment in str(info.value)
    key = next(iter(mapping))
    assert (info.value.context["key"], info.value.context["value"]) == (key, mapping[key])


def test_the_wheel_carries_the_default_pack_where_consolidate_rule_looks() -> None:
    import tomllib

    from stargraph_mem.engine import contract as legacy

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    included = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    packaged = legacy._CANDIDATES[0].relative_to(Path(legacy.__file__).resolve().parents[1])
    assert included["rules/default.yaml"] == f"stargraph_mem/{packaged.as_posix()}"
