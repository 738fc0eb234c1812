"""The workers' path against ``consolidate``, through the CLI, on SQLite and PostgreSQL.

The same episodes (``--partitions`` users with ``--each`` episodes each, as
``bench_workers.py`` writes them) are ingested into a fresh memory for every run
(untimed), then one command consolidates them with ``rules/default.yaml`` (its nightly cron
is due for every partition at ``--now``): ``stargraph-mem consolidate --now T`` or
``stargraph-mem run --once --now T`` (what a worker runs). Each is timed as a process:
wall seconds, its CPU seconds (user + system) and, for PostgreSQL on this machine, the
server's CPU seconds meanwhile. ``--rounds`` rounds, each running every (backend,
command) once, the order of the commands swapped every round; medians and the ratios the
targets name: ``run --once`` ÷ ``consolidate`` on each backend, PostgreSQL ÷ SQLite for
each command. Every run is checked: each partition has a fact, no delta applied twice.

    python benchmarks/bench_cli_paths.py                       # 40,000 episodes, 2 rounds
    python benchmarks/bench_cli_paths.py --partitions 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_workers import CLI, PACK, check, drop, measured, write_episodes

NOW = "2026-01-02T00:00:00+00:00"
COMMANDS = {
    "consolidate": ["consolidate", "--now", NOW],
    "run --once": ["run", "--once", "--now", NOW],
}


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-c", CLI, *args], check=True, capture_output=True)


def one(location: str, episodes: Path, command: str, partitions: int) -> tuple[float, float, float]:
    """Ingest (untimed), then time ``command``: wall, its CPU and the server's CPU seconds
    (0 when no local server was measured)."""
    cli("ingest", "--db", location, str(episodes))
    wall, client, server = measured(
        lambda: cli(*COMMANDS[command], "--db", location, "--pack", str(PACK))
    )
    asyncio.run(check(location, partitions))
    return wall, client, server or 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--each", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only.")
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    total = args.partitions * args.each
    print(f"{total:,} episodes over {args.partitions:,} partitions; load average {load}")
    backends = ["sqlite"] + ([] if args.no_postgres else ["postgresql"])
    found: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        episodes = Path(tmp) / "episodes.jsonl"
        write_episodes(episodes, args.partitions, args.each)
        for r in range(args.rounds):
            order = list(COMMANDS) if r % 2 == 0 else list(reversed(COMMANDS))
            for backend in backends:
                for command in order:
                    schema = f"bench_{uuid.uuid4().hex[:12]}"
                    location = (
                        str(Path(tmp) / f"{r}-{command.replace(' ', '')}.db")
                        if backend == "sqlite"
                        else f"{args.url}?schema={schema}"
                    )
                    try:
                        got = one(location, episodes, command, args.partitions)
                    finally:
                        if backend == "postgresql":
                            drop(args.url, schema)
                    found.setdefault((backend, command), []).append(got)
                    wall, client, server = got
                    print(
                        f"round {r + 1} {backend:<10} {command:<12} {wall:8.2f} s wall, "
                        f"{client:7.2f} s CPU" + (f", server {server:.2f} s" if server else ""),
                        flush=True,
                    )
    med = {key: statistics.median(w for w, _, _ in runs) for key, runs in found.items()}
    cpu = {key: statistics.median(c for _, c, _ in runs) for key, runs in found.items()}
    for backend in backends:
        a, b = med[(backend, "run --once")], med[(backend, "consolidate")]
        print(
            f"{backend}: run --once {a:.2f} s, consolidate {b:.2f} s (medians): ratio "
            f"{a / b:.2f} wall, {cpu[(backend, 'run --once')] / cpu[(backend, 'consolidate')]:.2f}"
            " CPU"
        )
    if "postgresql" in backends:
        for command in COMMANDS:
            a, b = med[("postgresql", command)], med[("sqlite", command)]
            print(f"{command}: PostgreSQL {a:.2f} s, SQLite {b:.2f} s: ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
