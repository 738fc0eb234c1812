"""CLI `status` tells the truth: the last run of every way a pass runs, sweeps' candidate
facts (not episodes), due-ness that agrees with `run --once`, filters, and a summary per
rule when there are many partitions (on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.contract import RUNS_PACK
from stargraph_mem.stores import ConsolidationRule, SQLiteMemoryStore

ROOT = Path(__file__).resolve().parents[1]
LIFECYCLE = str(ROOT / "rules" / "fact_lifecycle.yaml")
BOTH = pytest.mark.parametrize("new_location", ["sqlite", "postgresql"], indirect=True)
NIGHT1, NIGHT8 = "2026-11-02T04:00:00+00:00", "2026-11-09T04:30:00+00:00"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def observe(db: str, user: str, eid: str, obj: str, ts: str) -> None:
    code, _, err = invoke(
        "put", "--db", db, "--user", user, "--session", "s1", "--agent", "rag", "--id", eid,
        "--timestamp", ts, "--meta", f"subject={user}", "--meta", "predicate=likes",
        "--meta", f"object={obj}", "--meta", "importance=0.5", f"{user} likes {obj}",
    )  # fmt: skip
    assert code == 0, err


def status(db: str, now: str, *args: str) -> list[str]:
    code, out, err = invoke("status", "--db", db, "--now", now, *args)
    assert (code, err) == (0, "")
    return out.splitlines()


@BOTH
def test_last_run_after_consolidate_and_sweep_candidates(new_location: Any) -> None:
    db = new_location()
    observe(db, "alice", "a1", "tea", "2026-11-01T09:00:00+00:00")
    observe(db, "bob", "b1", "jam", "2026-11-01T09:00:00+00:00")
    code, _, err = invoke("consolidate", "--db", db, "--pack", LIFECYCLE, "--now", NIGHT1)
    assert (code, err) == (0, "")
    rules = ("--rule", "observe_important", "--rule", "decay_unreinforced")
    assert status(db, NIGHT1, *rules) == [
        "PACK            RULE                CADENCE               USER   AGENT  PENDING  "
        "LAST RUN                   NEXT RUN",
        "fact_lifecycle  observe_important   cron 0 4 * * * (UTC)  alice  rag    0        "
        "2026-11-02T04:00:00+00:00  2026-11-03T04:00:00+00:00",
        "fact_lifecycle  observe_important   cron 0 4 * * * (UTC)  bob    rag    0        "
        "2026-11-02T04:00:00+00:00  2026-11-03T04:00:00+00:00",
        # a fact one night old is no candidate of the weekly decay yet; the episodes are
        # not its business
        "fact_lifecycle  decay_unreinforced  cron 0 4 * * * (UTC)  alice  rag    0 facts  "
        "-                          2026-11-03T04:00:00+00:00",
        "fact_lifecycle  decay_unreinforced  cron 0 4 * * * (UTC)  bob    rag    0 facts  "
        "-                          2026-11-03T04:00:00+00:00",
    ]
    # a week later the facts are candidates: due at 04:00, until a pass runs the fire
    decay = ("--user", "alice", "--rule", "decay_unreinforced")
    assert status(db, NIGHT8, *decay)[1] == (
        "fact_lifecycle  decay_unreinforced  cron 0 4 * * * (UTC)  alice  rag    1 fact   "
        "-         2026-11-09T04:00:00+00:00 (due)"
    )
    code, _, err = invoke("consolidate", "--db", db, "--pack", LIFECYCLE, "--now", NIGHT8)
    assert (code, err) == (0, "")
    assert status(db, NIGHT8, *decay)[1] == (  # the decayed fact waits for the next night
        "fact_lifecycle  decay_unreinforced  cron 0 4 * * * (UTC)  alice  rag    0 facts  "
        "2026-11-09T04:00:00+00:00  2026-11-10T04:00:00+00:00"
    )
    # the episode rules found nothing new: a consolidate that changes nothing records no
    # run (it leaves the stores as they were), so they are due as the scheduler sees them
    nightly = ("--user", "alice", "--rule", "observe_important")
    assert status(db, NIGHT8, *nightly)[1].endswith(" (due)")
    code, out, _ = invoke("run", "--db", db, "--pack", LIFECYCLE, "--once", "--now", NIGHT8)
    assert (code, out.splitlines()[-1]) == (0, "2 passes run")
    # status agrees with the scheduler: nothing is due right after the passes
    assert not status(db, NIGHT8, *nightly)[1].endswith(" (due)")
    code, out, _ = invoke("run", "--db", db, "--pack", LIFECYCLE, "--once", "--now", NIGHT8)
    assert (code, out) == (0, "nothing due\n")
    code, out, _ = invoke("status", "--db", db, "--now", NIGHT8, "--json", *decay)
    assert json.loads(out)["rules"] == [
        {
            "pack": "fact_lifecycle",
            "rule": "decay_unreinforced",
            "cadence": {"cron": "0 4 * * *", "tz": "UTC"},
            "user": "alice",
            "agent": "rag",
            "pending": 0,
            "not_yet_due": 0,
            "last_run": "2026-11-09T04:00:00+00:00",
            "next_run": "2026-11-10T04:00:00+00:00",
            "due": False,
            "sweep": True,
        }
    ]
    night9 = "2026-11-10T04:00:00+00:00"
    assert status(db, night9, *decay)[1].endswith("1 fact   2026-11-09T04:00:00+00:00  "
                                                   "2026-11-10T04:00:00+00:00 (due)")  # fmt: skip
    code, out, _ = invoke("run", "--db", db, "--pack", LIFECYCLE, "--once", "--now", night9)
    assert code == 0
    # the nightly episode rules of both partitions, and the decay of both facts
    assert out.splitlines()[-1] == "4 passes run"
    assert status(db, night9, *decay)[1].endswith("2026-11-10T04:00:00+00:00  "
                                                  "2026-11-11T04:00:00+00:00")  # fmt: skip


def test_filters_that_match_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    observe(db, "alice", "a1", "tea", "2026-11-01T09:00:00+00:00")
    assert invoke("consolidate", "--db", db, "--pack", LIFECYCLE, "--now", NIGHT1)[0] == 0
    assert status(db, NIGHT1, "--user", "carol") == ["no rows match --user, --agent or --rule"]
    assert status(db, NIGHT1, "--agent", "other", "--rule", "observe") == [
        "no rows match --user, --agent or --rule"
    ]
    assert len(status(db, NIGHT1, "--agent", "rag")) == 8  # the header and seven rules


@BOTH
def test_many_partitions_are_summed_per_rule(new_location: Any, tmp_path: Path) -> None:
    db = new_location()
    data = tmp_path / "eps.jsonl"
    rows = [
        {
            "id": f"e{u}-{n}",
            "content": f"u{u:02d} likes item{n}",
            "timestamp": f"2026-11-01T0{n}:00:00+00:00",
            "user": f"u{u:02d}",
            "session": "s1",
            "agent": "rag",
            "metadata": {"subject": f"u{u:02d}", "predicate": "likes", "object": f"item{n}"},
        }
        for u in range(25)
        for n in range(2)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert invoke("ingest", str(data), "--db", db)[0] == 0
    assert invoke("consolidate", "--db", db, "--pack", LIFECYCLE, "--now", NIGHT1)[0] == 0
    observe(db, "u03", "late", "tea", "2026-11-02T09:00:00+00:00")
    assert status(db, NIGHT1) == [
        "PACK            RULE                 CADENCE               PARTITIONS  DUE  PENDING  "
        "LAST RUN",
        "fact_lifecycle  reinforce_on_repeat  cron 0 4 * * * (UTC)  25          0    1        "
        "2026-11-02T04:00:00+00:00",
        "fact_lifecycle  restore_on_repeat    cron 0 4 * * * (UTC)  25          0    1        "
        "2026-11-02T04:00:00+00:00",
        "fact_lifecycle  observe_important    cron 0 4 * * * (UTC)  25          0    1        "
        "2026-11-02T04:00:00+00:00",
        "fact_lifecycle  observe              cron 0 4 * * * (UTC)  25          0    1        "
        "2026-11-02T04:00:00+00:00",
        "fact_lifecycle  archive_faded        cron 0 4 * * * (UTC)  25          0    0 facts  -",
        "fact_lifecycle  archive_stale        cron 0 4 * * * (UTC)  25          0    0 facts  -",
        "fact_lifecycle  decay_unreinforced   cron 0 4 * * * (UTC)  25          0    0 facts  -",
        "175 rows for 25 partitions, summed per rule; narrow them with --user, --agent or "
        "--rule, or show every row with --all",
    ]
    assert len(status(db, NIGHT1, "--all")) == 176
    code, out, _ = invoke("status", "--db", db, "--now", NIGHT1, "--json")
    assert (code, len(json.loads(out)["rules"])) == (0, 175)
    assert status(db, NIGHT1, "--user", "u03", "--rule", "observe") == [
        "PACK            RULE     CADENCE               USER  AGENT  PENDING  LAST RUN"
        "                   NEXT RUN",
        "fact_lifecycle  observe  cron 0 4 * * * (UTC)  u03   rag    1        "
        "2026-11-02T04:00:00+00:00  2026-11-03T04:00:00+00:00",
    ]


def test_the_specifications_consolidate_records_its_runs(tmp_path: Path) -> None:
    """Every cadence of ``consolidate(rule)`` records the partition's last run, and
    ``status`` shows its rules (pack ``consolidate(rule)``), pending counted after the
    watermarks its passes keep."""
    import asyncio
    from datetime import UTC, datetime

    from stargraph_mem.model.episodes import Episode

    path = tmp_path / "m.db"

    def ep(eid: str, user: str, day: int) -> Episode:
        at = datetime(2026, 1, day, tzinfo=UTC)
        return Episode(id=eid, content="x", timestamp=at, user=user, session="s", agent="a")

    async def scenario() -> None:
        async with SQLiteMemoryStore(path=path) as store:
            for episode in (ep("e1", "alice", 1), ep("e2", "bob", 1)):
                await store.put(episode, user=episode.user, session="s", agent="a")
            every2 = ConsolidationRule(id="every2", cadence={"every": 2})
            assert await store.consolidate(every2, due_only=True) == []
            await store.consolidate(
                ConsolidationRule(id="every1", cadence={"every": 1}), due_only=True
            )
            await store.consolidate(
                ConsolidationRule(id="idle", cadence={"idle": "1m"}), due_only=True
            )
            await store.put(ep("e3", "alice", 2), user="alice", session="s", agent="a")

    asyncio.run(scenario())
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT rule_id, partition_key, runs FROM rule_runs WHERE pack = ? "
            "AND last_run_us IS NOT NULL ORDER BY rule_id, partition_key",
            (RUNS_PACK,),
        ).fetchall()
    db.close()
    assert rows == [
        ("every1", "/user/alice/agent/a/", 1),
        ("every1", "/user/bob/agent/a/", 1),
        ("idle", "/user/alice/agent/a/", 1),
        ("idle", "/user/bob/agent/a/", 1),
    ]  # every2 saw one episode per partition: not due, no run
    code, out, _ = invoke("status", "--db", str(path), "--json", "--user", "alice")
    assert code == 0
    shown = [
        (r["pack"], r["rule"], r["pending"], r["last_run"] is not None, r["due"])
        for r in json.loads(out)["rules"]
    ]
    assert shown == [
        ("consolidate(rule)", "every2", 2, False, True),
        ("consolidate(rule)", "every1", 1, True, True),
        ("consolidate(rule)", "idle", 1, True, True),
    ]


def test_readme_night_with_bad_lines_runs_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's worked example: ingest with --skip-invalid, consolidate, status."""
    from readme_helpers import check_transcript

    for name in ("examples/night_with_bad_lines.jsonl", "rules/fact_lifecycle.yaml"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    check_transcript("an id used twice; the good lines go in", 4)
    readme = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    shown = readme.split("`rejects.jsonl` then holds:\n\n```text\n", 1)[1].split("```\n", 1)[0]
    assert (tmp_path / "rejects.jsonl").read_text(encoding="utf-8") == shown
