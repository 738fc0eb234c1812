"""Consolidation of many small partitions against the same episodes in one partition,
through the CLI: ``stargraph-mem ingest FILE`` then ``stargraph-mem consolidate --pack
rules/default.yaml`` on a fresh database, each a fresh process.

Each size is run as N episodes over P partitions and as the same N episodes in one
partition (same contents, same keys per partition), interleaved, so the ratio shows what
a partition costs beyond its episodes. ``--python`` runs the same commands with other
interpreters (e.g. an older checkout's venv) in the same run, for before/after figures:

    python benchmarks/bench_partitions.py --sizes 40000:2000 200000:10000 \\
        --python /tmp/old-batch/.venv/bin/python
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "rules" / "default.yaml"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = "2026-02-01T00:00:00+00:00"
CLI = "from stargraph_mem.cli import main; main()"


def write_episodes(path: Path, total: int, partitions: int) -> None:
    """``total`` episodes over ``partitions`` users of agent ``rag``, as JSON lines."""
    each = total // partitions
    with path.open("wb") as out:
        for p in range(partitions):
            user = f"user{p}" if partitions > 1 else "user0"
            for n in range(each):
                k = p * each + n if partitions == 1 else n
                out.write(
                    orjson.dumps(
                        {
                            "id": f"p{p}-e{n}",
                            "content": f"{user} fact {k}",
                            "timestamp": (T0 + timedelta(seconds=k)).isoformat(),
                            "user": user,
                            "session": f"s{k % 3}",
                            "agent": "rag",
                            "metadata": {
                                "subject": f"{user}-{k // 20}" if partitions == 1 else user,
                                "predicate": f"k{k % 7}",
                                "object": f"v{k}",
                            },
                        }
                    )
                    + b"\n"
                )


def timed(python: str, args: list[str], cwd: Path) -> float:
    """Seconds of one CLI process. It runs outside the checkout, so ``python`` imports its
    own installed package, not this folder's."""
    t0 = time.perf_counter()
    subprocess.run([python, "-c", CLI, *args], check=True, capture_output=True, cwd=cwd)
    return time.perf_counter() - t0


def measure(python: str, episodes: Path, tmp: Path) -> tuple[float, float]:
    """Seconds of ``ingest`` and of ``consolidate`` on a fresh database (a new folder:
    no write-ahead log of an earlier run is left beside it)."""
    db = Path(tempfile.mkdtemp(dir=tmp)) / "m.db"
    ingest = timed(python, ["ingest", str(episodes), "--db", str(db)], tmp)
    consolidate = timed(
        python, ["consolidate", "--pack", str(PACK), "--db", str(db), "--now", NOW], tmp
    )
    return ingest, consolidate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", nargs="+", default=["40000:2000"], help="EPISODES:PARTITIONS pairs"
    )
    parser.add_argument("--python", nargs="*", default=[], help="other interpreters to run")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    pythons = [sys.executable, *args.python]
    print(f"{'python':<40} {'episodes':>9} {'partitions':>10} {'ingest s':>9} {'consol. s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            total, parts = (int(x) for x in size.split(":"))
            files = {}
            for p in (parts, 1):
                files[p] = Path(tmp) / f"e{total}-{p}.jsonl"
                write_episodes(files[p], total, p)
            for _ in range(args.repeat):
                results: dict[tuple[str, int], float] = {}
                for python in pythons:
                    for p in (parts, 1):
                        ingest, consolidate = measure(python, files[p], Path(tmp))
                        results[(python, p)] = ingest + consolidate
                        print(
                            f"{python[-40:]:<40} {total:>9,} {p:>10,} {ingest:>9.2f} "
                            f"{consolidate:>9.2f}",
                            flush=True,
                        )
                for python in pythons:
                    ratio = results[(python, parts)] / results[(python, 1)]
                    print(f"{python[-40:]:<40} ingest+consolidate ratio {parts:,}/1: {ratio:.2f}")


if __name__ == "__main__":
    main()
