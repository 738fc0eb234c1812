"""Episodes for a season of nights: many users, paraphrased repeats, moves, new facts.

Writes one JSON-lines file per night (``night-00.jsonl`` is older history, 45 days before
the first night; ``night-01.jsonl`` … are the nights), for ``stargraph-mem ingest``. Every
episode carries the fields of the three specification packs (``rules/dream_cycle.yaml``,
``rules/graph_memory.yaml``, ``rules/engram.yaml``): ``subject``, ``predicate``,
``object``, ``category``, ``importance`` and ``confidence``. The same seed gives the same
files. ``examples/season.sh`` runs the packs over them nightly through the command line.

    python examples/season.py --users 50 --nights 30 --out season/
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

FIRST_NIGHT = datetime(2026, 9, 1, tzinfo=UTC)
"""The day of the first night's episodes (consolidated at 03:00 the next day)."""
HISTORY_DAYS = 45
"""How long before the first night the imported history was said."""

LIKES = {
    "green tea": [
        "green tea",
        "Green tea!",
        "green tea, please",
        "hot green tea",
        "a cup of green tea",
    ],
    "jazz": ["jazz", "Jazz!", "jazz music", "live jazz", "jazz, mostly"],
    "hiking": ["hiking", "Hiking.", "hiking trips", "mountain hiking", "hiking on weekends"],
    "sushi": ["sushi", "Sushi!", "fresh sushi", "sushi, please", "sushi rolls"],
    "chess": ["chess", "Chess.", "chess games", "online chess", "chess, daily"],
}
"""A liking and the ways a user says it again (case, punctuation, a word or two more)."""
CITIES = ["paris", "rome", "berlin", "lisbon", "oslo", "madrid", "vienna", "prague"]
TOOLS = ["vim", "emacs", "vscode", "pycharm"]


def episode(
    user: str, n: int, at: datetime, text: str, predicate: str, obj: str, **more: object
) -> dict[str, object]:
    meta: dict[str, object] = {"subject": user, "predicate": predicate, "object": obj}
    meta.update(more)
    return {
        "id": f"{user}-{n:05d}",
        "content": text,
        "timestamp": at.isoformat(),
        "user": user,
        "session": f"{user}-{at.date().isoformat()}",
        "agent": "assistant",
        "metadata": meta,
    }


class User:
    """One user's state: what they like, where they live, what they use."""

    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name
        self.rng = rng
        self.likes = rng.sample(sorted(LIKES), 2)
        self.city = rng.choice(CITIES)
        self.tool = rng.choice(TOOLS)
        self.n = 0
        self.moves_on = rng.randrange(5, 31)
        """The night this user moves to another city (a newer statement contradicting an
        old belief)."""

    def say(
        self, at: datetime, text: str, predicate: str, obj: str, **more: object
    ) -> dict[str, object]:
        self.n += 1
        return episode(self.name, self.n, at, text, predicate, obj, **more)

    def history(self, day: datetime) -> list[dict[str, object]]:
        """What the imported history says: the likings, the city, the tool."""
        at = day + timedelta(hours=9)
        out = [
            self.say(
                at + timedelta(minutes=i),
                f"I like {x}",
                "likes",
                x,
                category="preference",
                importance=0.4,
                confidence=0.9,
            )
            for i, x in enumerate(self.likes)
        ]
        out.append(
            self.say(
                at + timedelta(minutes=5),
                f"I live in {self.city.title()}",
                "lives_in",
                self.city,
                category="fact",
                importance=0.9,
                confidence=0.95,
            )
        )
        out.append(
            self.say(
                at + timedelta(minutes=6),
                f"I code in {self.tool}",
                "uses",
                self.tool,
                category="fact",
                importance=0.2,
                confidence=0.35,
            )
        )
        return out

    def night(self, k: int, day: datetime) -> list[dict[str, object]]:
        """Night ``k``'s episodes: paraphrased repeats of a liking, now and then a move, a
        passing remark, a commitment."""
        rng = self.rng
        at = day + timedelta(hours=10, minutes=rng.randrange(0, 600))
        out: list[dict[str, object]] = []
        liked = rng.choice(self.likes)
        for j, said in enumerate(rng.sample(LIKES[liked], rng.randrange(1, 4))):
            out.append(
                self.say(
                    at + timedelta(minutes=j),
                    f"I like {said}",
                    "likes",
                    said,
                    category="preference",
                    importance=0.3,
                    confidence=0.8,
                )
            )
        if k == self.moves_on:
            self.city = rng.choice([c for c in CITIES if c != self.city])
            out.append(
                self.say(
                    at + timedelta(minutes=10),
                    f"I moved to {self.city.title()}",
                    "lives_in",
                    self.city,
                    category="fact",
                    importance=0.9,
                    confidence=0.95,
                )
            )
        if rng.random() < 0.3:
            remark = rng.choice(["the weather", "a film", "a book", "the news"])
            out.append(
                self.say(
                    at + timedelta(minutes=20),
                    f"We talked about {remark}",
                    "talked_about",
                    remark,
                    category="moment",
                    importance=0.1,
                    confidence=0.3,
                )
            )
        if rng.random() < 0.1:
            out.append(
                self.say(
                    at + timedelta(minutes=30),
                    "I will send the report on Friday",
                    "commitment",
                    "send the report on friday",
                    category="commitment",
                    importance=0.6,
                    confidence=0.9,
                )
            )
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    users = [User(f"user{u:03d}", random.Random(rng.random())) for u in range(args.users)]
    args.out.mkdir(parents=True, exist_ok=True)
    history = FIRST_NIGHT - timedelta(days=HISTORY_DAYS)
    nights = [(0, history)] + [
        (k, FIRST_NIGHT + timedelta(days=k - 1)) for k in range(1, args.nights + 1)
    ]
    for k, day in nights:
        lines = [e for user in users for e in (user.history(day) if k == 0 else user.night(k, day))]
        lines.sort(key=lambda e: (str(e["timestamp"]), str(e["id"])))
        with (args.out / f"night-{k:02d}.jsonl").open("w") as out:
            out.writelines(json.dumps(e) + "\n" for e in lines)
        # the pass of night k runs at 03:00 the next day
        print(f"night-{k:02d}.jsonl {(day + timedelta(days=1, hours=3)).isoformat()} {len(lines)}")


if __name__ == "__main__":
    main()
