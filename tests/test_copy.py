"""``copy``: a whole memory into an empty database, all or nothing, checked table by table."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from e2e_helpers import DEDUP, DEFAULT, NOW, ROOT, T0, episode
from pydantic import JsonValue
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import StoreError
from stargraph_mem.model.deltas import DeleteDelta
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.stores import copy as copy_module
from stargraph_mem.stores.copy import COPIED_TABLES, Table, copy_database
from stargraph_mem.stores.database import open_database

PACKS = [DEFAULT, DEDUP]


def nights() -> list[list[Episode]]:
    """Three nights of episodes over four partitions: adds, repeats, updates and deletes."""
    out: list[list[Episode]] = []
    for night in range(3):
        eps: list[Episode] = []
        for n in range(12):
            user = f"u{n % 4}"
            obj = ["tea", "coffee", "water"][(n + night) % 3]
            meta: dict[str, JsonValue] = {"subject": user, "predicate": "likes", "object": obj}
            if night == 2 and n == 5:
                meta["intent"] = "noop"
            eps.append(
                episode(
                    f"e{night}-{n}",
                    at=T0 + timedelta(days=night, minutes=n),
                    user=user,
                    session=f"s{night}",
                    meta=meta,
                )
            )
        out.append(eps)
    return out


async def build(path: Path) -> None:
    """A memory after three nights of passes, with history, an accessed fact, a pinned one
    and an archived one restored."""
    for night, eps in enumerate(nights()):
        async with Consolidator.open(path, PACKS) as mem:
            await mem.memory.put_many(eps)
            await mem.consolidate(now=NOW + timedelta(days=night))
            hits = await mem.search("tea", limit=2)
            assert hits
    async with Consolidator.open(path, PACKS) as mem:
        first, second = (await mem.facts())[:2]
        assert await mem.pin(first.id, reason="keep")
        sources = (await mem.fact_store.lineage(second.id)).source_episode_ids
        archive = DeleteDelta(
            user=second.user,
            agent=second.agent,
            replaces=[second.id],
            status="archived",
            source_episode_ids=list(sources),
            promotion_ts=NOW + timedelta(days=5),
            rule_id="archive",
            confidence=1.0,
        )
        await mem.fact_store.apply_delta(archive)
        await mem.restore(second.id, reason="back")


async def snapshot(location: str | Path) -> dict[str, object]:
    """Everything a user can read of a memory: facts with history, each explanation,
    audit, watermarks, rejections, episodes and search results."""
    async with open_database(location) as db:
        facts = await db.facts.query(FactPattern(include_history=True))
        partitions = await db.memory.partitions()
        explained = [(await db.facts.explain(f.id)).model_dump_json() for f in facts]
        episodes = [[repr(r) for r in await db.memory.since(p, 0)] for p in partitions]
        current = [f for f in facts if f.valid_until is None]
        return {
            "facts": sorted(f.model_dump_json() for f in facts),
            "explain": sorted(explained),
            "audit": [a.model_dump_json() for a in await db.facts.audit_rows()],
            "rejections": [r.model_dump_json() for r in await db.facts.rejections()],
            "episodes": episodes,
            "search": [
                (h.fact.id, round(h.score, 9))
                for h in await db.facts.search("tea coffee", limit=50, touch=False)
            ],
            "access": [(await db.facts.access(f.id)).model_dump_json() for f in current],
            "engine": [await db.facts.current_facts_of(partitions)],
        }


async def test_a_copy_reads_back_exactly_as_the_source(tmp_path: Path) -> None:
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    await build(source)
    report = await copy_database(source, f"sqlite:///{target}")
    assert report.rows["facts"] > 4 and report.rows["episodes"] == 36
    assert set(report.rows) == {table.name for table in COPIED_TABLES}
    assert await snapshot(target) == await snapshot(source)


async def test_consolidating_a_copy_goes_on_where_the_source_stopped(tmp_path: Path) -> None:
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    await build(source)
    await copy_database(source, target)
    async with Consolidator.open(target, PACKS) as mem:
        again = await mem.consolidate(now=NOW + timedelta(days=9))
        assert again.counts == {"add": 0, "update": 0, "delete": 0, "noop": 0}
        await mem.memory.put_many([episode("late", 3, user="u1", subject="u1", object="milk")])
        later = await mem.consolidate(now=NOW + timedelta(days=9))
        assert later.counts["update"] + later.counts["add"] >= 1


async def test_a_target_with_a_memory_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    await build(source)
    await build(target)
    before = await snapshot(target)
    with pytest.raises(StoreError, match="already holds 36 row"):
        await copy_database(source, target)
    assert await snapshot(target) == before


async def test_a_missing_source_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        await copy_database(tmp_path / "none.db", tmp_path / "b.db")
    assert list(tmp_path.iterdir()) == []


async def test_the_same_database_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    await build(source)
    with pytest.raises(StoreError, match="same database"):
        await copy_database(source, f"sqlite:///{source}")


async def test_a_copy_that_fails_half_way_leaves_no_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table that cannot be read after others were written: the target is removed."""
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    await build(source)
    broken = (*COPIED_TABLES, Table("no_such_table", ("x",), ("x",)))
    monkeypatch.setattr(copy_module, "COPIED_TABLES", broken)
    with pytest.raises(Exception, match="no_such_table"):
        await copy_database(source, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "a.db-shm", "a.db-wal"] or (
        sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]
    )


async def test_a_difference_after_the_copy_rolls_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest check runs inside the target's transaction: a mismatch writes nothing."""
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    await build(source)
    await build(target)  # then emptied through the public path: a fresh, bootstrapped file
    target.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    async with open_database(target):
        pass
    real: Callable[..., object] = copy_module._digest
    calls = {"n": 0}

    async def lying(rows: object, on_rows: object = None) -> tuple[int, str]:
        calls["n"] += 1
        count, digest = await real(rows)  # type: ignore[misc]
        return (count, digest if calls["n"] % 2 else "0" * 64)

    monkeypatch.setattr(copy_module, "_digest", lying)
    with pytest.raises(StoreError, match="differs after the copy"):
        await copy_database(source, target)
    async with open_database(target) as db:
        assert await db.memory.partitions() == []
        assert await db.facts.query(FactPattern(include_history=True)) == []


def test_cli_copy_prints_the_rows_and_refuses_a_second_time(tmp_path: Path) -> None:
    import asyncio

    source, target = tmp_path / "a.db", tmp_path / "b.db"
    asyncio.run(build(source))
    runner = CliRunner()
    first = runner.invoke(app, ["copy", "--from", str(source), "--to", str(target)])
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines()[0] == f"copied {source} → {target}"
    assert "episodes           36" in first.stdout
    again = runner.invoke(app, ["copy", "--from", str(source), "--to", str(target)])
    assert again.exit_code == 1
    assert again.stderr.startswith(f"error: copy: {target} already holds 36 row(s) in episodes")
    bad = runner.invoke(app, ["copy", "--from", str(source), "--to", "mysql://x/y"])
    assert bad.exit_code == 1
    assert "unsupported scheme 'mysql'" in bad.stderr


def test_the_readme_database_commands_on_postgresql_and_back(tmp_path: Path) -> None:
    """The README's commands on a server, then ``copy`` to a SQLite file and to another
    schema: ``facts`` prints the same table from all three."""
    import asyncio

    from backends import PG_URL, pg_schema

    runner = CliRunner()
    readme = (ROOT / "docs" / "integrations.md").read_text("utf-8")
    section = readme.split("\n## Databases: SQLite or PostgreSQL\n", 1)[1]
    commands = section.split("```\n", 2)[1].splitlines()
    assert commands[0] == "pip install -e '.[postgres]'"

    async def scenario() -> None:
        async with pg_schema() as first, pg_schema() as second:
            env = {"STARGRAPH_MEM_DB": f"{PG_URL}?schema={first}"}
            for line in commands[2:]:
                args = shlex.split(line)[1:]
                args = [str(ROOT / a) if a.startswith(("examples/", "rules/")) else a for a in args]
                result = await asyncio.to_thread(runner.invoke, app, args, env=env)
                assert result.exit_code == 0, (line, result.output)
            assert "alice    likes      0.8" in result.stdout

            async def facts(where: str) -> str:
                done = await asyncio.to_thread(runner.invoke, app, ["facts", "--db", where])
                assert done.exit_code == 0, done.output
                return done.stdout

            listed = await facts(env["STARGRAPH_MEM_DB"])
            assert "alice    likes      0.8         tea" in listed
            local, other = str(tmp_path / "local.db"), f"{PG_URL}?schema={second}"
            for source, target in ((env["STARGRAPH_MEM_DB"], local), (local, other)):
                args = ["copy", "--from", source, "--to", target]
                copied = await asyncio.to_thread(runner.invoke, app, args)
                assert copied.exit_code == 0, copied.output
            assert await facts(local) == listed
            assert await facts(other) == listed

    asyncio.run(scenario())


def test_replay_reads_a_postgresql_memory_through_a_copy(tmp_path: Path) -> None:
    """``replay`` of a server's memory says what it says of the same memory in a file."""
    import asyncio

    from backends import PG_URL, pg_schema

    from stargraph_mem.authoring.replay import replay
    from stargraph_mem.compiler import compile_file

    async def scenario() -> None:
        source = tmp_path / "a.db"
        await build(source)
        async with pg_schema() as schema:
            url = f"{PG_URL}?schema={schema}"
            await copy_database(source, url)
            packs = [compile_file(DEDUP)]
            later = NOW + timedelta(days=5)
            on_file = await replay(source, packs, now=later)
            on_server = await replay(url, packs, now=later)
            assert on_server.db == url and on_file.db == source
            assert (on_server.changes, on_server.unchanged) == (on_file.changes, on_file.unchanged)
            assert on_server.episodes == on_file.episodes == 36

    asyncio.run(scenario())
