"""CLI tests for ``run`` and ``status``: exact output, exit codes, signal shutdown."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from stargraph_mem.cli import app

ROOT = Path(__file__).resolve().parents[1]
DEDUP = ROOT / "rules" / "dedup_against_facts.yaml"
runner = CliRunner()

HEADER = "PACK                 RULE                   CADENCE               USER   AGENT  PENDING"


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def put(db: Path, eid: str, obj: str, ts: str) -> None:
    code, _, err = invoke(
        "put", "--db", str(db), "--user", "alice", "--session", "s1", "--agent", "rag",
        "--id", eid, "--timestamp", ts, "--meta", "subject=alice", "--meta", "predicate=likes",
        "--meta", f"object={obj}", f"Alice likes {obj}",
    )  # fmt: skip
    assert code == 0, err


def test_run_once_and_status(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    put(db, "ep1", "tea", "2026-11-01T09:00:00+00:00")
    code, out, _ = invoke("status", "--db", str(db))
    assert (code, out) == (0, "no scheduled rules: run `stargraph-mem run --pack …` first\n")

    pack = ["--db", str(db), "--pack", str(DEDUP), "--once"]
    code, out, _ = invoke("run", *pack, "--now", "2026-11-02T02:59:00+00:00")
    assert (code, out) == (0, "nothing due\n")

    code, out, _ = invoke("status", "--db", str(db), "--now", "2026-11-02T02:59:00+00:00")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == HEADER + "  LAST RUN  NEXT RUN"
    assert lines[1] == (
        "dedup_against_facts  known_fact_noop        cron 0 3 * * * (UTC)  alice  rag    "
        "1        -         2026-11-02T03:00:00+00:00"
    )
    assert len(lines) == 5  # the header and each of the pack's four rules

    code, out, _ = invoke("run", *pack, "--now", "2026-11-02T03:00:00+00:00")
    assert code == 0
    assert out == (
        "dedup_against_facts user=alice agent=rag episodes=1 add=1 update=0 delete=0 noop=0 "
        "rejected=0 gated=0 rules=known_fact_noop,changed_object_update,late_observation_noop,"
        "new_fact_add\n"
        "1 pass run\n"
    )
    code, out, _ = invoke("run", *pack, "--now", "2026-11-02T03:00:30+00:00")
    assert (code, out) == (0, "nothing due\n")

    code, out, _ = invoke("status", "--db", str(db), "--now", "2026-11-02T04:00:00+00:00")
    assert out.splitlines()[4] == (
        "dedup_against_facts  new_fact_add           cron 0 3 * * * (UTC)  alice  rag    "
        "0        2026-11-02T03:00:00+00:00  2026-11-03T03:00:00+00:00"
    )


def test_status_of_a_count_rule(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    pack = tmp_path / "counted.yaml"
    pack.write_text(
        DEDUP.read_text(encoding="utf-8").replace('{cron: "0 3 * * *"}', "{every: 3}"), "utf-8"
    )
    put(db, "ep1", "tea", "2026-11-01T09:00:00+00:00")
    code, out, _ = invoke("status", "--db", str(db), "--pack", str(pack))
    assert code == 0
    assert out.splitlines()[1].split() == [
        "dedup_against_facts", "known_fact_noop", "every", "3", "alice", "rag", "1", "-",
        "after", "2", "more",
    ]  # fmt: skip
    put(db, "ep2", "jam", "2026-11-01T09:01:00+00:00")
    put(db, "ep3", "gin", "2026-11-01T09:02:00+00:00")
    code, out, _ = invoke("status", "--db", str(db), "--pack", str(pack))
    assert out.splitlines()[1].split()[-3:] == ["3", "-", "due"]  # pending, last run, next


def test_run_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    code, _, err = invoke("run", "--db", str(missing), "--pack", str(DEDUP), "--once")
    assert (code, err) == (1, f"error: {missing}: database file does not exist\n")
    code, _, err = invoke("status", "--db", str(missing))
    assert (code, err) == (1, f"error: {missing}: database file does not exist\n")
    db = tmp_path / "m.db"
    put(db, "ep1", "tea", "2026-11-01T09:00:00+00:00")
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEDUP.read_text(encoding="utf-8").replace("0 3 * * *", "0 0 31 2 *"), "utf-8")
    code, _, err = invoke("run", "--db", str(db), "--pack", str(bad), "--once")
    assert code == 1
    assert err.startswith("error: rule 'known_fact_noop': cron '0 0 31 2 *' has no time after ")
    assert err.count("\n") == 1
    at = ["--now", "2026-11-02T00:00:00+00:00"]
    code, _, err = invoke("run", "--db", str(db), "--pack", str(DEDUP), *at)
    assert code == 2
    assert "--now needs --once" in err
    code, _, err = invoke("run", "--db", str(db), "--pack", str(DEDUP), "--once", "--now", "x")
    assert code == 2
    assert "not an ISO-8601 timestamp: 'x'" in err


def test_run_stops_cleanly_on_sigterm_and_releases_the_lease(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    put(db, "ep1", "tea", "2026-11-01T09:00:00+00:00")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from stargraph_mem.cli import main; main()", "run", "--db",
         str(db), "--pack", str(DEDUP), "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    holder = f"{socket.gethostname()}/{proc.pid}/"
    assert first.startswith(f"scheduler {holder}") and first.endswith("running (interval 0.05 s)\n")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, "")
    # the overdue nightly pass ran on the first tick, before the signal was handled
    assert out.splitlines() == [
        "dedup_against_facts user=alice agent=rag episodes=1 add=1 update=0 delete=0 noop=0 "
        "rejected=0 gated=0 rules=known_fact_noop,changed_object_update,late_observation_noop,"
        "new_fact_add",
        "stopped",
    ]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler_lease").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM partition_claims").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (1,)
    conn.close()
