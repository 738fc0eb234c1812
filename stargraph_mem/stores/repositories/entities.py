"""Entities and the graph reads recall makes, written once for every backend.

``entities`` holds the declared entities of each partition (canonical name, its folded
form, type, aliases as JSON, times); ``entity_aliases`` maps each folded name (canonical
name and aliases alike) of a partition to its one entity, so an alias can never name two
entities of a partition and a lookup is one indexed read.

Facts name entities too: the subjects and objects of a partition's facts are read (folded
in Python, since SQL has no accent folding on both backends) into a map from folded name to
fact ids, kept per partition. Facts are never removed and never change their subject or
object, so the map only grows: a read adds the facts above the highest rowid it has seen
(one indexed range), and whether a fact is still current is asked of the ``facts`` table by
id (its unique index). No index on ``facts`` is added: the write path is unchanged.

The graph reads: :meth:`Entities.temporal_neighbours` walks a session's episodes in time
order (the scope index ``(scope_key, ts_us, seq)``: a session of a partition is one scope
key), :meth:`Entities.facts_of_entities` and :meth:`Entities.lineage_neighbours` follow
fact names and lineage.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, ClassVar, Final, Protocol

import orjson

from stargraph_mem.errors import EntityError, EntityNotFoundError
from stargraph_mem.model.base import unicode_problem
from stargraph_mem.model.entities import (
    ENTITY_TYPES,
    MAX_ALIASES,
    MAX_NAME_CHARS,
    Entity,
    EntityProfile,
    EntityType,
    LineageNeighbours,
    TimelineEvent,
)
from stargraph_mem.model.facts import Fact
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.repositories.access import Access
from stargraph_mem.stores.repositories.fact_rows import fact_from_row
from stargraph_mem.stores.repositories.fact_sql import FACT_COLUMNS
from stargraph_mem.stores.repositories.search import fold
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "ENTITY_TABLES",
    "MAX_DEPTH",
    "MAX_LIMIT",
    "MAX_QUERY_WORDS",
    "MAX_SEEDS",
    "NGRAM_WORDS",
    "POSTGRES_ENTITY_TABLES",
    "SQLITE_ENTITY_TABLES",
    "Entities",
    "NameCache",
    "fold_name",
]

ENTITY_TABLES: Final = ("entities", "entity_aliases")
NGRAM_WORDS: Final = 4
"""The longest name (in words) :meth:`Entities.mentioned` finds in a query."""
MAX_QUERY_WORDS: Final = 256
"""The most words a query given to :meth:`Entities.mentioned` may hold."""
MAX_SEEDS: Final = 256
"""The most seed episodes (or facts) one graph read starts from."""
MAX_DEPTH: Final = 16
"""The most steps :meth:`Entities.temporal_neighbours` walks from a seed."""
MAX_LIMIT: Final = 1000
"""The largest ``limit`` of a read."""
MAX_KEY_CHARS: Final = 4096
_LOCK: Final = "entities"
_CACHED_PARTITIONS: Final = 64
_EDGE_PUNCTUATION: Final = re.compile(r"^[^\w]+|[^\w]+$")


def _tables(key: str, integer: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE IF NOT EXISTS entities (
        id {key} PRIMARY KEY,
        partition_key {key} NOT NULL,
        canonical_name TEXT NOT NULL,
        folded {key} NOT NULL,
        type {key} NOT NULL CHECK (type IN ({", ".join(f"'{t}'" for t in ENTITY_TYPES)})),
        aliases TEXT NOT NULL,
        created_us {integer} NOT NULL,
        updated_us {integer} NOT NULL,
        UNIQUE (partition_key, folded)
    )""",
        f"""CREATE TABLE IF NOT EXISTS entity_aliases (
        partition_key {key} NOT NULL,
        folded {key} NOT NULL,
        entity_id {key} NOT NULL,
        alias TEXT NOT NULL,
        PRIMARY KEY (partition_key, folded)
    )""",
        "CREATE INDEX IF NOT EXISTS entity_aliases_entity ON entity_aliases (entity_id)",
    )


SQLITE_ENTITY_TABLES: Final = _tables("TEXT", "INTEGER")
POSTGRES_ENTITY_TABLES: Final = _tables('TEXT COLLATE "C"', "BIGINT")


@lru_cache(maxsize=65536)
def fold_name(text: str) -> str:
    """``text`` compared as a name: case folded, accents removed, whitespace collapsed
    (``"  Zoë   Smith"`` → ``"zoe smith"``)."""
    return " ".join(fold(text).split())


def _bad(message: str, **context: Any) -> EntityError:
    return EntityError(message, **context)


def check_name(value: object, what: str = "entity name") -> str:
    """``value`` stripped, when it can name an entity; :class:`EntityError` otherwise."""
    if not isinstance(value, str):
        raise _bad(f"{what} must be a string (got {type(value).__name__})", value=repr(value))
    if "\x00" in value:
        raise _bad(f"{what} {value[:80]!r} contains a NUL character", value=value[:80])
    problem = unicode_problem(value)
    if problem is not None:
        raise _bad(f"{what} {problem}")
    if len(value) > MAX_NAME_CHARS:
        raise _bad(
            f"{what} is {len(value)} characters long; at most {MAX_NAME_CHARS} are allowed",
            value=value[:80],
        )
    name = " ".join(value.split())
    if not fold_name(name):
        raise _bad(f"{what} {value!r} is empty (only whitespace)", value=value)
    return name


def check_partition(value: object) -> str:
    """The partition key of ``value`` (a :class:`Partition` or its key)."""
    if isinstance(value, Partition):
        return value.key
    if not isinstance(value, str) or not value:
        raise _bad(f"partition key must be a non-empty string (got {value!r})")
    if "\x00" in value or unicode_problem(value) is not None or len(value) > MAX_KEY_CHARS:
        raise _bad(f"partition key {value[:80]!r} is not a valid key")
    return value


def check_type(value: object) -> EntityType:
    if value not in ENTITY_TYPES:
        raise _bad(
            f"entity type {value!r} is not one of {', '.join(ENTITY_TYPES)}", value=repr(value)
        )
    return value  # type: ignore[return-value]


def check_limit(value: object, what: str = "limit") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise _bad(f"{what} must be an integer from 1 to {MAX_LIMIT} (got {value!r})")
    return value


def _check_ids(values: object, what: str) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise _bad(f"{what} must be a list of ids (got {values!r})")
    ids = list(dict.fromkeys(values))
    if len(ids) > MAX_SEEDS:
        raise _bad(f"{len(ids)} {what}; at most {MAX_SEEDS} are allowed")
    for value in ids:
        if not isinstance(value, str) or "\x00" in value or unicode_problem(value) is not None:
            raise _bad(f"{what}: {value!r} is not a valid id")
    return ids


def _time_us(value: object, what: str) -> int | None:
    """``value`` (µs since the epoch, or an aware datetime) as µs; ``None`` stays."""
    if value is None:
        return None
    if isinstance(value, datetime):
        try:
            return to_us(value, what)
        except ValueError as exc:
            raise _bad(f"{what}: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{what} must be microseconds (int) or an aware datetime (got {value!r})")
    return value


def entity_id(partition_key: str, folded: str) -> str:
    """A declared entity's id: a hash of its partition and folded canonical name."""
    digest = hashlib.sha256(f"{partition_key}\x00{folded}".encode()).hexdigest()
    return f"ent_{digest[:32]}"


def _implicit_id(partition_key: str, folded: str) -> str:
    digest = hashlib.sha256(f"{partition_key}\x00{folded}".encode()).hexdigest()
    return f"name_{digest[:32]}"


@dataclass(slots=True)
class FactNames:
    """The names a partition's facts carry: folded name → raw name → the ids of the facts
    (current or closed) with that subject or object. Facts are never removed and never
    change their subject or object, so the map only grows, with the facts above
    ``last_rowid``."""

    last_rowid: int = 0
    names: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    by_episode: dict[str, list[str]] = field(default_factory=dict)
    """Source episode id → the facts derived from it (their lineage)."""

    def add(self, fact_id: str, names: Sequence[str], sources: Sequence[str]) -> None:
        for raw in dict.fromkeys(names):
            if raw:
                self.names.setdefault(fold_name(raw), {}).setdefault(raw, []).append(fact_id)
        for source in dict.fromkeys(sources):
            self.by_episode.setdefault(source, []).append(fact_id)

    def ids(self, folded: Iterable[str]) -> list[str]:
        """The ids of the facts naming one of ``folded``."""
        out: dict[str, None] = {}
        for key in folded:
            for ids in self.names.get(key, {}).values():
                out.update(dict.fromkeys(ids))
        return list(out)


class NameCache:
    """Fact names per partition, for the :data:`_CACHED_PARTITIONS` most recently used."""

    __slots__ = ("_maps",)

    def __init__(self) -> None:
        self._maps: OrderedDict[str, FactNames] = OrderedDict()

    def of(self, key: str) -> FactNames:
        """The partition's map (a new, empty one the first time)."""
        found = self._maps.get(key)
        if found is None:
            found = self._maps[key] = FactNames()
            while len(self._maps) > _CACHED_PARTITIONS:
                self._maps.popitem(last=False)
        self._maps.move_to_end(key)
        return found


class EntityAccess(Access, Protocol):
    """A backend's store with the entity repository mixed in."""

    _fact_names: NameCache


_ENTITY_COLUMNS: Final = "id, partition_key, canonical_name, type, aliases, created_us, updated_us"


@dataclass(frozen=True, slots=True)
class _Statements:
    by_folded: str
    """With ``{in}``: one ``?`` holding the folded names."""
    entity_by_id: str
    insert_entity: str
    update_entity: str
    insert_alias: str
    last_rowid: str
    new_facts: str
    current_in: str
    facts_in: str
    current_ranked: str
    lineage_of: str
    episodes_in: str
    seeds: str
    episode_partitions: str


@cache
def _statements(dialect: Dialect) -> _Statements:
    sql = dialect.sql
    in_ids = dialect.in_ids()
    return _Statements(
        by_folded=sql(
            f"SELECT a.folded, e.{_ENTITY_COLUMNS.replace(', ', ', e.')} FROM entity_aliases a "
            f"JOIN entities e ON e.id = a.entity_id WHERE a.partition_key = ? AND a.folded {in_ids}"
        ),
        entity_by_id=sql(f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE id = ?"),
        insert_entity=sql(
            f"INSERT INTO entities ({_ENTITY_COLUMNS.replace('type,', 'folded, type,')}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        update_entity=sql("UPDATE entities SET type = ?, aliases = ?, updated_us = ? WHERE id = ?"),
        insert_alias=sql(
            "INSERT INTO entity_aliases (partition_key, folded, entity_id, alias) "
            "VALUES (?, ?, ?, ?)"
        ),
        last_rowid=sql("SELECT coalesce(max(rowid), 0) FROM facts"),
        new_facts=sql(
            "SELECT f.rowid, f.id, f.subject, f.object, l.source_episode_ids FROM facts f "
            "LEFT JOIN lineage l ON l.rowid = f.rowid WHERE f.rowid > ? AND f.partition_key = ? "
            "ORDER BY f.rowid"
        ),
        current_in=sql(f"SELECT id FROM facts WHERE id {in_ids} AND valid_until_us IS NULL"),
        facts_in=sql(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE id {in_ids} "
            "ORDER BY valid_from_us DESC, rowid DESC LIMIT ?"
        ),
        current_ranked=sql(
            f"SELECT id FROM facts WHERE id {in_ids} AND valid_until_us IS NULL "
            "ORDER BY confidence DESC, valid_from_us DESC, id LIMIT ?"
        ),
        lineage_of=sql(
            "SELECT f.id, l.source_episode_ids, f.partition_key FROM facts f "
            f"JOIN lineage l ON l.rowid = f.rowid WHERE f.id {in_ids}"
        ),
        # by id alone (the unique index); the partition is checked on the rows read
        episodes_in=sql(
            f"SELECT id, ts_us, content, partition_key FROM episodes WHERE id {in_ids}"
        ),
        seeds=sql(
            f"SELECT id, scope_key, ts_us, seq, partition_key FROM episodes WHERE id {in_ids}"
        ),
        episode_partitions=sql(f"SELECT id, partition_key FROM episodes WHERE id {in_ids}"),
    )


def _entity_from_row(row: Sequence[Any]) -> Entity:
    return Entity(
        id=str(row[0]),
        partition_key=str(row[1]),
        canonical_name=str(row[2]),
        type=row[3],
        aliases=tuple(orjson.loads(row[4])),
        created_at=from_us(int(row[5])),
        updated_at=from_us(int(row[6])),
    )


def _ngrams(text: str) -> dict[str, int]:
    """Each run of 1 to :data:`NGRAM_WORDS` whitespace-separated words of ``text`` (folded),
    with and without the punctuation at its two ends, by the position of its first word."""
    words = fold(text).split()
    if len(words) > MAX_QUERY_WORDS:
        raise _bad(f"query has {len(words)} words; at most {MAX_QUERY_WORDS} are allowed")
    found: dict[str, int] = {}
    for start in range(len(words)):
        for end in range(start + 1, min(start + NGRAM_WORDS, len(words)) + 1):
            gram = " ".join(words[start:end])
            for candidate in (gram, _EDGE_PUNCTUATION.sub("", gram)):
                if candidate and candidate not in found:
                    found[candidate] = start
    return found


class Entities:
    """The entity registry and the graph reads of recall (mixed into a backend's store,
    which supplies :class:`~stargraph_mem.stores.repositories.access.Access` and a
    :class:`NameCache` as ``_fact_names``)."""

    __slots__ = ()

    entity_tables: ClassVar[tuple[str, ...]] = ENTITY_TABLES

    # --- the registry -----------------------------------------------------------------------

    async def define(
        self: EntityAccess,
        partition_key: str | Partition,
        name: str,
        *,
        aliases: Sequence[str] = (),
        type: EntityType | None = None,
        at: datetime | None = None,
    ) -> Entity:
        """Declare the entity ``name`` of a partition, or add to it: an existing entity (one
        of whose names folds as ``name`` does) gains the new ``aliases`` (and ``type``, when
        given); a new one gets ``type`` (default ``concept``). ``at`` (aware; default now)
        stamps the change. An alias that already names another entity of the partition
        raises :class:`EntityError` and changes nothing."""
        key = check_partition(partition_key)
        canonical = check_name(name)
        kind = None if type is None else check_type(type)
        if isinstance(aliases, str) or not isinstance(aliases, Sequence):
            raise _bad(f"aliases of {canonical!r} must be a list of names (got {aliases!r})")
        if len(aliases) > MAX_ALIASES:
            raise _bad(f"{canonical!r} has {len(aliases)} aliases; at most {MAX_ALIASES}")
        wanted = [check_name(alias, f"alias of {canonical!r}") for alias in aliases]
        now = self._now_us() if at is None else _time_us(at, "entity time")
        assert now is not None
        folded = fold_name(canonical)
        sql = _statements(self.dialect)
        async with self._writing(_LOCK) as db:
            forms = [folded, *(fold_name(alias) for alias in wanted)]
            rows = await db.fetch(sql.by_folded, (key, self.dialect.ids(forms)))
            owners = {str(row[0]): _entity_from_row(row[1:]) for row in rows}
            target = owners.get(folded)
            if target is None:
                target_id = entity_id(key, folded)
                found = await db.fetch(sql.entity_by_id, (target_id,))
                target = _entity_from_row(found[0]) if found else None
            own_id = entity_id(key, folded) if target is None else target.id
            for alias in wanted:
                owner = owners.get(fold_name(alias))
                if owner is not None and owner.id != own_id:
                    raise _bad(
                        f"alias {alias!r} of {canonical!r} already names the entity "
                        f"{owner.canonical_name!r} in partition {key!r}: an alias names one "
                        "entity of a partition",
                        alias=alias,
                        entity=owner.canonical_name,
                        partition_key=key,
                    )
            if target is None:
                names = _new_aliases(canonical, [], wanted)
                await db.execute(
                    sql.insert_entity,
                    (
                        own_id,
                        key,
                        canonical,
                        folded,
                        kind or "concept",
                        orjson.dumps(names).decode(),
                        now,
                        now,
                    ),
                )
                await db.executemany(
                    sql.insert_alias,
                    [(key, fold_name(n), own_id, n) for n in [canonical, *names]],
                )
                created = await db.fetch(sql.entity_by_id, (own_id,))
                return _entity_from_row(created[0])
            added = _new_aliases(target.canonical_name, list(target.aliases), wanted)
            new_kind = kind or target.type
            if len(target.aliases) + len(added) > MAX_ALIASES:
                raise _bad(f"{target.canonical_name!r} would have more than {MAX_ALIASES} aliases")
            if added or new_kind != target.type:
                names = [*target.aliases, *added]
                await db.execute(
                    sql.update_entity, (new_kind, orjson.dumps(names).decode(), now, target.id)
                )
                await db.executemany(
                    sql.insert_alias, [(key, fold_name(n), target.id, n) for n in added]
                )
            updated = await db.fetch(sql.entity_by_id, (target.id,))
            return _entity_from_row(updated[0])

    async def resolve(
        self: EntityAccess, partition_key: str | Partition, text: str
    ) -> Entity | None:
        """The entity ``text`` names in a partition (its canonical name or an alias, folded);
        else the implicit entity of a current fact whose subject or object it names; else
        ``None``."""
        key = check_partition(partition_key)
        folded = fold_name(check_name(text))
        async with self._reading() as db:
            return await Entities._resolve(self, db, key, folded)

    get = resolve

    async def entities(self: EntityAccess, partition_key: str | Partition) -> list[Entity]:
        """The declared entities of a partition, by canonical name (folded)."""
        key = check_partition(partition_key)
        sql = self.dialect.sql(
            f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE partition_key = ? ORDER BY folded"
        )
        async with self._reading() as db:
            return [_entity_from_row(row) for row in await db.fetch(sql, (key,))]

    async def mentioned(
        self: EntityAccess, partition_key: str | Partition, query_text: str
    ) -> list[Entity]:
        """The entities whose name or an alias occurs in ``query_text`` as whole words
        (folded; names of up to :data:`NGRAM_WORDS` words), declared ones and those current
        facts name, in the order they first occur; each once."""
        key = check_partition(partition_key)
        if not isinstance(query_text, str):
            raise _bad(f"query must be a string (got {type(query_text).__name__})")
        if "\x00" in query_text or unicode_problem(query_text) is not None:
            raise _bad("query is not valid text (NUL or a lone surrogate)")
        grams = _ngrams(query_text)
        if not grams:
            return []
        async with self._reading() as db:
            declared = await Entities._declared(self, db, key, list(grams))
            implicit = await Entities._implicit(
                self, db, key, [g for g in grams if g not in declared]
            )
        hits: list[tuple[int, int, Entity]] = []
        seen: set[str] = set()
        for gram, position in grams.items():
            entity = declared.get(gram) or implicit.get(gram)
            if entity is not None and entity.id not in seen:
                seen.add(entity.id)
                hits.append((position, -len(gram), entity))
        return [entity for _, _, entity in sorted(hits, key=lambda h: (h[0], h[1]))]

    async def profile(
        self: EntityAccess, partition_key: str | Partition, name: str, *, limit: int = 50
    ) -> EntityProfile:
        """The entity ``name`` names, its aliases, its current facts and its timeline (the
        ``limit`` newest of its facts, current or closed, with their source episodes);
        :class:`EntityNotFoundError` when nothing of the partition has that name."""
        key = check_partition(partition_key)
        limit = check_limit(limit)
        folded = fold_name(check_name(name))
        sql = _statements(self.dialect)
        facts: list[Fact] = []
        rows: list[Sequence[Any]] = []
        sources: dict[str, list[str]] = {}
        episodes: list[Sequence[Any]] = []
        async with self._reading() as db:
            entity = await Entities._resolve(self, db, key, folded)
            if entity is None:
                raise EntityNotFoundError(
                    f"no entity named {name!r} in partition {key!r}", name=name, partition_key=key
                )
            names = await Entities._names(self, db, key)
            named = names.ids({fold_name(n) for n in entity.names})
            if named:
                rows = await db.fetch(sql.facts_in, (self.dialect.ids(named), limit + 1))
                facts = [fact_from_row(row) for row in rows[:limit]]
                fact_ids = [fact.id for fact in facts]
                for row in await db.fetch(sql.lineage_of, (self.dialect.ids(fact_ids),)):
                    sources[str(row[0])] = [str(e) for e in orjson.loads(row[1] or "[]")]
                wanted = list(dict.fromkeys(e for f in fact_ids for e in sources.get(f, [])))
                if wanted:
                    found = await db.fetch(sql.episodes_in, (self.dialect.ids(wanted),))
                    episodes = [row[:3] for row in found if row[3] == key]
        return EntityProfile(
            entity=entity,
            aliases=entity.aliases,
            facts=tuple(f for f in facts if f.is_current),
            timeline=tuple(_timeline(facts, sources, episodes)),
            truncated=len(rows) > limit,
        )

    # --- graph reads ------------------------------------------------------------------------

    async def facts_of_entities(
        self: EntityAccess,
        partition_key: str | Partition,
        names: Sequence[str],
        *,
        limit: int = 100,
    ) -> list[str]:
        """Ids of the current facts whose subject or object is one of the entities ``names``
        name (each with all its names, folded), most confident first; names of no entity are
        skipped."""
        key = check_partition(partition_key)
        limit = check_limit(limit)
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise _bad(f"names must be a list of entity names (got {names!r})")
        if len(names) > MAX_SEEDS:
            raise _bad(f"{len(names)} entity names; at most {MAX_SEEDS} are allowed")
        folded = [fold_name(check_name(n)) for n in names]
        async with self._reading() as db:
            declared = await Entities._declared(self, db, key, folded)
            forms: set[str] = set()
            for one in folded:
                entity = declared.get(one)
                forms.update({fold_name(n) for n in entity.names} if entity else {one})
            named = (await Entities._names(self, db, key)).ids(forms)
            if not named:
                return []
            statement = _statements(self.dialect).current_ranked
            rows = await db.fetch(statement, (self.dialect.ids(named), limit))
        return [str(row[0]) for row in rows]

    async def temporal_neighbours(
        self: EntityAccess,
        partition_key: str | Partition,
        episode_ids: Sequence[str],
        *,
        depth: int = 2,
        after_us: int | datetime | None = None,
        before_us: int | datetime | None = None,
    ) -> list[tuple[str, int]]:
        """The episodes at most ``depth`` steps before or after each seed of ``episode_ids``
        in the seed's own session (episodes in order of time, then seq), with the distance in
        steps (the smallest over the seeds), nearest first, then by time. Seeds themselves,
        and seeds of other partitions or unknown, are left out. ``after_us`` (inclusive)
        and ``before_us`` (exclusive), µs or aware datetimes, keep only the episodes of that
        window: steps are counted over those."""
        key = check_partition(partition_key)
        seeds = _check_ids(episode_ids, "seed episode ids")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise _bad(f"depth must be an integer from 1 to {MAX_DEPTH} (got {depth!r})")
        after = _time_us(after_us, "after_us")
        before = _time_us(before_us, "before_us")
        if not seeds:
            return []
        sql = _statements(self.dialect)
        window = ""
        extra: list[int] = []
        if after is not None:
            window += " AND ts_us >= ?"
            extra.append(after)
        if before is not None:
            window += " AND ts_us < ?"
            extra.append(before)
        async with self._reading() as db:
            found = [
                row[:4]
                for row in await db.fetch(sql.seeds, (self.dialect.ids(seeds),))
                if row[4] == key
            ]
            if not found:
                return []
            branches: list[str] = []
            params: list[Any] = []
            for index, (_, scope, ts_us, seq) in enumerate(found):
                for direction, compare, order in (("b", "<", "DESC"), ("a", ">", "ASC")):
                    branches.append(
                        f"SELECT * FROM (SELECT {index} AS i, '{direction}' AS d, id, ts_us, seq "
                        "FROM episodes WHERE scope_key = ? "
                        f"AND (ts_us, seq) {compare} (?, ?){window} "
                        f"ORDER BY ts_us {order}, seq {order} LIMIT ?) {direction}{index}"
                    )
                    params += [scope, ts_us, seq, *extra, depth]
            rows = await db.fetch(self.dialect.sql(" UNION ALL ".join(branches)), params)
        seed_ids = {str(row[0]) for row in found}
        walks: dict[tuple[int, str], list[tuple[int, int, str]]] = {}
        for i, d, eid, ts_us, seq in rows:
            walks.setdefault((int(i), str(d)), []).append((int(ts_us), int(seq), str(eid)))
        best: dict[str, tuple[int, int, int]] = {}
        for (_, d), walk in walks.items():
            for step, (ts_us, seq, eid) in enumerate(sorted(walk, reverse=d == "b"), 1):
                known = best.get(eid)
                if eid not in seed_ids and (known is None or step < known[0]):
                    best[eid] = (step, ts_us, seq)
        ordered = sorted(best.items(), key=lambda item: item[1])
        return [(eid, place[0]) for eid, place in ordered]

    async def lineage_neighbours(
        self: EntityAccess,
        fact_ids: Sequence[str],
        *,
        episode_ids: Sequence[str] = (),
        current_only: bool = True,
    ) -> LineageNeighbours:
        """Both directions of lineage: the source episodes of ``fact_ids``, and the facts
        (other than those given; current ones only unless ``current_only`` is false) derived
        from those episodes or from ``episode_ids``, each within its own partition."""
        facts = _check_ids(fact_ids, "fact ids")
        given = _check_ids(episode_ids, "episode ids")
        sql = _statements(self.dialect)
        async with self._reading() as db:
            sources: list[str] = []
            by_partition: dict[str, set[str]] = {}
            if facts:
                for _, source_ids, partition in await db.fetch(
                    sql.lineage_of, (self.dialect.ids(facts),)
                ):
                    for eid in orjson.loads(source_ids or "[]"):
                        sources.append(str(eid))
                        by_partition.setdefault(str(partition), set()).add(str(eid))
            if given:
                for eid, partition in await db.fetch(
                    sql.episode_partitions, (self.dialect.ids(given),)
                ):
                    by_partition.setdefault(str(partition), set()).add(str(eid))
            derived: list[str] = []
            for partition, wanted in by_partition.items():
                names = await Entities._names(self, db, partition)
                derived += [f for e in sorted(wanted) for f in names.by_episode.get(e, ())]
            if current_only:
                current = await Entities._current(self, db, derived)
                derived = [f for f in derived if f in current]
        skip = set(facts)
        return LineageNeighbours(
            episode_ids=tuple(dict.fromkeys(sources)),
            fact_ids=tuple(dict.fromkeys(f for f in sorted(derived) if f not in skip)),
        )

    # --- helpers ----------------------------------------------------------------------------

    async def _declared(
        self: EntityAccess, db: Conn, key: str, folded: Sequence[str]
    ) -> dict[str, Entity]:
        """Declared entities by each of ``folded`` that names one."""
        if not folded:
            return {}
        sql = _statements(self.dialect)
        rows = await db.fetch(sql.by_folded, (key, self.dialect.ids(list(folded))))
        return {str(row[0]): _entity_from_row(row[1:]) for row in rows}

    async def _names(self: EntityAccess, db: Conn, key: str) -> FactNames:
        """The partition's fact names, with the facts added since the last read."""
        sql = _statements(self.dialect)
        names = self._fact_names.of(key)
        last = int(await db.scalar(sql.last_rowid) or 0)
        if last > names.last_rowid:
            for rowid, fact_id, subject, obj, sources in await db.fetch(
                sql.new_facts, (names.last_rowid, key)
            ):
                linked = [str(e) for e in orjson.loads(sources)] if sources else []
                names.add(str(fact_id), (str(subject), str(obj)), linked)
                last = max(last, int(rowid))
            names.last_rowid = last
        return names

    async def _current(self: EntityAccess, db: Conn, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that are current facts."""
        if not ids:
            return set()
        rows = await db.fetch(_statements(self.dialect).current_in, (self.dialect.ids(ids),))
        return {str(row[0]) for row in rows}

    async def _implicit(
        self: EntityAccess, db: Conn, key: str, grams: Sequence[str]
    ) -> dict[str, Entity]:
        """The implicit entity of each of ``grams`` (folded) a current fact names."""
        names = await Entities._names(self, db, key)
        current = await Entities._current(self, db, names.ids(grams))
        out: dict[str, Entity] = {}
        for gram in grams:
            raw = [n for n, ids in names.names.get(gram, {}).items() if current.intersection(ids)]
            if raw:
                out[gram] = Entity(
                    id=_implicit_id(key, gram),
                    partition_key=key,
                    canonical_name=min(raw),
                    declared=False,
                )
        return out

    async def _resolve(self: EntityAccess, db: Conn, key: str, folded: str) -> Entity | None:
        found = await Entities._declared(self, db, key, [folded])
        if folded in found:
            return found[folded]
        return (await Entities._implicit(self, db, key, [folded])).get(folded)


def _new_aliases(canonical: str, have: list[str], wanted: list[str]) -> list[str]:
    """The aliases of ``wanted`` none of the entity's names folds to, in order."""
    seen = {fold_name(n) for n in [canonical, *have]}
    out: list[str] = []
    for alias in wanted:
        key = fold_name(alias)
        if key not in seen:
            seen.add(key)
            out.append(alias)
    return out


def _timeline(
    facts: Sequence[Fact], sources: dict[str, list[str]], episodes: Sequence[Sequence[Any]]
) -> list[TimelineEvent]:
    events: list[tuple[int, int, str, TimelineEvent]] = []
    for fact in facts:
        text = f"{fact.subject} {fact.predicate} {fact.object}"
        added = TimelineEvent(
            at=fact.valid_from, kind="fact_added", fact_id=fact.id, status="current", text=text
        )
        events.append((to_us(fact.valid_from), 1, fact.id, added))
        if fact.valid_until is not None:
            closed = TimelineEvent(
                at=fact.valid_until,
                kind="fact_closed",
                fact_id=fact.id,
                status=fact.status,
                text=text,
            )
            events.append((to_us(fact.valid_until), 2, fact.id, closed))
    for eid, ts_us, content in episodes:
        of = tuple(f.id for f in facts if str(eid) in sources.get(f.id, ()))
        event = TimelineEvent(
            at=from_us(int(ts_us)),
            kind="episode",
            episode_id=str(eid),
            text=str(content),
            fact_ids=of,
        )
        events.append((int(ts_us), 0, str(eid), event))
    return [event for *_, event in sorted(events, key=lambda e: e[:3])]
