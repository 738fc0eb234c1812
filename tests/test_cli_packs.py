"""CLI tests for the pack and consolidation commands: exact output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import SEED_PACK
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.compiler import compile_file

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "rules" / "default.yaml"
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_validate_ok_and_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEFAULT.read_text().replace("priority: 100", "priorty: 100"), encoding="utf-8")
    code, out, err = invoke("validate", str(DEFAULT), str(bad))
    assert code == 1
    assert out == f"ok: {DEFAULT}\n"
    assert (
        err == f"{bad}:26:5: rules[0].priorty: unknown field 'priorty'; did you mean 'priority'?\n"
    )


def test_validate_missing_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code, _, err = invoke("validate", str(missing))
    assert code == 1
    assert err.startswith(f"{missing}: cannot read rule pack:")
    assert err.count("\n") == 1


def test_compile_writes_clp_and_manifest(tmp_path: Path) -> None:
    compiled = compile_file(DEFAULT)
    code, out, _ = invoke("compile", str(DEFAULT), "-o", str(tmp_path))
    assert code == 0
    assert out == (
        f"compiled default 1.0.0: 6 rules, sha256 {compiled.sha256}\n"
        f"wrote {tmp_path / 'default.clp'}\n"
        f"wrote {tmp_path / 'default.manifest.json'}\n"
    )
    assert (tmp_path / "default.clp").read_text(encoding="utf-8") == compiled.clips
    manifest = json.loads((tmp_path / "default.manifest.json").read_text(encoding="utf-8"))
    assert manifest["sha256"] == compiled.sha256
    assert [r["id"] for r in manifest["rules"]][:2] == ["explicit_noop", "explicit_delete"]


def test_compile_print_is_the_program() -> None:
    code, out, _ = invoke("compile", str(DEFAULT), "--print")
    assert code == 0
    assert out == compile_file(DEFAULT).clips


def test_info_table() -> None:
    code, out, _ = invoke("info", str(DEFAULT))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("default 1.0.0 (ir_version 1) sha256 ")
    assert lines[1].split() == ["RULE", "PRIORITY", "CADENCE", "EMITS", "CLAIM", "ENABLED"]
    assert lines[2] == (
        "explicit_noop           100       cron 0 3 * * * (UTC)  noop    yes    yes"
    )
    assert len(lines) == 8


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def episode(i: int, subject: str, obj: str, session: str = "s1") -> dict[str, object]:
    return {
        "id": f"e{i}",
        "content": f"{subject} likes {obj}",
        "timestamp": f"2026-11-01T0{i}:00:00+00:00",
        "user": "alice",
        "session": session,
        "agent": "rag",
        "metadata": {"subject": subject, "predicate": "likes", "object": obj},
    }


def test_ingest_consolidate_facts_explain(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    data = tmp_path / "eps.jsonl"
    write_jsonl(data, [episode(1, "alice", "tea"), episode(2, "alice", "coffee")])
    code, out, _ = invoke("ingest", str(data), "--db", str(db))
    assert (code, out) == (0, f"ingested 2 new episodes (2 lines) into {db}\n")

    now = "2026-11-02T03:00:00+00:00"
    code, out, err = invoke(
        "consolidate", "--db", str(db), "--pack", str(DEFAULT), "--now", now, "--dry-run"
    )
    assert code == 0
    deltas = [json.loads(line) for line in out.splitlines()]
    assert [d["kind"] for d in deltas] == ["add", "update"]
    assert err == (
        "default user=alice agent=rag episodes=2 add=1 update=1 delete=0 noop=0 "
        "rejected=0 gated=0 (dry run: nothing applied)\n"
    )
    code, out, _ = invoke("facts", "--db", str(db), "--json")
    assert (code, out) == (0, "")

    code, out, _ = invoke("consolidate", "--db", str(db), "--pack", str(DEFAULT), "--now", now)
    assert code == 0
    assert out == (
        "default user=alice agent=rag episodes=2 add=1 update=1 delete=0 noop=0 "
        "rejected=0 gated=0\n"
    )
    code, out, _ = invoke("facts", "--db", str(db), "--json")
    facts = [json.loads(line) for line in out.splitlines()]
    assert [(f["subject"], f["object"]) for f in facts] == [("alice", "coffee")]

    code, out, _ = invoke("facts", "--db", str(db), "--as-of", "2026-11-02T02:59:59+00:00")
    assert code == 0
    assert out.splitlines()[1:] == []

    code, out, _ = invoke("explain", facts[0]["id"], "--db", str(db), "--json")
    assert code == 0
    why = json.loads(out)
    assert why["fact"]["object"] == "coffee"
    assert [p["object"] for p in why["predecessors"]] == ["tea"]

    code, out, _ = invoke("consolidate", "--db", str(db), "--pack", str(DEFAULT), "--now", now)
    assert out.endswith("episodes=0 add=0 update=0 delete=0 noop=0 rejected=0 gated=0\n")


def test_ingest_bad_line_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    data = tmp_path / "eps.jsonl"
    good = json.dumps(episode(1, "alice", "tea"))
    bad = dict(episode(2, "alice", "tea"))
    bad["timestamp"] = "2026-11-01T02:00:00"
    data.write_text(good + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    code, out, err = invoke("ingest", str(data), "--db", str(db))
    assert code == 1
    assert out == ""
    assert err.startswith(f"error: {data}:2: timestamp:")
    assert not db.exists()


@pytest.mark.parametrize("command", ["facts", "explain"])
def test_read_commands_refuse_missing_db(tmp_path: Path, command: str) -> None:
    db = tmp_path / "none.db"
    args = [command, "--db", str(db)] + (["f1"] if command == "explain" else [])
    code, _, err = invoke(*args)
    assert code == 1
    assert err == f"error: {db}: database file does not exist\n"
    assert not db.exists()


def test_consolidate_naive_now_is_an_error(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    db.touch()
    code, _, err = invoke(
        "consolidate", "--db", str(db), "--pack", str(DEFAULT), "--now", "2026-11-02T03:00:00"
    )
    assert code == 1
    assert err.startswith("error: --now '2026-11-02T03:00:00' has no UTC offset")


def test_consolidate_worker_option(tmp_path: Path) -> None:
    data = tmp_path / "eps.jsonl"
    write_jsonl(data, [episode(i, f"s{i % 3}", f"o{i}") for i in range(1, 10)])
    now = "2026-11-02T03:00:00+00:00"
    listed = []
    for mode in ("never", "always"):
        db = tmp_path / f"{mode}.db"
        assert invoke("ingest", str(data), "--db", str(db))[0] == 0
        code, out, _ = invoke(
            "consolidate", "--db", str(db), "--pack", str(DEFAULT), "--now", now, "--worker", mode
        )
        assert (code, out) == (
            0,
            "default user=alice agent=rag episodes=9 add=3 update=6 delete=0 noop=0 "
            "rejected=0 gated=0\n",
        )
        code, out, _ = invoke("facts", "--db", str(db), "--json")
        listed.append(
            [
                {k: v for k, v in json.loads(line).items() if k != "recorded_at"}
                for line in out.splitlines()
            ]
        )
    assert listed[0] == listed[1] and len(listed[0]) == 3
    code, _, err = invoke(
        "consolidate",
        "--db",
        str(tmp_path / "never.db"),
        "--pack",
        str(DEFAULT),
        "--worker",
        "often",
    )
    assert code == 2 and "often" in err


def test_consolidate_sweeps_a_partition_without_new_episodes(tmp_path: Path) -> None:
    db, data, seed = tmp_path / "m.db", tmp_path / "eps.jsonl", tmp_path / "seed.yaml"
    seed.write_text(SEED_PACK, encoding="utf-8")
    expire = str(ROOT / "rules" / "expire_speculative.yaml")
    bob = {**episode(2, "bob", "jazz"), "user": "bob", "id": "b2"}
    write_jsonl(data, [episode(1, "alice", "opera"), bob])
    assert invoke("ingest", str(data), "--db", str(db))[0] == 0
    for pack, now in ((seed, "2026-11-01T12:00:00+00:00"), (expire, "2026-11-02T05:00:00+00:00")):
        assert invoke("consolidate", "--db", str(db), "--pack", str(pack), "--now", now)[0] == 0
    news = {**bob, "id": "b3", "timestamp": "2026-12-10T01:00:00+00:00"}
    write_jsonl(data, [news])  # only Bob has news; Alice's fact is 39 days old
    assert invoke("ingest", str(data), "--db", str(db))[0] == 0
    now = "2026-12-10T05:00:00+00:00"
    code, out, _ = invoke("consolidate", "--db", str(db), "--pack", expire, "--now", now)
    assert code == 0
    assert out.splitlines() == [
        "expire_speculative user=alice agent=rag episodes=0 add=0 update=0 delete=0 noop=0 "
        "rejected=0 gated=0",  # no new episodes for the episode rule
        "expire_speculative user=bob agent=rag episodes=1 add=0 update=0 delete=0 noop=1 "
        "rejected=0 gated=0",
        "expire_speculative user=alice agent=rag episodes=0 add=0 update=0 delete=1 noop=0 "
        "rejected=0 gated=0 sweep=expire_unreinforced",  # the sweep, at its fire time (04:00)
    ]
    code, out, _ = invoke("facts", "--db", str(db), "--json")
    assert [json.loads(line)["user"] for line in out.splitlines()] == ["bob"]
