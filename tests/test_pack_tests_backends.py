"""Every shipped pack's tests (``rules/*.yaml`` with ``rules/tests/``, as CI runs them with
``stargraph-mem test PACK --coverage``) pass on PostgreSQL too, each case in a fresh schema
of the test server that is dropped after it, with the same results (mismatches, traces,
coverage) as on SQLite files.

Like every PostgreSQL test of the suite these fail, never skip, when the server cannot be
reached (``STARGRAPH_TEST_PG``, see ``backends.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import PG_URL, _admin

from stargraph_mem.authoring import packtest
from stargraph_mem.authoring.packtest import case_lines, default_tests_path, run_tests
from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.errors import StoreConfigError

ROOT = Path(__file__).resolve().parents[1]
PACKS = sorted((ROOT / "rules").glob("*.yaml"))
BROKEN = ROOT / "tests" / "fixtures" / "authoring" / "broken_default.yaml"


async def _made_schemas(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Check the server is up (a failure, not a skip, when it is not), then record the
    URL of every case schema packtest makes from now on."""
    admin = await _admin()
    await admin.close()
    made: list[str] = []
    fresh = packtest.case_schema_url

    def recording(url: str) -> str:
        made.append(fresh(url))
        return made[-1]

    monkeypatch.setattr(packtest, "case_schema_url", recording)
    return made


async def _existing(urls: list[str]) -> list[str]:
    """The schemas of ``urls`` still on the server."""
    names = [url.rpartition("schema=")[2] for url in urls]
    admin = await _admin()
    async with admin:
        cursor = await admin.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ANY(%s)",
            (names,),
        )
        return [row[0] for row in await cursor.fetchall()]


def _failures(run: packtest.TestRun) -> list[str]:
    return [
        line
        for file in run.files
        for case in file.cases
        if not case.passed
        for line in case_lines(case)
    ]


def test_every_shipped_pack_has_tests() -> None:
    assert PACKS, "no packs under rules/"
    assert [p.name for p in PACKS if not default_tests_path(p).exists()] == []


@pytest.mark.parametrize("pack_path", PACKS, ids=[p.stem for p in PACKS])
async def test_pack_tests_pass_on_postgresql(
    pack_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await _made_schemas(monkeypatch)
    pack = compile_file(pack_path)
    tests = [default_tests_path(pack_path)]
    on_postgres = await run_tests(pack, tests, trace=True, postgres=PG_URL)
    assert _failures(on_postgres) == []
    assert on_postgres.coverage_ok, on_postgres.coverage.summary(on_postgres.minimum)
    assert len(made) == on_postgres.selected > 0  # one fresh schema per case
    assert await _existing(made) == []  # each dropped after its case
    on_sqlite = await run_tests(pack, tests, trace=True)
    assert on_postgres.document(coverage=True, trace=True) == on_sqlite.document(
        coverage=True, trace=True
    )


async def test_a_wrong_expectation_fails_on_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliberately broken copy of the default pack's tests fails the same way on both
    backends, and its schemas are dropped too."""
    made = await _made_schemas(monkeypatch)
    pack = compile_file(ROOT / "rules" / "default.yaml")
    on_postgres = await run_tests(pack, [BROKEN], postgres=PG_URL)
    assert (on_postgres.selected, on_postgres.failed) == (2, 1)
    assert any(line.startswith("FAIL  ") for line in _failures(on_postgres))
    assert await _existing(made) == []
    on_sqlite = await run_tests(pack, [BROKEN])
    assert on_postgres.document() == on_sqlite.document()


@pytest.mark.parametrize(
    "url",
    [f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema=mine", "memory.db", "sqlite:///tmp/m.db"],
    ids=str,
)
async def test_the_postgres_option_takes_a_server_url_without_schema(url: str) -> None:
    pack = compile_file(ROOT / "rules" / "default.yaml")
    with pytest.raises(StoreConfigError):
        await run_tests(pack, [default_tests_path(ROOT / "rules" / "default.yaml")], postgres=url)
