"""Compile time of rule packs and CLIPS load time of the compiled program.

Run: ``python benchmarks/bench_compile.py`` (``--help`` for sizes and repeats). Packs of
N varied rules are generated in memory (episode conditions of every type, facts, 'not',
'earlier', 'count', every emit kind). Figures are medians over ``--repeats`` runs:

* compile: ``compile_text`` end to end (YAML load + IR validation + checks + CLIPS text +
  the build check in a scratch CLIPS environment), split into its stages;
* load: building the compiled text in a fresh CLIPS environment (what a runtime pays).
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from stargraph_mem.compiler.generator import Generator
from stargraph_mem.compiler.pack import build_environment, compile_text
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.ir.checks import analyze
from stargraph_mem.ir.loader import load_pack_text

FIELDS = {
    "subject": "string",
    "predicate": "string",
    "object": "string",
    "weight": "integer",
    "score": "number",
    "urgent": "boolean",
    "due": "timestamp",
    "tags": "list",
}


@dataclass(frozen=True)
class Row:
    """One row of the results table (milliseconds)."""

    rules: int
    stage: str
    median_ms: float
    best_ms: float


def rule(i: int) -> dict[str, Any]:
    """Rule ``i`` of a generated pack: one of eight shapes, with varied literals."""
    spo = {"subject": {"bind": "s"}, "predicate": {"bind": "p"}, "object": {"bind": "o"}}
    add = {"kind": "add", "subject": "{s}", "predicate": "{p}", "object": "{o}"}
    shape = i % 8
    base: dict[str, Any] = {"id": f"r{i}", "priority": (i * 7) % 50}
    if shape == 0:
        when: list[Any] = [{"episode": {**spo, "weight": {"gt": i, "le": i + 100}}}]
        emit: dict[str, Any] = {**add, "reason": f"weight of {{s}} #{i}"}
    elif shape == 1:
        when = [
            {"episode": {**spo, "tags": {"contains": f"t{i}"}}},
            {"fact": {"as": "f", "subject": {"var": "s"}, "predicate": {"var": "p"}}},
        ]
        emit = {**add, "kind": "update", "replaces": ["f"], "confidence": 0.6}
    elif shape == 2:
        when = [
            {"episode": {**spo, "urgent": {"in": [True]}, "weight": {"ne": i}}},
            {"not": {"subject": {"var": "s"}, "object": {"var": "o"}}},
        ]
        emit = {**add, "payload": {"n": f"{i}"}}
    elif shape == 3:
        when = [
            {"episode": {"subject": {"bind": "s"}, "content": {"prefix": f"note {i}"}}},
            {"fact": {"as": "f", "subject": {"var": "s"}, "confidence": {"lt": 0.3}}},
        ]
        emit = {"kind": "delete", "replaces": ["f"], "sources": ["f"]}
    elif shape == 4:
        when = [
            {"episode": {**spo, "score": {"ge": 0.01 * (i % 100)}}},
            {"earlier": {"as": "prev", "keys": ["subject", "predicate"], "weight": {"ne": i}}},
        ]
        emit = {**add, "kind": "update", "replaces": ["prev"], "sources": ["prev"]}
    elif shape == 5:
        when = [
            {"episode": {**spo, "session": {"not_in": [f"s{i}"]}}},
            {
                "count": {
                    "as": "n",
                    "keys": ["subject", "object"],
                    "distinct": "session",
                    "at_least": 2 + i % 3,
                    "grows": True,
                }
            },
        ]
        emit = {**add, "confidence": {"var": "n", "base": 0.2, "per": 0.1}, "sources": ["n"]}
    elif shape == 6:
        when = [
            {"episode": {"subject": {"bind": "s"}, "due": {"older_than": {"days": i % 30}}}},
            {"exists": {"subject": {"var": "s"}, "predicate": f"p{i}"}},
        ]
        emit = {"kind": "noop", "reason": "due {s}"}
    else:
        when = [
            {
                "fact": {
                    "as": "f",
                    "predicate": f"p{i}",
                    "valid_from": {"older_than": {"days": 30}},
                }
            }
        ]
        emit = {"kind": "delete", "replaces": ["f"], "sources": ["f"]}
    return {**base, "when": when, "emit": emit}


def pack_text(rules: int) -> str:
    """YAML text of a generated pack with ``rules`` rules."""
    pack = {
        "ir_version": 1,
        "pack": f"bench_{rules}",
        "version": "1",
        "fields": FIELDS,
        "rules": [rule(i) for i in range(rules)],
    }
    return yaml.safe_dump(pack, sort_keys=False)


def measure(action: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and best wall time of ``action`` in milliseconds (a full collection before
    each run, so one run's garbage does not land on the next)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times)


def bench(rules: int, repeats: int) -> list[Row]:
    """Every stage of compiling (and loading) a pack of ``rules`` rules."""
    text = pack_text(rules)
    compiled = compile_text(text)
    pack, source = load_pack_text(text)
    analysis = analyze(pack, source)
    assert not analysis.issues, analysis.issues[0].format()
    stages: list[tuple[str, Callable[[], object]]] = [
        ("compile + runtime loaded", lambda: PackRuntime(compile_text(text)).close()),
        ("compile (end to end)", lambda: compile_text(text)),
        ("  yaml + IR validation", lambda: load_pack_text(text)),
        ("  semantic checks", lambda: analyze(pack, source)),
        ("  CLIPS text", lambda: Generator(analyze(pack, source)).program()),
        ("load in fresh CLIPS env", lambda: build_environment(compiled.clips)),
    ]
    rows = []
    for name, action in stages:
        median, best = measure(action, repeats)
        rows.append(Row(rules, name, median, best))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 200, 1000])
    parser.add_argument("--repeats", type=int, default=7, help="runs per figure (median)")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}")
    print(f"{'rules':>6}  {'stage':<26} {'median ms':>10} {'best ms':>9}")
    for size in args.sizes:
        text = pack_text(size)
        print(f"{size:>6}  {'(pack: ' + str(len(text)) + ' chars)':<26}")
        compiled_chars = len(compile_text(text).clips)
        for row in bench(size, args.repeats):
            print(f"{row.rules:>6}  {row.stage:<26} {row.median_ms:>10.2f} {row.best_ms:>9.2f}")
        print(f"{size:>6}  {'(CLIPS text: ' + str(compiled_chars) + ' chars)':<26}")


if __name__ == "__main__":
    main()
