"""A database restart or failover mid-run: long ``consolidate`` runs and ``run`` workers
reconnect, redo the interrupted work from a fresh read and finish with the tables an
uninterrupted run makes (no delta applied twice); a database that stays away ends the
run with one ``error:`` line. The outages are simulated on the shared test server: the
run's sessions are terminated (``pg_terminate_backend``), or a local proxy between the
run and the server cuts every connection and refuses new ones."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from backends import PG_URL, pg_schema
from e2e_helpers import DEDUP, NOW, episode, spo
from outage_helpers import Killer, Proxy, dump, through

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.runner import WorkerPass, WorkerSetup
from stargraph_mem.engine.passes.worker import WorkerProcess
from stargraph_mem.engine.reconnect import Outage, Reconnect, Survivor
from stargraph_mem.errors import DatabaseUnavailableError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.salience import RuleBasedScorer
from stargraph_mem.stores.postgres import PostgresDatabase
from stargraph_mem.stores.postgres.failures import connection_lost
from stargraph_mem.stores.scope import Partition

BIG, BIG_EACH = 3, 400
"""Partitions with a backlog of several passes (run alone, pass after pass)."""
SMALL, SMALL_EACH = 30, 4
"""Partitions small enough to be consolidated many per batch."""
MAX_EPISODES = 100
MANY, MANY_EACH = 1100, 5
"""Partitions (and episodes each) of the ``consolidate`` command's run: several batches."""
QUICK = Reconnect(seconds=60, first_delay=0.05, max_delay=0.5)


async def consolidated(
    url: str, outages: list[Outage], worker: str, on_progress: object = None
) -> None:
    """A dedup consolidation of ``url`` at NOW that reconnects quickly, its outages noted."""
    async with Consolidator.open(
        url,
        [DEDUP],
        max_episodes=MAX_EPISODES,
        worker=worker,  # type: ignore[arg-type]
        reconnect=QUICK,
        on_outage=outages.append,
    ) as mem:
        await mem.consolidate(now=NOW, progress=on_progress)  # type: ignore[arg-type]


WARNING = re.compile(r"^warning: database connection lost \(.+\); reconnected after \d+\.\d s$")
SCHEDULED = DEDUP.read_text("utf-8").replace('cron: "0 3 * * *"', "every: 2")


def episodes(prefix: str = "") -> list[Episode]:
    """Observations that add, update and repeat facts, in big and small partitions."""
    out = [
        episode(f"{prefix}b{u}-{n}", n, user=f"big{u}", **spo(f"s{n % 11}", "p", f"o{n % 7}"))
        for u in range(BIG)
        for n in range(BIG_EACH)
    ]
    out += [
        episode(f"{prefix}s{u}-{n}", n, user=f"small{u}", **spo("s", f"p{n % 2}", f"o{n}"))
        for u in range(SMALL)
        for n in range(SMALL_EACH)
    ]
    return out


def url_of(schema: str, app: str = "") -> str:
    """The test server's URL for ``schema``, its sessions named ``app``."""
    return f"{PG_URL}?schema={schema}" + (f"&application_name={app}" if app else "")


async def filled(url: str, pack: Path, items: list[Episode]) -> None:
    async with Consolidator.open(url, [pack]) as mem:
        await mem.memory.put_many(items)


def audit_ids(schema: str) -> Counter[str]:
    with psycopg.connect(PG_URL, autocommit=True) as db:
        rows = db.execute(f'SELECT delta_id FROM "{schema}".audit').fetchall()
    return Counter(row[0] for row in rows)


def test_a_long_consolidate_survives_its_sessions_being_killed(tmp_path: Path) -> None:
    app = f"sgm-{uuid.uuid4().hex[:12]}"
    killer = Killer(app)
    outages: list[Outage] = []
    items = episodes()

    async def consolidate(url: str, on_progress: object = None) -> int:
        async with Consolidator.open(
            url,
            [DEDUP],
            max_episodes=MAX_EPISODES,
            worker="never",
            reconnect=QUICK,
            on_outage=outages.append,
        ) as mem:
            report = await mem.consolidate(now=NOW, progress=on_progress)  # type: ignore[arg-type]
            return sum(1 for p in report.passes if p.applied)

    storms: list[int] = []

    def progress(done: int, total: int) -> None:
        # mid-run, twice: sessions end for a while (reconnects fail too), then once more
        if done >= 400 and not storms:
            storms.append(done)
            killer.kill()
            killer.storm(1.0)
        elif done >= 1000 and len(storms) == 1:
            killer.join()
            storms.append(done)
            killer.kill()

    async def scenario() -> None:
        async with pg_schema() as hit, pg_schema() as calm:
            await filled(url_of(hit), DEDUP, items)
            await filled(url_of(calm), DEDUP, items)
            applied = await consolidate(url_of(hit, app), progress)
            killer.join()
            await consolidate(url_of(calm))
            assert len(storms) == 2 and killer.killed > 0
            assert applied > 0
            assert dump(hit) == dump(calm)
            ids = audit_ids(hit)
            assert ids and max(ids.values()) == 1, "a delta was applied twice"
            assert sum(ids.values()) == len(items)

    outages.clear()
    asyncio.run(scenario())
    assert outages, "no outage was reported"
    for outage in outages:
        assert WARNING.match(f"warning: {outage.describe()}"), outage
        assert outage.attempts >= 1


def test_a_commit_whose_answer_was_lost_is_not_applied_twice() -> None:
    """Mid-run, a connection is cut right after the server received its ``COMMIT``: the
    run cannot know whether it was applied, redoes the work from a fresh read, and every
    delta is applied once."""
    proxy = Proxy()
    proxy.up()
    outages: list[Outage] = []
    items = episodes()

    def progress(done: int, total: int) -> None:
        if done >= 400 and not proxy.commits_cut:
            proxy.trap.set()

    async def consolidate(url: str, on_progress: object = None) -> None:
        await consolidated(url, outages, "never", on_progress)

    async def scenario() -> None:
        async with pg_schema() as hit, pg_schema() as calm:
            await filled(url_of(hit), DEDUP, items)
            await filled(url_of(calm), DEDUP, items)
            await consolidate(through(url_of(hit), proxy.port), progress)
            await consolidate(url_of(calm))
            assert proxy.commits_cut == 1
            assert dump(hit) == dump(calm)
            ids = audit_ids(hit)
            assert max(ids.values()) == 1 and sum(ids.values()) == len(items)

    try:
        asyncio.run(scenario())
    finally:
        proxy.down()
    assert len(outages) == 1


def test_a_consolidate_with_a_worker_process_survives_its_sessions_being_killed(
    tmp_path: Path,
) -> None:
    """The worker process's sessions are ended too: its error comes back as a lost
    connection, and the run goes on."""
    app = f"sgm-{uuid.uuid4().hex[:12]}"
    killer = Killer(app)
    outages: list[Outage] = []
    items = [
        episode(f"w{n}", n, user="one", **spo(f"s{n % 13}", "p", f"o{n % 5}")) for n in range(900)
    ]
    killed: list[int] = []

    def progress(done: int, total: int) -> None:
        if done >= 300 and not killed:
            killed.append(killer.kill())

    async def consolidate(url: str, on_progress: object = None) -> None:
        await consolidated(url, outages, "always", on_progress)

    async def scenario() -> None:
        async with pg_schema() as hit, pg_schema() as calm:
            await filled(url_of(hit), DEDUP, items)
            await filled(url_of(calm), DEDUP, items)
            await consolidate(url_of(hit, app), progress)
            await consolidate(url_of(calm))
            assert killed and killed[0] >= 2, "the parent's and the worker's sessions"
            assert dump(hit) == dump(calm)
            ids = audit_ids(hit)
            assert max(ids.values()) == 1 and sum(ids.values()) == len(items)

    asyncio.run(scenario())
    assert outages


def test_a_worker_process_that_loses_the_database_says_so() -> None:
    """The worker process's own lost connection comes back to the run as
    :class:`DatabaseUnavailableError` (not a driver error), which the run survives."""
    proxy = Proxy()
    proxy.up()
    port = proxy.port
    proxy.down()  # nothing listens there now: connections are refused
    worker = WorkerProcess()
    try:
        worker.request(
            WorkerSetup(
                location=through(url_of("t_nowhere"), port),
                compiled=replace(compile_file(DEDUP), _built=[]),  # as a run sends it
                max_episodes=MAX_EPISODES,
                keep_deltas=False,
                scorer=RuleBasedScorer(),
            )
        )
        job = WorkerPass(Partition("alice", "rag"), NOW, ["new_fact_add"], None, None)
        with pytest.raises(DatabaseUnavailableError, match="cannot connect") as caught:
            worker.request(job)
        assert caught.value.context["reason"].startswith("connection failed")
    finally:
        worker.close()


def start_worker(pack: Path, url: str, reconnect_seconds: float) -> subprocess.Popen[str]:
    """``stargraph-mem run`` (ticking every 0.05 s), run by this interpreter."""
    options = ["--pack", str(pack), "--db", url, "--interval", "0.05"]
    options += ["--reconnect-seconds", f"{reconnect_seconds:g}"]
    return subprocess.Popen(
        [sys.executable, "-m", "stargraph_mem.cli", "run", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=pack.parent,
    )


def watermarked(schema: str, episodes_in: int) -> bool:
    """Whether every episode of ``schema`` is consolidated (per partition: the rule's
    watermark reached its last episode)."""
    with psycopg.connect(PG_URL, autocommit=True) as db:
        behind = db.execute(
            f'SELECT count(*) FROM (SELECT partition_key, max(seq) AS top FROM "{schema}".episodes '
            f'GROUP BY partition_key) e LEFT JOIN "{schema}".watermarks w '
            "ON w.partition_key = e.partition_key WHERE w.last_seq IS NULL OR w.last_seq < e.top"
        ).fetchone()
        count = db.execute(f'SELECT count(*) FROM "{schema}".episodes').fetchone()
    assert behind is not None and count is not None
    return int(behind[0]) == 0 and int(count[0]) == episodes_in


def wait_until(check: object, proc: subprocess.Popen[str], what: str) -> None:
    """Poll ``check()`` while ``proc`` runs (the test's own timeout bounds the wait)."""
    while not check():  # type: ignore[operator]
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the worker exited before {what}: {proc.returncode}\n{out}\n{err}")
        time.sleep(0.05)


def test_a_run_worker_survives_a_server_restart(tmp_path: Path) -> None:
    """``stargraph-mem run`` through a proxy: mid-run its sessions are terminated and the
    proxy refuses connections for a while (a restart); episodes stored meanwhile are
    consolidated once it is back, and the tables equal an uninterrupted worker's."""
    pack = tmp_path / "scheduled.yaml"
    pack.write_text(SCHEDULED, "utf-8")
    app = f"sgm-{uuid.uuid4().hex[:12]}"
    killer = Killer(app)
    proxy = Proxy()
    proxy.up()
    first, later = episodes(), episodes("late-")

    def work(schema: str, app_name: str, port: int | None) -> tuple[str, str]:
        url = url_of(schema, app_name)
        url = through(url, port) if port is not None else url
        proc = start_worker(pack, url, 60)
        try:
            assert proc.stdout is not None
            assert "running" in proc.stdout.readline()
            wait_until(lambda: _some(schema), proc, "a pass")
            if port is not None:  # mid-run: the sessions end, then the server is away
                killer.kill()
                proxy.down()
                time.sleep(1.5)
                killer.kill()
                proxy.up()
            asyncio.run(filled(url_of(schema), pack, later))
            wait_until(lambda: watermarked(schema, len(first) + len(later)), proc, "catching up")
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        assert out.splitlines()[-1] == "stopped"
        return out, err

    async def scenario() -> None:
        async with pg_schema() as hit, pg_schema() as calm:
            await filled(url_of(hit), pack, first)
            await filled(url_of(calm), pack, first)
            _, err = await asyncio.to_thread(work, hit, app, proxy.port)
            lines = err.splitlines()
            assert lines and all(WARNING.match(line) for line in lines), err
            assert "Traceback" not in err
            _, calm_err = await asyncio.to_thread(work, calm, "", None)
            assert calm_err == ""
            assert _facts_and_watermarks(hit) == _facts_and_watermarks(calm)
            ids = audit_ids(hit)
            assert max(ids.values()) == 1 and sum(ids.values()) == len(first) + len(later)

    try:
        asyncio.run(scenario())
    finally:
        proxy.down()


def test_the_consolidate_command_survives_a_server_restart(tmp_path: Path) -> None:
    """``stargraph-mem consolidate`` through a proxy over many partitions: once passes are
    applied, its sessions are terminated and the server is away for a while; it finishes
    (exit 0), says so on stderr, and the tables equal an uninterrupted run's."""
    app = f"sgm-{uuid.uuid4().hex[:12]}"
    killer = Killer(app)
    proxy = Proxy()
    proxy.up()
    items = [
        episode(f"m{u}-{n}", n, user=f"u{u}", **spo("s", f"p{n % 3}", f"o{n % 5}"))
        for u in range(MANY)
        for n in range(MANY_EACH)
    ]

    def consolidate(schema: str, port: int | None) -> tuple[str, str]:
        url = url_of(schema, app if port is not None else "")
        options = ["--pack", str(DEDUP), "--db", through(url, port) if port else url]
        options += ["--now", NOW.isoformat(), "--reconnect-seconds", "60"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "stargraph_mem.cli", "consolidate", *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        try:
            if port is not None:
                wait_until(lambda: _some(schema), proc, "a pass")
                killer.kill()
                proxy.down()
                time.sleep(1.0)
                killer.kill()
                proxy.up()
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        return out, err

    async def scenario() -> None:
        async with pg_schema() as hit, pg_schema() as calm:
            await filled(url_of(hit), DEDUP, items)
            await filled(url_of(calm), DEDUP, items)
            _, err = await asyncio.to_thread(consolidate, hit, proxy.port)
            lines = err.splitlines()
            assert lines and all(WARNING.match(line) for line in lines), err
            _, calm_err = await asyncio.to_thread(consolidate, calm, None)
            assert calm_err == ""
            assert dump(hit) == dump(calm)
            ids = audit_ids(hit)
            assert max(ids.values()) == 1 and sum(ids.values()) == len(items)

    try:
        asyncio.run(scenario())
    finally:
        proxy.down()


def _some(schema: str) -> bool:
    """Whether a pass was applied in ``schema`` (a watermark exists)."""
    with psycopg.connect(PG_URL, autocommit=True) as db:
        row = db.execute(f'SELECT count(*) FROM "{schema}".watermarks').fetchone()
    return row is not None and int(row[0]) > 0


def _facts_and_watermarks(schema: str) -> dict[str, list[str]]:
    """The statements of the facts and the watermarks: what scheduled passes decide (their
    pass times are the worker's clock, different in two runs)."""
    with psycopg.connect(PG_URL, autocommit=True) as db:
        facts = db.execute(
            f'SELECT "user", subject, predicate, object, confidence, closed_by IS NULL '
            f'FROM "{schema}".facts'
        ).fetchall()
        marks = db.execute(
            f'SELECT pack, rule_id, partition_key, last_seq - (SELECT min(seq) FROM "{schema}".'
            f'episodes) FROM "{schema}".watermarks'
        ).fetchall()
    return {"facts": sorted(map(str, facts)), "watermarks": sorted(map(str, marks))}


def test_a_database_that_stays_away_ends_a_run_worker_with_one_error(tmp_path: Path) -> None:
    pack = tmp_path / "scheduled.yaml"
    pack.write_text(SCHEDULED, "utf-8")
    proxy = Proxy()
    proxy.up()

    def work(schema: str) -> tuple[int, str, str]:
        url = through(url_of(schema), proxy.port)
        proc = start_worker(pack, url, 1)
        assert proc.stdout is not None
        assert "running" in proc.stdout.readline()
        wait_until(lambda: _some(schema), proc, "a pass")
        proxy.down()  # and never back
        out, err = proc.communicate(timeout=120)
        return proc.returncode, out, err

    async def scenario() -> None:
        async with pg_schema() as schema:
            await filled(url_of(schema), pack, episodes())
            code, _, err = await asyncio.to_thread(work, schema)
            assert code == 1, err
            assert err.count("\n") == 1, err
            assert re.fullmatch(
                r"error: the database at .* did not come back within 1 s \(.+\)\n", err
            ), err

    try:
        asyncio.run(scenario())
    finally:
        proxy.down()


def test_a_long_consolidate_gives_up_with_one_error_when_the_database_stays_away() -> None:
    proxy = Proxy()
    proxy.up()
    cut: list[int] = []

    def progress(done: int, total: int) -> None:
        if done >= 200 and not cut:
            cut.append(done)
            proxy.down()

    async def scenario() -> None:
        async with pg_schema() as schema:
            await filled(url_of(schema), DEDUP, episodes())
            async with Consolidator.open(
                through(url_of(schema), proxy.port),
                [DEDUP],
                max_episodes=MAX_EPISODES,
                worker="never",
                reconnect=Reconnect(seconds=0.5, first_delay=0.05),
            ) as mem:
                gave_up = r"did not come back within 0\.5 s"
                with pytest.raises(DatabaseUnavailableError, match=gave_up):
                    await mem.consolidate(now=NOW, progress=progress)

    try:
        asyncio.run(scenario())
    finally:
        proxy.down()
    assert cut


def test_statement_errors_are_not_taken_for_a_lost_connection() -> None:
    """A statement the server refuses surfaces unchanged, and the pool stays usable."""

    async def scenario() -> None:
        async with pg_schema() as schema, PostgresDatabase(url_of(schema)) as db:
            with pytest.raises(psycopg.errors.UndefinedTable):
                async with db.transaction() as conn:
                    await conn.execute("SELECT * FROM no_such_table")
            with pytest.raises(psycopg.errors.QueryCanceled):
                async with db.connection() as conn:
                    await conn.execute("SET statement_timeout = 1")
                    try:
                        await conn.execute("SELECT pg_sleep(1)")
                    finally:
                        await conn.execute("SET statement_timeout = 0")
            async with db.connection() as conn:
                assert await conn.scalar("SELECT 1") == 1

    asyncio.run(scenario())
    assert connection_lost(psycopg.errors.AdminShutdown(), None)
    assert connection_lost(psycopg.errors.CannotConnectNow(), None)
    assert connection_lost(psycopg.OperationalError("connection refused"), None)
    assert not connection_lost(psycopg.errors.UniqueViolation(), None)
    assert not connection_lost(psycopg.errors.QueryCanceled(), None)
    assert not connection_lost(psycopg.errors.SerializationFailure(), None)


def test_a_lost_connection_is_one_error_when_reconnecting_is_off() -> None:
    """``seconds=0``: the first lost connection ends the run with one clean error."""
    app = f"sgm-{uuid.uuid4().hex[:12]}"
    killer = Killer(app)
    killed: list[int] = []

    def progress(done: int, total: int) -> None:
        if done >= 200 and not killed:
            killed.append(killer.kill())

    async def scenario() -> None:
        async with pg_schema() as schema:
            await filled(url_of(schema), DEDUP, episodes())
            async with Consolidator.open(
                url_of(schema, app),
                [DEDUP],
                max_episodes=MAX_EPISODES,
                worker="never",
                reconnect=Reconnect(seconds=0),
            ) as mem:
                with pytest.raises(DatabaseUnavailableError, match="did not come back within 0 s"):
                    await mem.consolidate(now=NOW, progress=progress)

    asyncio.run(scenario())
    assert killed


class FlakyDatabase:
    """A database whose reconnects fail ``refusals`` times, then work."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.reconnects = 0

    async def reconnect(self) -> None:
        self.reconnects += 1
        if self.refusals:
            self.refusals -= 1
            raise lost("connection refused")


def lost(reason: str) -> DatabaseUnavailableError:
    return DatabaseUnavailableError(f"lost: {reason}", where="db", reason=reason)


TINY = Reconnect(seconds=60, first_delay=0.001, max_delay=0.002)


def test_an_action_is_run_again_once_the_database_is_back() -> None:
    database = FlakyDatabase(refusals=3)
    outages: list[Outage] = []
    forgotten: list[bool] = []
    calls: list[int] = []

    async def action() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise lost("terminating connection due to administrator command")
        return "done"

    survivor = Survivor(
        database,  # type: ignore[arg-type]
        TINY,
        on_outage=outages.append,
        forget=lambda: forgotten.append(True),
    )
    assert asyncio.run(survivor.run(action)) == "done"
    assert len(calls) == 2 and database.reconnects == 4 and forgotten == [True]
    [outage] = outages
    assert (outage.reason, outage.attempts) == (
        "terminating connection due to administrator command",
        4,
    )


def test_a_database_that_keeps_failing_without_progress_ends_in_one_error() -> None:
    """Reconnects work but the action keeps losing the connection: the bound is shared
    by the outages of one stretch without progress."""
    outages: list[Outage] = []

    async def action() -> None:
        raise lost("server closed the connection unexpectedly")

    survivor = Survivor(
        FlakyDatabase(refusals=0),  # type: ignore[arg-type]
        Reconnect(seconds=1.0, first_delay=0.01, max_delay=0.02),
        on_outage=outages.append,
    )
    with pytest.raises(DatabaseUnavailableError, match=r"^the database at db did not come back"):
        asyncio.run(survivor.run(action))
    assert outages, "the outages before the bound were survived and reported"


def test_progress_starts_the_bound_again() -> None:
    """An action that applies passes between outages is never cut off by the bound."""
    applied = [0]

    async def action() -> str:
        applied[0] += 1
        if applied[0] < 40:
            raise lost("server closed the connection unexpectedly")
        return "caught up"

    async def slow_reconnect() -> None:
        await asyncio.sleep(0.03)  # 40 outages last longer than the bound

    database = FlakyDatabase(refusals=0)
    database.reconnect = slow_reconnect  # type: ignore[method-assign]
    survivor = Survivor(
        database,  # type: ignore[arg-type]
        Reconnect(seconds=0.5, first_delay=0.001, max_delay=0.001),
        on_outage=lambda _: None,
    )
    assert asyncio.run(survivor.run(action, lambda: applied[0])) == "caught up"


def test_reconnect_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="seconds >= 0"):
        Reconnect(seconds=-1)
    with pytest.raises(ValueError, match="first_delay <= max_delay"):
        Reconnect(first_delay=2, max_delay=1)
