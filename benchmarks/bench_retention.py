"""Decay operations' cost: one nightly sweep's CLIPS run over N facts of one partition
(no store), updating every fact's confidence with ``ebbinghaus`` (the baseline), with
``ebbinghaus`` from the last access with a trust speed, and with ``retention`` in each
mode (layer half-life, trust speed, access boost). Variants are interleaved over
``--rounds`` rounds; the report gives each one's median and its ratio to the baseline.

    python benchmarks/bench_retention.py --facts 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.scope import Partition

T0 = datetime(2026, 1, 1, 3, tzinfo=UTC)
NOW = T0 + timedelta(days=10)
PARTITION = Partition("u", "a")

VARIANTS = {
    "ebbinghaus": "{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8}}",
    "ebbinghaus last access + trust": (
        "{ebbinghaus: {fact: f, lambda: 0.1, k: 0.8, since: last_access, untrusted_speed: 3}}"
    ),
    "retention l2": "{retention: {fact: f, mode: l2}}",
    "retention huber": "{retention: {fact: f, mode: huber}}",
    "retention elastic": "{retention: {fact: f, mode: elastic}}",
}


def pack(confidence: str) -> str:
    return f"""\
ir_version: 1
pack: nightly
version: "1"
rules:
  - id: decay
    cadence: {{cron: "0 3 * * *"}}
    when:
      - fact:
          as: f
          subject: {{bind: s}}
          predicate: {{bind: p}}
          object: {{bind: o}}
          valid_from: {{older_than: {{hours: 12}}}}
    emit:
      kind: update
      subject: "{{s}}"
      predicate: "{{p}}"
      object: "{{o}}"
      replaces: [f]
      sources: [f]
      confidence: {confidence}
"""


def facts(n: int) -> list[EngineFact]:
    """``n`` facts made at T0, a third read (up to 40 times), a third of trust 0.7."""
    out = []
    for k in range(n):
        fact = EngineFact(f"f{k}", f"s{k}", "p", "o", 0.8, to_us(T0), to_us(T0), "seed", (f"e{k}",))
        if k % 3 == 1:
            fact = replace(fact, access_count=k % 40, last_access_us=to_us(T0 + timedelta(days=2)))
        if k % 3 == 2:
            fact = replace(fact, trust=0.7)
        out.append(fact)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    given = facts(args.facts)
    runtimes = {name: PackRuntime(compile_text(pack(conf))) for name, conf in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(args.rounds):
            for name, runtime in runtimes.items():
                t0 = time.perf_counter()
                out = runtime.run_pass(partition=PARTITION, now=NOW, episodes=[], facts=given)
                times[name].append(time.perf_counter() - t0)
                assert len(out.deltas) == args.facts
    finally:
        for runtime in runtimes.values():
            runtime.close()
    base = statistics.median(times["ebbinghaus"])
    for name, seen in times.items():
        median = statistics.median(seen)
        print(f"{name:32} median {median:7.3f} s  ratio {median / base:5.2f}")


if __name__ == "__main__":
    main()
