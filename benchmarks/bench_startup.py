"""Start-up time of the command line: wall-clock time of whole CLI processes.

Each command runs as a fresh subprocess of this interpreter (the console script
``stargraph-mem`` beside it, or ``-m stargraph_mem.cli`` when there is none), several
times; the table gives the median and the fastest run. ``python -c "import pydantic"`` is
the floor any command that validates models pays. Give ``--tree`` more than once to
compare source trees (checkouts) in one run: each runs with ``PYTHONPATH=<tree>``, and
the runs alternate between trees so both see the same machine load.

``validate`` remembers the programs CLIPS built (in ``$XDG_CACHE_HOME/stargraph-mem``):
after the warm-up run, its timed runs validate an unchanged pack, which loads no CLIPS.
The benchmark gives every tree a cache directory of its own, emptied before each timed
run with ``--cold`` (every ``validate`` then builds its program in CLIPS).

Each timed run of a command is paired with a run of the floor just before it (floor,
command, floor, command…), and both its wall-clock and its CPU time (user + system, from
the child's resource usage) are kept: on a machine others load, the median of the per-pair
CPU ratios command ÷ floor is the figure to read (wall times wander with the load).

    python benchmarks/bench_startup.py --repeat 15
    python benchmarks/bench_startup.py --tree /tmp/wt-before --tree . --repeat 15
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Tree:
    """A source tree to measure, with its own scratch database."""

    path: Path
    db: Path
    cache: Path

    def env(self) -> dict[str, str]:
        """The environment that makes this tree's ``stargraph_mem`` the one imported (and
        its user cache this tree's own). Bytecode is written and read as an installed
        package's is (``PYTHONDONTWRITEBYTECODE`` dropped): otherwise every run compiles
        the tree's modules again, which no user pays."""
        env = {**os.environ, "PYTHONPATH": str(self.path), "XDG_CACHE_HOME": str(self.cache)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env


@dataclass
class Row:
    """One command in one tree, and its timings in seconds."""

    label: str
    tree: Tree | None
    argv: list[str]
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    """CPU time of each run ÷ that of the floor run paired with it."""
    clips: bool | None = None


def floor_env() -> dict[str, str]:
    """The floor's environment: bytecode as for the trees (see :meth:`Tree.env`)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cli_prefix() -> list[str]:
    """How to start the CLI: the console script beside this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("stargraph-mem")
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "stargraph_mem.cli"]


def run(argv: list[str], env: dict[str, str] | None, cwd: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system) of one run; a failing command stops the
    benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def loads_clips(argv: list[str], env: dict[str, str] | None, cwd: Path) -> bool:
    """Whether the command imports ``clips`` (read from ``-X importtime``)."""
    traced = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(traced, env=env, cwd=cwd, capture_output=True, check=False)
    return any(line.split("|")[-1].strip() == "clips" for line in done.stderr.decode().splitlines())


def check_tree(tree: Tree) -> None:
    """Refuse a tree whose ``stargraph_mem`` is not the one that gets imported."""
    code = "import stargraph_mem, sys; sys.stdout.write(stargraph_mem.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", code], env=tree.env(), cwd=tree.path, capture_output=True, check=True
    )
    loaded = Path(found.stdout.decode()).resolve()
    if not loaded.is_relative_to(tree.path):
        raise SystemExit(f"{tree.path}: imports {loaded} instead (PYTHONPATH not honoured?)")


def rows_for(trees: list[Tree], pack: str) -> list[Row]:
    """The measured commands: the pydantic floor, then each command in every tree."""
    cli = cli_prefix()
    rows = [Row('python -c "import pydantic"', None, [sys.executable, "-c", "import pydantic"])]
    commands = [
        ("stargraph-mem --help", ["--help"]),
        (f"stargraph-mem validate {pack}", ["validate", pack]),
        ("stargraph-mem facts --db <fresh db>", ["facts", "--db"]),
    ]
    for label, args in commands:
        for tree in trees:
            argv = [*cli, *args] + ([str(tree.db)] if args[-1] == "--db" else [])
            rows.append(Row(label, tree, argv))
    return rows


def measure(rows: list[Row], repeat: int, cold: bool = False) -> None:
    """Warm up every row once (bytecode caches, the fresh database's schema, the user
    cache), then time ``repeat`` rounds, each round running every command once right after
    a run of the floor (with ``cold``, the command's tree's user cache emptied before it)."""
    for row in rows:
        env = row.tree.env() if row.tree else floor_env()
        cwd = row.tree.path if row.tree else ROOT
        run(row.argv, env, cwd)
        if cold and row.tree is not None:
            shutil.rmtree(row.tree.cache, ignore_errors=True)
        row.clips = loads_clips(row.argv, env, cwd)  # as the timed runs find the cache
    floor, commands = rows[0], rows[1:]
    for _ in range(repeat):
        for row in commands:
            assert row.tree is not None
            floor_wall, floor_cpu = run(floor.argv, floor_env(), ROOT)
            floor.times.append(floor_wall)
            floor.cpu.append(floor_cpu)
            if cold:
                shutil.rmtree(row.tree.cache, ignore_errors=True)
            wall, cpu = run(row.argv, row.tree.env(), row.tree.path)
            row.times.append(wall)
            row.cpu.append(cpu)
            row.ratios.append(cpu / floor_cpu if floor_cpu > 0 else float("nan"))


def report(rows: list[Row], repeat: int) -> None:
    """A plain table: command, tree, median and fastest wall time (ms), median CPU time
    (ms), median CPU ratio to the paired floor run, whether clips was imported."""
    with open("/proc/loadavg", encoding="ascii") as handle:
        load = " ".join(handle.read().split()[:3])
    print(f"{repeat} pairs each; {sys.executable}; CLI: {' '.join(cli_prefix()[1:])}")
    print(f"load average at the end: {load}")
    head = f"{'command':<40} {'tree':<16} {'wall ms':>7} {'min ms':>6} {'cpu ms':>6} {'÷floor':>6}"
    print(f"{head}  clips")
    for row in rows:
        tree = str(row.tree.path) if row.tree else "-"
        median = statistics.median(row.times) * 1000
        fastest = min(row.times) * 1000
        cpu = statistics.median(row.cpu) * 1000
        ratio = f"{statistics.median(row.ratios):.2f}" if row.ratios else "1"
        clips = "yes" if row.clips else "no"
        print(
            f"{row.label:<40} {tree:<16} {median:>7.0f} {fastest:>6.0f} {cpu:>6.0f} "
            f"{ratio:>6}  {clips}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="source tree (repeatable)")
    parser.add_argument("--repeat", type=int, default=15, help="timed pairs per command")
    parser.add_argument("--pack", default="rules/default.yaml", help="pack, relative to a tree")
    parser.add_argument(
        "--cold", action="store_true", help="empty the user cache before every timed run"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = []
        for index, path in enumerate(args.tree or [ROOT]):
            db = Path(tmp) / f"tree{index}.db"
            db.touch()  # `facts` refuses a missing file; the warm-up run creates the schema
            trees.append(Tree(path.resolve(), db, Path(tmp) / f"cache{index}"))
        for tree in trees:
            check_tree(tree)
        rows = rows_for(trees, args.pack)
        measure(rows, args.repeat, args.cold)
        report(rows, args.repeat)


if __name__ == "__main__":
    main()
