"""The CLI under hostile conditions: a failed open never leaves the process running,
arguments that are not UTF-8 are usage errors, printed text cannot carry control
characters, and a read-only database can still be read.

Commands whose process must exit run as subprocesses, a few at a time, each awaited with
a timeout (a hang fails the test instead of stalling it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.cli.base import printable
from stargraph_mem.compiler import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import StoreError
from stargraph_mem.stores import Episode
from stargraph_mem.stores.database import SQLiteDatabase
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "rules" / "default.yaml"
NOW = "2026-11-23T00:00:00+00:00"
TIMEOUT = 60
PARALLEL = 2 * (os.cpu_count() or 2)
"""Subprocesses running at once."""
CLI = "from stargraph_mem.cli import main; main()"

OPEN_SCRIPT = """
import asyncio, sys
from stargraph_mem.engine.api import Consolidator

async def main(db, pack):
    errors = []
    mem = Consolidator.open(db, [pack])
    try:
        await mem.bootstrap()
    except Exception as exc:
        errors.append(exc)
    try:
        async with Consolidator.open(db, [pack]) as mem:
            await mem.facts()
    except Exception as exc:
        errors.append(exc)
    return errors

errors = asyncio.run(main(sys.argv[1], sys.argv[2]))
if [str(e) for e in errors] != [str(errors[0])] * 2:
    sys.exit(f"expected the same error twice, got {errors!r}")
print(f"error: {errors[0]}", file=sys.stderr)
sys.exit(1)
"""
"""Opens a Consolidator twice (``bootstrap()``, then ``async with``); both must fail."""

LIMIT_FILE_SIZE = """
import os, resource, signal, sys
limit = int(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""
"""Runs the rest of argv with files limited to argv[1] bytes: a disk that fills up."""

DROP_DAC = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""
"""Runs the rest of argv as root without the capabilities that ignore file modes, so
``chmod`` binds root as it binds everyone else."""

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def put(db: Path, user: str, obj: str, *, session: str = "s1", content: str | None = None) -> None:
    code, _, err = invoke(
        "put", "--db", str(db), "--user", user, "--session", session, "--agent", "a1",
        "--timestamp", "2026-11-22T12:00:00+00:00", "--meta", f"subject={user}",
        "--meta", "predicate=likes", "--meta", f"object={obj}", content or f"likes {obj}",
    )  # fmt: skip
    assert code == 0, err


def consolidate(db: Path) -> None:
    code, _, err = invoke("consolidate", "--db", str(db), "--pack", str(DEFAULT), "--now", NOW)
    assert code == 0, err


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


class Batch:
    """Python subprocesses, run by :meth:`run` a few at a time, each with a timeout."""

    def __init__(self) -> None:
        self.argvs: dict[str, list[str | bytes]] = {}

    def add(self, key: str, argv: Sequence[str | bytes]) -> None:
        self.argvs[key] = [sys.executable, *argv]

    def cli(self, key: str, *args: str | bytes, prefix: Sequence[str] = ()) -> None:
        self.add(key, [*prefix, "-c", CLI, *args])

    def run(self) -> dict[str, Outcome]:
        """Run every process, :data:`PARALLEL` at a time, each given :data:`TIMEOUT` seconds
        from its own start (a queue of interpreters starting at once on a loaded machine
        must not count as a hang)."""
        hung: list[str] = []

        def one(key: str) -> tuple[str, Outcome]:
            pipe = subprocess.PIPE
            proc = subprocess.Popen(self.argvs[key], stdout=pipe, stderr=pipe)
            try:
                out, err = proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                hung.append(key)
            return key, Outcome(proc.returncode, out.decode(), err.decode())

        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            done = dict(pool.map(one, list(self.argvs)))
        assert not hung, f"still running after {TIMEOUT} s: {hung}"
        return done


def assert_one_error_line(outcome: Outcome, code: int = 1) -> str:
    """Exit ``code``, nothing on stdout, one ``error: …`` line on stderr; returns it."""
    assert (outcome.code, outcome.out) == (code, ""), outcome
    assert outcome.err.startswith("error: ") and outcome.err.count("\n") == 1, outcome.err
    assert "Traceback" not in outcome.err
    return outcome.err.rstrip("\n")


# --- a failed open never hangs ----------------------------------------------------------

FAILED_OPEN_COMMANDS = {
    "consolidate": ["consolidate", "--pack", str(DEFAULT)],
    "run --once": ["run", "--once", "--pack", str(DEFAULT)],
    "status": ["status"],
    "facts": ["facts"],
    "explain": ["explain", "f1"],
    "recent": ["recent", "--user", "alice"],
    "put": ["put", "--user", "alice", "--session", "s1", "--agent", "a1", "hi"],
}

DISK_LIMIT = 48 * 1024
"""Bytes a file may grow to: room for the episodes file and its 32 KiB shared-memory index,
not for a write-ahead log holding the new fact tables."""


def newer_schema(db: Path) -> None:
    """A file written by a newer version: its fact store schema is version 99."""
    put(db, "alice", "tea")
    consolidate(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE fact_store_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()


def episodes_only(db: Path) -> None:
    """Episodes, no fact tables yet: creating them is the first write of a Consolidator."""
    put(db, "alice", "tea")
    assert db.stat().st_size < DISK_LIMIT


def not_a_database(db: Path) -> None:
    db.write_bytes(b"these are notes, not a database\n" * 64)


def episodes_view(db: Path) -> None:
    """``episodes`` is a view: the episode store's indexes cannot be created."""
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE VIEW episodes AS SELECT 1 AS id")
    conn.close()


FAILURES = {
    # kind: (make the file, the commands run on it, expected error)
    "newer schema": (
        newer_schema,
        ["consolidate", "run --once", "status", "facts", "explain", "recent", "put"],
        "fact store schema version 99 is not supported",
    ),
    "disk full": (episodes_only, ["consolidate"], "disk I/O error|database or disk is full"),
    "not a database": (not_a_database, ["status"], "file is not a database"),
    "episodes is a view": (episodes_view, ["put"], "is not a stargraph_mem database"),
}
"""Each kind also runs the Consolidator script. A file whose ``episodes`` is a view is not
one of ours: every command refuses it before writing anything."""

FAILED_OPENS = [
    f"{kind}: {command}"
    for kind, (_, commands, _) in FAILURES.items()
    for command in [*commands, "script"]
]


def add_failed_opens(batch: Batch, tmp: Path) -> dict[str, Path]:
    """Make each broken file and add its commands; returns the files by kind."""
    files = {}
    for n, (kind, (make, commands, _)) in enumerate(FAILURES.items()):
        db = files[kind] = tmp / f"failed-{n}.db"
        make(db)
        prefix = ["-c", LIMIT_FILE_SIZE, str(DISK_LIMIT)] if kind == "disk full" else []
        for command in commands:
            argv = [*FAILED_OPEN_COMMANDS[command], "--db", str(db)]
            batch.cli(f"{kind}: {command}", *argv, prefix=prefix)
        batch.add(f"{kind}: script", [*prefix, "-c", OPEN_SCRIPT, str(db), str(DEFAULT)])
    return files


@pytest.mark.parametrize("key", FAILED_OPENS)
def test_a_failed_open_prints_one_line_and_exits(runs: Runs, key: str) -> None:
    kind = key.split(":")[0]
    line = assert_one_error_line(runs.outcomes[key])
    expected = FAILURES[kind][2].split("|")
    assert any(text in line for text in expected), line


@pytest.mark.parametrize("kind", ["newer schema", "not a database", "episodes is a view"])
def test_a_refused_file_is_left_as_it_was(runs: Runs, kind: str) -> None:
    """Refused before anything was written: same bytes, no log or journal beside it."""
    db = runs.failed[kind]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == runs.before[db]
    assert [p.name for p in db.parent.iterdir() if p.name.startswith(f"{db.name}-")] == []


def test_the_disk_filled_while_the_fact_tables_were_created(runs: Runs) -> None:
    """The disk-full case fails after the episode store opened, and leaves the file as it was."""
    db = runs.failed["disk full"]
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "episodes" in tables and "facts" not in tables
    assert hashlib.sha256(db.read_bytes()).hexdigest() == runs.before[db]


def test_a_failed_bootstrap_leaves_no_connection_open(tmp_path: Path) -> None:
    """In process: after a failed ``async with``, no store holds a connection."""
    db = tmp_path / "m.db"
    newer_schema(db)
    mem = Consolidator.open(db, [DEFAULT])

    async def scenario() -> None:
        with pytest.raises(StoreError, match="schema version 99"):
            async with mem:
                pass

    asyncio.run(scenario())
    database = mem.database
    assert isinstance(database, SQLiteDatabase)
    assert database.connection.db is None


# --- arguments that are not UTF-8 -------------------------------------------------------

BAD = "\udcff"
"""What Python makes of the byte 0xff in argv (``surrogateescape``)."""

SCOPE = ["--user", "alice", "--session", "s1", "--agent", "a1"]


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["put", "--user", BAD, "--session", "s1", "--agent", "a1", "hi"], "--user"),
        (["put", "--user", "alice", "--session", f"s{BAD}", "--agent", "a1", "hi"], "--session"),
        (["put", *SCOPE, "--meta", f"k={BAD}", "hi"], "--meta"),
        (["put", *SCOPE, "--id", BAD, "hi"], "--id"),
        (["put", *SCOPE, f"h{BAD}"], "CONTENT"),
        (["put", *SCOPE, "--db", BAD, "hi"], "--db"),
        (["recent", "--user", BAD], "--user"),
        (["recent", "--user", "alice", "--agent", BAD], "--agent"),
        (["facts", "--user", BAD], "--user"),
        (["explain", BAD], "FACT_ID"),
        (["consolidate", "--pack", str(DEFAULT), "--user", BAD], "--user"),
        (["consolidate", "--pack", BAD], "--pack"),
        (["run", "--once", "--pack", BAD], "--pack"),
        (["status", "--now", BAD], "--now"),
        (["replay", "--pack", str(DEFAULT), "--agent", BAD], "--agent"),
        (["validate", BAD], "PACKS"),
        (["compile", BAD], "PACK"),
        (["info", BAD], "PACK"),
        (["lint", BAD], "PACKS"),
        (["test", str(DEFAULT), BAD], "TESTS"),
        (["ingest", BAD], "FILE"),
        (["schema", "--path", BAD], "--path"),
    ],
)
def test_arguments_that_are_not_utf8_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(*args)
    position = next(a for a in args if BAD in a).index(BAD) + 1
    assert (code, out) == (2, "")
    assert err == f"error: {name} is not valid UTF-8 (byte 0xff at character {position})\n"
    assert list(tmp_path.iterdir()) == []


def test_a_lone_surrogate_and_a_bad_command_name() -> None:
    assert invoke("facts", "--agent", "a\ud800") == (
        2,
        "",
        "error: --agent is not valid UTF-8 (lone surrogate U+D800 at character 2)\n",
    )
    assert invoke(BAD) == (2, "", "error: command is not valid UTF-8 (byte 0xff at character 1)\n")


def add_non_utf8_argv(batch: Batch, tmp: Path) -> None:
    """The real thing: bytes from the shell, decoded by Python at startup."""
    db = str(tmp / "argv.db")
    batch.cli(
        "argv: put", "put", "--db", db, "--user", b"\xff", "--session", "s", "--agent", "a", "x"
    )
    batch.cli("argv: recent", "recent", "--db", db, "--user", b"bob\xfe")


def test_non_utf8_bytes_in_argv(runs: Runs) -> None:
    assert runs.outcomes["argv: put"] == Outcome(
        2, "", "error: --user is not valid UTF-8 (byte 0xff at character 1)\n"
    )
    assert runs.outcomes["argv: recent"] == Outcome(
        2, "", "error: --user is not valid UTF-8 (byte 0xfe at character 4)\n"
    )
    assert not (runs.tmp / "argv.db").exists()


# --- printed text escapes control characters --------------------------------------------

UNSAFE = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | set(
    "\u2028\u2029\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def assert_printable(text: str) -> None:
    """Only newlines between lines; nothing else a terminal would act on."""
    for line in text.split("\n"):
        assert not UNSAFE & set(line), repr(line)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain café 😀 [bold]x[/bold]", "plain café 😀 [bold]x[/bold]"),
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("back\\slash\\n", "back\\\\slash\\\\n"),
        ("\x00\x1b[31m\x7f", "\\x00\\x1b[31m\\x7f"),
        ("\x85\x9f", "\\x85\\x9f"),
        ("\u2028\u2029", "\\u2028\\u2029"),
        (
            "\u202eevil\u202c \u2066x\u2069 \u200f\u061c",
            "\\u202eevil\\u202c \\u2066x\\u2069 \\u200f\\u061c",
        ),
        ("\udcff", "\\udcff"),
    ],
)
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(shown, backslashes=False) == shown  # a second pass changes nothing
    assert printable(text, backslashes=False) == shown.replace("\\\\", "\\")


HOSTILE = "bo\nb\x1b[31m\u202e[bold]x"
SHOWN = "bo\\nb\\x1b[31m\\u202e[bold]x"


@pytest.fixture
def hostile_db(tmp_path: Path) -> Path:
    db = tmp_path / "m.db"
    put(db, HOSTILE, f"tea{HOSTILE}", session=f"s{HOSTILE}", content=f"line\n{HOSTILE}")
    return db


def test_facts_and_recent_escape_user_text(hostile_db: Path) -> None:
    db = str(hostile_db)
    code, out, _ = invoke("consolidate", "--db", db, "--pack", str(DEFAULT), "--now", NOW)
    assert code == 0
    assert out == (
        f"default user={SHOWN} agent=a1 episodes=1 add=1 update=0 delete=0 noop=0 "
        "rejected=0 gated=0\n"
    )
    code, out, _ = invoke("facts", "--db", db)
    assert code == 0
    [fact_line] = out.splitlines()[1:]
    fact_id = fact_line.split()[0]
    user, subject = "USER".ljust(len(SHOWN)), "SUBJECT".ljust(len(SHOWN))
    assert out.splitlines() == [
        f"ID{' ' * 32}{user}  AGENT  {subject}  PREDICATE  CONFIDENCE  OBJECT",
        f"{fact_id}  {SHOWN}  a1     {SHOWN}  likes      0.8         tea{SHOWN}",
    ]
    code, out, _ = invoke("recent", "--db", db, "--user", HOSTILE)
    assert code == 0
    assert_printable(out)
    [row] = out.splitlines()[1:]
    assert f"  s{SHOWN}  a1  " in row and row.endswith(f"  line\\n{SHOWN}")
    code, out, _ = invoke("explain", fact_id, "--db", db)
    assert code == 0
    assert_printable(out)
    assert f"  scope      user={SHOWN} agent=a1" in out.splitlines()
    code, out, _ = invoke("status", "--db", db, "--now", NOW)
    assert code == 0
    assert_printable(out)
    assert f"  {SHOWN}  a1  " in out.splitlines()[1]


def test_json_output_stays_exact(hostile_db: Path) -> None:
    code, out, _ = invoke("recent", "--db", str(hostile_db), "--user", HOSTILE, "--json")
    assert code == 0
    [episode] = [json.loads(line) for line in out.splitlines()]
    assert (episode["user"], episode["content"]) == (HOSTILE, f"line\n{HOSTILE}")


def test_paths_and_errors_are_escaped(tmp_path: Path) -> None:
    pack = tmp_path / "de\nfault.yaml"
    shutil.copyfile(DEFAULT, pack)
    code, out, _ = invoke("validate", str(pack))
    assert (code, out) == (0, f"ok: {printable(str(pack))}\n")
    missing = tmp_path / "no\x1bne.db"
    code, _, err = invoke("facts", "--db", str(missing))
    assert (code, err) == (1, f"error: {printable(str(missing))}: database file does not exist\n")


# --- read-only databases ----------------------------------------------------------------

AS_ROOT = os.geteuid() == 0


def as_reader() -> list[str]:
    """The argv prefix that makes chmod binding for the subprocess (root keeps ignoring it)."""
    return ["-c", DROP_DAC] if AS_ROOT else []


@dataclass
class ReadOnlyDb:
    db: Path
    what: str
    """What is made read-only: the ``file`` or its ``folder``."""
    fact_id: str
    expected: dict[str, str]
    """Reading commands' output, taken while the file was still writable."""

    @property
    def target(self) -> Path:
        return self.db if self.what == "file" else self.db.parent


READS = {
    "recent": ["recent", "--user", "alice"],
    "facts": ["facts"],
    "explain": ["explain", "{fact_id}"],
    "status --pack": ["status", "--now", NOW, "--pack", str(DEFAULT)],
}
WRITES = {
    "put": ["put", *SCOPE, "hi"],
    "consolidate": ["consolidate", "--pack", str(DEFAULT), "--now", NOW],
}
READ_ONLY = ["file", "folder"]


def read_only_db(folder: Path, what: str) -> ReadOnlyDb:
    """A consolidated database with a new episode, and what reading commands print."""
    folder.mkdir()
    db = folder / "m.db"
    put(db, "alice", "tea")
    consolidate(db)
    put(db, "bob", "jam")  # left for the writing commands to consolidate
    fact_id = json.loads(invoke("facts", "--db", str(db), "--json")[1])["id"]
    expected = {}
    for name, args in READS.items():
        code, out, err = invoke(*[a.format(fact_id=fact_id) for a in args], "--db", str(db))
        assert code == 0, err
        expected[name] = out
    assert sorted(p.name for p in folder.iterdir()) == ["m.db"]
    return ReadOnlyDb(db, what, fact_id, expected)


def add_read_only(batch: Batch, tmp: Path) -> dict[str, ReadOnlyDb]:
    """Make the databases (read-only later: their file, or their folder); add the commands."""
    made = {}
    for what in READ_ONLY:
        ro = made[what] = read_only_db(tmp / f"read-only-{what}", what)
        # the subprocesses really cannot write: opening the file (or a new one) is refused
        probe = ro.db if what == "file" else ro.db.parent / "new"
        batch.add(f"{what}: probe", [*as_reader(), "-c", f"open({str(probe)!r}, 'ab')"])
        for name, args in {**READS, **WRITES}.items():
            argv = [a.format(fact_id=ro.fact_id) for a in args]
            batch.cli(f"{what}: {name}", *argv, "--db", str(ro.db), prefix=as_reader())
    return made


@pytest.mark.parametrize("what", READ_ONLY)
def test_reading_commands_work_and_writing_ones_fail_on_a_read_only_db(
    runs: Runs, what: str
) -> None:
    ro = runs.read_only[what]
    probe = runs.outcomes[f"{what}: probe"]
    assert probe.code == 1 and "PermissionError" in probe.err
    for name, expected in ro.expected.items():
        assert runs.outcomes[f"{what}: {name}"] == Outcome(0, expected, ""), name
    why = {"file": "the file is not writable", "folder": "its folder is not writable"}[what]
    for name in WRITES:
        line = assert_one_error_line(runs.outcomes[f"{what}: {name}"])
        assert line == f"error: DB is read-only ({ro.db}: {why}): cannot write to it", name
    assert sorted(p.name for p in ro.db.parent.iterdir()) == ["m.db"]
    assert hashlib.sha256(ro.db.read_bytes()).hexdigest() == runs.before[ro.db]


# --- every subprocess of the module, run together ---------------------------------------


@dataclass
class Runs:
    tmp: Path
    outcomes: dict[str, Outcome]
    failed: dict[str, Path]
    """The broken files, by kind of failure."""
    read_only: dict[str, ReadOnlyDb]
    before: dict[Path, str]
    """Each file's SHA-256 before the commands ran."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Run every subprocess of the module in one batch (each costs an interpreter start)."""
    tmp = tmp_path_factory.mktemp("hostile")
    batch = Batch()
    failed = add_failed_opens(batch, tmp)
    add_non_utf8_argv(batch, tmp)
    read_only = add_read_only(batch, tmp)
    files = [*failed.values(), *(ro.db for ro in read_only.values())]
    before = {db: hashlib.sha256(db.read_bytes()).hexdigest() for db in files}
    modes = {ro.target: ro.target.stat().st_mode for ro in read_only.values()}
    try:
        for target, mode in modes.items():
            target.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        yield Runs(tmp, batch.run(), failed, read_only, before)
    finally:
        for target, mode in modes.items():
            target.chmod(mode)


def test_read_only_can_be_asked_for(tmp_path: Path) -> None:
    """``read_only=True`` opens a writable file without writing to it, for any user."""
    db = tmp_path / "m.db"
    put(db, "alice", "tea")
    consolidate(db)
    only_episodes = tmp_path / "e.db"
    put(only_episodes, "alice", "tea")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    episode = Episode(
        id="e2",
        content="x",
        timestamp=datetime(2026, 11, 22, tzinfo=UTC),
        user="alice",
        session="s",
        agent="a",
    )

    read_only = r"^DB is read-only \(.*m\.db: opened read-only\): cannot write to it$"

    async def scenario() -> None:
        async with Consolidator(db, [compile_file(DEFAULT)], read_only=True) as mem:
            assert mem.read_only_reason == "opened read-only"
            assert [f.object for f in await mem.facts()] == ["tea"]
            with pytest.raises(StoreError, match=read_only):
                await mem.record(episode)
            with pytest.raises(StoreError, match=read_only):
                await mem.tick(datetime(2026, 11, 23, 3, tzinfo=UTC))
        store = SQLiteFactStore(only_episodes)
        store.read_only = True
        with pytest.raises(StoreError, match=r"\): cannot create the missing table\(s\) .*facts"):
            await store.bootstrap()
        assert store._db is None

    asyncio.run(scenario())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.db", "m.db"]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_read_only_fact_store_of_another_schema_version_says_so(tmp_path: Path) -> None:
    """A read-only file cannot be migrated: another schema version is a clear error."""
    db = tmp_path / "m.db"
    put(db, "alice", "tea")
    consolidate(db)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE fact_store_meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()

    async def scenario() -> None:
        store = SQLiteFactStore(db)
        store.read_only = True
        with pytest.raises(StoreError, match=r"schema version 1 cannot be read while the file"):
            await store.bootstrap()
        assert store._db is None

    asyncio.run(scenario())
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
