"""Embedders: texts per second for the built-in hashing embedder and for all-MiniLM-L6-v2.

Run: ``python benchmarks/bench_embedding.py`` (``--help`` for sizes; ``--no-minilm`` when
the ``embeddings`` extra is not installed). Texts are 15-word sentences drawn from a
seeded vocabulary of ``--vocabulary`` made-up words. Figures, each from one run:

- hashing, one 15-word sentence per call, words already seen (the usual case): median µs;
- hashing, batches of ``--batch``, words already seen: texts/s;
- hashing, batches of ``--batch`` by a fresh embedder, every word new ("cold"): texts/s;
- MiniLM: seconds to import sentence-transformers and load the model (offline), then
  texts/s in batches of ``--batch`` on CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from stargraph_mem.embedding import HashingEmbedder, load_embedder

SYLLABLES = ["ka", "lo", "mi", "ren", "sto", "va", "qui", "der", "ple", "an", "ost", "ture"]


def sentences(count: int, vocabulary: int, rng: random.Random) -> list[str]:
    """``count`` sentences of 15 words from ``vocabulary`` made-up words."""
    words = [
        "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(vocabulary)
    ]
    return [" ".join(rng.choice(words) for _ in range(15)) for _ in range(count)]


def batched_rate(embed: object, texts: list[str], batch: int) -> float:
    """Texts per second through ``embed`` in batches of ``batch``."""
    t0 = time.perf_counter()
    for start in range(0, len(texts), batch):
        embed(texts[start : start + batch])  # type: ignore[operator]
    return len(texts) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=20_000, help="hashing texts per figure")
    parser.add_argument("--minilm-texts", type=int, default=1_024, help="MiniLM texts")
    parser.add_argument("--vocabulary", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--no-minilm", action="store_true", help="skip all-MiniLM-L6-v2")
    args = parser.parse_args()

    rng = random.Random(20261128)
    texts = sentences(args.texts, args.vocabulary, rng)
    rows: list[tuple[str, str]] = []

    hashing = HashingEmbedder()
    hashing.embed(texts)  # every word seen once
    singles = []
    for text in texts[:5_000]:
        t0 = time.perf_counter()
        hashing.embed([text])
        singles.append((time.perf_counter() - t0) * 1e6)
    rows.append(
        ("hashing, one 15-word sentence per call (median)", f"{statistics.median(singles):.1f} µs")
    )
    rate = batched_rate(hashing.embed, texts, args.batch)
    rows.append((f"hashing, batch {args.batch}, words seen", f"{rate:,.0f} texts/s"))
    cold_texts = sentences(args.texts, args.texts * 15, random.Random(7))
    rate = batched_rate(HashingEmbedder().embed, cold_texts, args.batch)
    rows.append((f"hashing, batch {args.batch}, every word new", f"{rate:,.0f} texts/s"))

    if not args.no_minilm:
        t0 = time.perf_counter()
        model = load_embedder("minilm")
        rows.append(("MiniLM: import + load (offline)", f"{time.perf_counter() - t0:.2f} s"))
        model.embed(texts[: args.batch])  # warm-up
        rate = batched_rate(model.embed, texts[: args.minilm_texts], args.batch)
        rows.append((f"MiniLM, batch {args.batch}, CPU", f"{rate:,.0f} texts/s"))

    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    width = max(len(label) for label, _ in rows)
    for label, figure in rows:
        print(f"{label:<{width}}  {figure}")


if __name__ == "__main__":
    main()
