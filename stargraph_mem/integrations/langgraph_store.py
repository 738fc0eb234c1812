"""A LangGraph ``BaseStore`` backed by stargraph_mem (``pip install 'stargraph_mem[graph]'``).

:class:`StargraphStore` keeps LangGraph's long-term memory (``store.put``, ``get``,
``search``, ``delete``, ``list_namespaces``) as episodes and facts:

- **Namespaces are scopes.** ``(user, agent)`` is the fact partition ``(user, agent)``;
  ``(user,)`` is the user's own items, kept under the reserved agent
  :data:`USER_AGENT` (it has a period, which no LangGraph label may have, so no
  two-label namespace can reach it). A namespace (or search prefix, or match path) of
  more labels, an empty label, a period, NUL, a lone surrogate or a label longer than
  256 characters is refused with :class:`NamespaceError`: never truncated.
- **A key is the fact's subject.** Each put records one episode (``store_op``,
  ``store_key``, ``store_value``: the value's JSON) and the shipped pack
  (``packs/langgraph_store.yaml``, cadence ``every: 1``) decides it at once: the key's
  first put adds the fact ``(key, langgraph.item, …)``, a later put supersedes it, a put
  of ``None`` (``delete``) closes it. Nothing is overwritten: older values stay in the
  history (``as_of``, ``explain``), and ``get`` returns the current fact's value. A
  current fact that holds no item value (as after an MCP ``correct_fact``) is not an
  item: ``get`` of its key raises :class:`ItemReadError`, a search leaves it out.
- **Values are JSON objects**, kept as their JSON text in the fact's ``payload["value"]``
  (pack payloads are text) and returned equal: ``dict``, ``list``, ``str``, finite
  ``float``, 64-bit ``int``, ``bool`` and ``None``, nothing else (a tuple would come back
  as a list), nested at most :data:`~stargraph_mem.model.base.MAX_JSON_DEPTH` (64)
  levels: anything else is refused with :class:`ItemValueError`, naming where. So is a
  put whose fact the pack's rules would find too large (the value twice, as object and
  payload, over ``fact_bytes``; the key and predicate over what ``KEY_BYTES`` leaves
  beside the partition key), measured as the engine measures it, before any write.
- **Timestamps come from the facts**: ``updated_at`` is the current fact's
  ``valid_from``, ``created_at`` the ``valid_from`` of the fact that first created the
  item (after its last delete).
- **Search** with a ``query`` ranks the items under the prefix with the project's fact
  search (``Consolidator.search``); without one it lists them, newest first; ``filter``
  applies to the value (equality, nested objects, ``$eq`` … ``$lte``; an object with an
  operator has nothing but operators).
- **Semantic search** with LangGraph's ``index={"dims", "embed", "fields"}`` (read with
  LangGraph's own ``ensure_embeddings``, ``tokenize_path`` and ``get_text_at_path``):
  a query ranks the items by cosine to their field texts, as LangGraph's stores do. A
  put's ``index`` (``False``, or field paths) is recorded in its episode's metadata
  (``store_index``), so a reopened store honours it. The vectors are computed by the
  first search that needs an item and kept in the process, keyed by the item's fact id
  (each put makes a new fact, so a kept vector never describes an old value); a reopened
  store embeds again, and a deterministic ``embed`` gives it the same ranking.

Batches run their operations in order (a ``get`` after a ``put`` in one batch sees it),
after every operation of the batch was checked: a refused operation refuses the whole
batch before anything is written.

The store lives on one event loop. ``async with StargraphStore.from_path(db)`` opens it
on the running loop (sync ``batch`` calls from other threads are handed to that loop,
as LangGraph's async stores do; on the loop's own thread they raise
:class:`StoreStateError` instead of deadlocking). ``with StargraphStore.from_path(db)``
opens it on a private event loop in a daemon thread, stopped and joined on exit; async
callers are handed to that loop too.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar

import numpy as np
import numpy.typing as npt
import orjson
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.embedding import SCORE_DECIMALS, Embedder
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.collect import Plan
from stargraph_mem.engine.passes.outputs import Stamp
from stargraph_mem.errors import CorruptRowError, SearchError, StargraphMemError
from stargraph_mem.ir.models import EPISODE_BUILTINS
from stargraph_mem.model.base import MAX_JSON_DEPTH, json_depth_exceeded, unicode_problem
from stargraph_mem.model.deltas import kind_creates
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import Fact, FactPattern
from stargraph_mem.model.limits import KEY_BYTES, Limits, utf8_size
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.scope import partition_key, scope_key
from stargraph_mem.stores.sqlite.search import MAX_LIMIT

__all__ = [
    "DEFAULT_SESSION",
    "ITEM_PREDICATE",
    "PACK_NAME",
    "PACK_PATH",
    "USER_AGENT",
    "FilterError",
    "IndexConfigError",
    "ItemKeyError",
    "ItemReadError",
    "ItemValueError",
    "ItemWriteError",
    "LangGraphStoreError",
    "NamespaceError",
    "StargraphStore",
    "StoreStateError",
    "item_value",
    "namespace_of",
    "scope_of",
    "store_pack",
]

PACK_PATH: Final = Path(__file__).with_name("packs") / "langgraph_store.yaml"
"""The pack the store needs (a Consolidator given to :class:`StargraphStore` must run it)."""
PACK_NAME: Final = "langgraph_store"
ITEM_PREDICATE: Final = "langgraph.item"
"""The predicate of every item fact (its subject is the key)."""
USER_AGENT: Final = "langgraph.user"
"""The agent of one-label namespaces ``(user,)``: no LangGraph label has a period."""
DEFAULT_SESSION: Final = "langgraph"
"""The session of the episodes the store records (namespaces have no session)."""
SOURCE_NODE: Final = "langgraph_store"
MAX_LABEL_CHARS: Final = 256
"""Longest namespace label: the longest user or agent a scope takes."""
_INT_RANGE: Final = (-(2**63), 2**64 - 1)
"""Integers JSON text keeps exactly here (orjson's range)."""
_DEPTH_SHOWN: Final = 4
"""Steps of a too deeply nested value's path an error names before ``…``."""
_OPERATORS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")

_KEY_SHOWN: Final = 60
"""Characters of a key an error about its size shows before ``…``."""

logger = logging.getLogger(__name__)
T = TypeVar("T")


# --- errors ---------------------------------------------------------------------------


class LangGraphStoreError(StargraphMemError):
    """Root of the errors :class:`StargraphStore` raises on purpose."""


class NamespaceError(LangGraphStoreError, InvalidNamespaceError):
    """A namespace that maps to no scope: not one or two labels, or a label a scope refuses
    (also LangGraph's ``InvalidNamespaceError``); ``namespace`` and ``reason`` say which."""


class ItemKeyError(LangGraphStoreError, ValueError):
    """A key that cannot be a fact's subject: not a string, empty, NUL, a lone surrogate."""


class ItemValueError(LangGraphStoreError, ValueError):
    """A value that would not come back equal: not a JSON object of plain JSON values, or
    nested deeper than 64 levels (``where`` names the part, as ``value['a'][0]``), or a
    put (or delete) whose episode or fact would be over a size limit (``limit`` names it:
    ``fact_bytes``, ``metadata_bytes``, ``content_bytes`` or ``KEY_BYTES``, the last for a
    key too long for the fact's index row)."""


class ItemReadError(LangGraphStoreError):
    """The key's current fact holds no item value (its ``payload["value"]`` is not a
    JSON object's text), as after an MCP ``correct_fact`` replaced the fact the pack made:
    ``get`` names the fact (``fact_id``) rather than guess a value; a search leaves such a
    fact out. A put (or delete) of the key replaces (or closes) it."""


class FilterError(LangGraphStoreError, ValueError):
    """A search filter this store cannot apply: an unknown ``$`` operator, or an operator
    object that also has a plain key (``{"$gt": 0, "foo": 5}``); ``operator`` names it."""


class IndexConfigError(LangGraphStoreError, ValueError):
    """A semantic ``index`` the store cannot use: no ``dims`` or ``embed``, a field path
    that is not text, a put's ``index`` that is neither ``False`` nor a list of paths, or
    an embedding whose length is not ``dims`` (``where`` names which)."""


class StoreStateError(LangGraphStoreError, RuntimeError):
    """The store is not open (or open already), its Consolidator lacks the store's pack, or
    a synchronous call came from the event loop the store runs on (it would deadlock)."""


class ItemWriteError(LangGraphStoreError):
    """The pack rejected a put or delete (the episode is kept; the reason is given)."""


# --- namespaces, keys, values ---------------------------------------------------------


def _a(value: object) -> str:
    """``an int``, ``a tuple``: the type of ``value`` with its article."""
    name = type(value).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def _label_problem(label: object) -> str | None:
    if not isinstance(label, str):
        return f"is {_a(label)}, not a string"
    if not label:
        return "is empty"
    if "." in label:
        return "contains a period (LangGraph labels cannot)"
    if "\x00" in label:
        return "contains NUL"
    if len(label) > MAX_LABEL_CHARS:
        return f"is longer than {MAX_LABEL_CHARS} characters"
    return unicode_problem(label)


def _check_labels(namespace: object, what: str, *, wildcards: bool = False) -> tuple[str, ...]:
    """``namespace`` as a tuple of at most two valid labels, else :class:`NamespaceError`."""
    if not isinstance(namespace, tuple | list):
        raise NamespaceError(
            f"{what} must be a tuple of labels, not {_a(namespace)}",
            namespace=namespace,
            reason="not a tuple",
        )
    labels = tuple(namespace)
    if len(labels) > 2:
        raise NamespaceError(
            f"{what} {labels!r} has {len(labels)} labels: this store's namespaces are "
            "(user,) or (user, agent), so it is refused rather than cut short",
            namespace=labels,
            reason="too long",
        )
    for index, label in enumerate(labels):
        problem = None if wildcards and label == "*" else _label_problem(label)
        if problem is not None:
            raise NamespaceError(
                f"{what} {labels!r}: label {index} ({label!r}) {problem}",
                namespace=labels,
                reason=problem,
            )
    return labels


def scope_of(namespace: tuple[str, ...]) -> tuple[str, str]:
    """The ``(user, agent)`` scope of an item namespace: ``(user,)`` → ``(user,
    USER_AGENT)``, ``(user, agent)`` → itself; :class:`NamespaceError` otherwise."""
    labels = _check_labels(namespace, "namespace")
    if not labels:
        raise NamespaceError(
            "namespace () is empty: items live in (user,) or (user, agent)",
            namespace=labels,
            reason="empty",
        )
    return (labels[0], USER_AGENT) if len(labels) == 1 else (labels[0], labels[1])


def namespace_of(user: str, agent: str) -> tuple[str, ...] | None:
    """The namespace of a ``(user, agent)`` scope, or ``None`` when no namespace maps to it
    (a label LangGraph refuses, as an agent with a period other than :data:`USER_AGENT`)."""
    if _label_problem(user) is not None:
        return None
    if agent == USER_AGENT:
        return (user,)
    return None if _label_problem(agent) is not None else (user, agent)


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise ItemKeyError(f"key must be a string, not {_a(key)}", key=key)
    if not key:
        raise ItemKeyError("key must not be empty (it is the item's fact subject)", key=key)
    if "\x00" in key:
        raise ItemKeyError(f"key {key!r} contains NUL", key=key)
    problem = unicode_problem(key)
    if problem is not None:
        raise ItemKeyError(f"key {key!r} {problem}", key=key)
    return key


def _bad_value(where: str, problem: str) -> ItemValueError:
    return ItemValueError(
        f"{where} {problem}: values are JSON objects of dict, list, str, finite float, "
        "64-bit int, bool and None",
        where=where,
    )


def _check_json(value: object, where: str) -> None:
    """Raise :class:`ItemValueError` for anything JSON text would not give back equal."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        problem = unicode_problem(value)
        if problem is not None:
            raise _bad_value(where, problem)
    elif isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise _bad_value(where, f"is an integer outside the 64-bit range ({value})")
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _bad_value(where, f"is not a finite number ({value})")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _bad_value(where, f"has {_a(key)} key {key!r}")
            problem = unicode_problem(key)
            if problem is not None:
                raise _bad_value(f"{where}: key {key!r}", problem)
            _check_json(item, f"{where}[{key!r}]")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
    else:
        raise _bad_value(where, f"is {_a(value)}")


def _steps(path: Sequence[object]) -> str:
    """``['a'][0][0][0]…``: the first steps of a path into nested JSON (the rest repeat
    the nesting)."""
    shown = "".join(f"[{step!r}]" for step in path[:_DEPTH_SHOWN])
    return shown + ("…" if len(path) > _DEPTH_SHOWN else "")


def _too_deep(path: Sequence[object]) -> ItemValueError:
    """The refusal of a value nested deeper than :data:`MAX_JSON_DEPTH` at ``path``."""
    return _bad_value(f"value{_steps(path)}", f"nests deeper than {MAX_JSON_DEPTH} levels")


def encode_value(value: object) -> str:
    """The JSON text an item's value is kept as (key order kept); :class:`ItemValueError`
    when it is not a JSON object that would come back equal, or nests deeper than
    :data:`MAX_JSON_DEPTH` levels (checked first, without recursion)."""
    if not isinstance(value, Mapping):
        raise _bad_value("value", f"is {_a(value)}, not a dict")
    plain = dict(value)
    path = json_depth_exceeded(plain)
    if path is not None:
        raise _too_deep(path)
    _check_json(plain, "value")
    return orjson.dumps(plain).decode()


def _held_value(fact: Fact) -> dict[str, Any] | None:
    """The value an item fact holds, or ``None`` when its ``payload["value"]`` is not a
    JSON object's text (a fact the store's pack did not make)."""
    text = fact.payload.get("value")
    if not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def item_value(fact: Fact) -> dict[str, Any]:
    """The value an item fact holds (its ``payload["value"]`` JSON text, decoded);
    :class:`~stargraph_mem.errors.CorruptRowError` for a fact that holds none."""
    value = _held_value(fact)
    if value is None:
        raise CorruptRowError(
            f"fact {fact.id}: payload['value'] is not a JSON object's text (not an item fact)",
            table="facts",
            row_id=fact.id,
        )
    return value


# --- filters and namespace matching ---------------------------------------------------


def _same(left: object, right: object) -> bool:
    """JSON equality: ``true`` is not ``1``; objects and arrays compare deeply."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            _same(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and left == right


def _compare(item: object, operator: str, operand: object) -> bool:
    if operator == "$eq":
        return _same(item, operand)
    if operator == "$ne":
        return not _same(item, operand)
    numbers = (int, float)
    if isinstance(item, bool) or isinstance(operand, bool):
        return False
    if not (
        (isinstance(item, numbers) and isinstance(operand, numbers))
        or (isinstance(item, str) and isinstance(operand, str))
    ):
        return False
    a: Any = item
    b: Any = operand
    if operator == "$gt":
        return bool(a > b)
    if operator == "$gte":
        return bool(a >= b)
    if operator == "$lt":
        return bool(a < b)
    if operator == "$lte":
        return bool(a <= b)
    raise FilterError(f"unknown operator {operator!r}", operator=operator)  # checked before


def _matches(item: object, condition: object) -> bool:
    """One filter condition on one field: operators, nested objects (each given key must
    match), or JSON equality."""
    if isinstance(condition, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in condition):
            return all(_compare(item, str(op), operand) for op, operand in condition.items())
        return isinstance(item, dict) and all(
            _matches(item.get(k), v) for k, v in condition.items()
        )
    return _same(item, condition)


def _check_filter(filter_: object) -> dict[str, Any] | None:
    """A search filter: a dict of value field → value or ``{"$op": operand}``."""
    if filter_ is None:
        return None
    if not isinstance(filter_, Mapping):
        raise FilterError(f"filter must be a dict, not {_a(filter_)}")
    path = json_depth_exceeded(dict(filter_))
    if path is not None:
        raise FilterError(f"filter {_steps(path)} nests deeper than {MAX_JSON_DEPTH} levels")

    def walk(condition: object, where: str) -> None:
        if isinstance(condition, Mapping):
            operators = any(isinstance(k, str) and k.startswith("$") for k in condition)
            for key, sub in condition.items():
                if isinstance(key, str) and key.startswith("$") and key not in _OPERATORS:
                    raise FilterError(
                        f"filter {where}: unknown operator {key!r} (known: "
                        + ", ".join(_OPERATORS)
                        + ")",
                        operator=key,
                    )
                if operators and key not in _OPERATORS:
                    # an object with an operator is all operators: a plain key beside
                    # one would otherwise be read as an operator, or ignored
                    raise FilterError(
                        f"filter {where}: {key!r} is not an operator, but the object also "
                        "has operators (an object either compares with $ operators or "
                        "matches nested keys, not both)",
                        operator=key,
                    )
                walk(sub, f"{where}[{key!r}]")

    for field, condition in filter_.items():
        walk(condition, repr(field))
    return dict(filter_)


def _path_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(want == "*" or have == want for have, want in pairs)


# --- checked operations ---------------------------------------------------------------


@dataclass(frozen=True)
class _Get:
    namespace: tuple[str, ...]
    user: str
    agent: str
    key: str


@dataclass(frozen=True)
class _Put:
    namespace: tuple[str, ...]
    user: str
    agent: str
    key: str
    text: str | None
    """The value's JSON text; ``None`` deletes."""
    index: Literal[False] | tuple[str, ...] | None = None
    """The put's ``index``: ``False`` (never embedded), field paths, or ``None`` (the
    store's fields)."""


@dataclass(frozen=True)
class _Search:
    user: str | None
    agent: str | None
    query: str | None
    filter: dict[str, Any] | None
    limit: int
    offset: int
    touch: bool


@dataclass(frozen=True)
class _List:
    conditions: tuple[MatchCondition, ...]
    max_depth: int | None
    limit: int
    offset: int


_Checked = _Get | _Put | _Search | _List
_Found = tuple[tuple[str, ...], Fact, float | None]
"""A search result before it becomes a ``SearchItem``: namespace, fact, score."""


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer (got {value!r})")
    return value


def _episode_of(op: _Put) -> tuple[str, dict[str, Any]]:
    """The content and metadata of the episode a put (or delete) records."""
    if op.text is None:
        return f"delete {op.key}", {"store_op": "delete", "store_key": op.key}
    metadata: dict[str, Any] = {"store_op": "put", "store_key": op.key, "store_value": op.text}
    if op.index is not None:
        metadata[STORE_INDEX] = False if op.index is False else list(op.index)
    return f"put {op.key}", metadata


def _shown(key: str) -> str:
    """``key`` for an error message: its repr, a long one cut short."""
    return repr(key) if len(key) <= _KEY_SHOWN else repr(key[:_KEY_SHOWN]) + "…"


class _PackRuntime:
    """What the engine's :class:`~stargraph_mem.engine.passes.collect.Plan` reads of a
    pass's runtime, for the store's pack (no pass runs here: only its size check)."""

    def __init__(self, compiled: CompiledPack) -> None:
        self.compiled = compiled
        self.rules = dict(enumerate(compiled.rules))
        self.builtins = set(EPISODE_BUILTINS)
        self.plans: dict[tuple[str, Stamp | None], Plan] = {}


@lru_cache(maxsize=1)
def _fact_plans() -> tuple[Plan, ...]:
    """The engine's plans of the pack's rules that make an item fact (a put's first and
    later puts): their :meth:`Plan.too_large` is the check a pass makes of the fact."""
    runtime = _PackRuntime(store_pack())
    return tuple(
        Plan(runtime, rule.program, None)
        for rule in runtime.compiled.rules
        if kind_creates(rule.program.info.rule.emit.kind)
    )


def _check_fact(op: _Put, limits: Limits, where: str) -> None:
    """The item's fact of a put, as the engine's ``Plan.too_large`` checks it in a pass."""
    assert op.text is not None
    values = {"k": op.key, "v": op.text}
    key_room = KEY_BYTES - utf8_size(partition_key(op.user, op.agent))
    for plan in _fact_plans():
        problem = plan.too_large(values, limits.fact_bytes, key_room)
        if problem is None:
            continue
        sizes = {what: size(values) for what, size in plan.sizes}
        total = sum(sizes.values())
        if total > limits.fact_bytes:  # what too_large checks first
            raise ItemValueError(
                f"value of {where} is {utf8_size(op.text):,} bytes of JSON; the item's fact "
                "(its key, the value as object and as payload, and the reason) would be "
                f"{total:,} bytes, over the limit of {limits.fact_bytes:,} (fact_bytes)",
                where=op.key,
                limit="fact_bytes",
            )
        raise ItemValueError(
            f"key {where} is {utf8_size(op.key):,} bytes (UTF-8): the item's fact's subject "
            f"and predicate would be {sizes['subject'] + sizes['predicate']:,} bytes, over "
            f"the {key_room:,} an indexed key leaves beside the partition key "
            f"(KEY_BYTES {KEY_BYTES:,})",
            where=op.key,
            limit="KEY_BYTES",
        )


def _check_size(op: _Put, limits: Limits, session: str) -> None:
    """Raise :class:`ItemValueError` when a put (or delete) would be refused after its
    episode is written: the episode over ``limits`` (content, metadata JSON, scope key),
    or the item's fact too large for any of the pack's rules that make it, measured by
    the engine's own check (``Plan.too_large``: the fact's rendered text over
    ``fact_bytes``, the value counted twice, as object and payload; its subject and
    predicate over what :data:`KEY_BYTES` leaves beside the partition key)."""
    where = f"{_shown(op.key)} in {op.namespace!r}"
    if op.text is not None:
        _check_fact(op, limits, where)
    content, metadata = _episode_of(op)
    episode = (
        ("content", utf8_size(content), limits.content_bytes, "content_bytes"),
        ("metadata JSON", len(orjson.dumps(metadata)), limits.metadata_bytes, "metadata_bytes"),
        ("scope key", utf8_size(scope_key(op.user, session, op.agent)), KEY_BYTES, "KEY_BYTES"),
    )
    for what, used, most, limit in episode:
        if used > most:
            head = f"{'put' if op.text is not None else 'delete'} of {where}"
            if op.text is not None and limit == "metadata_bytes":
                head = f"value of {where} is {utf8_size(op.text):,} bytes of JSON"
            raise ItemValueError(
                f"{head}: its episode's {what} would be {used:,} bytes (UTF-8), over the "
                f"limit of {most:,} ({limit})",
                where=op.key,
                limit=limit,
            )


def _check_op(op: Op) -> _Checked:
    """One operation checked and mapped to scopes (no I/O)."""
    if isinstance(op, GetOp):
        user, agent = scope_of(op.namespace)
        return _Get(tuple(op.namespace), user, agent, _check_key(op.key))
    if isinstance(op, PutOp):
        user, agent = scope_of(op.namespace)
        if op.ttl is not None:
            raise NotImplementedError(
                "StargraphStore does not support TTL: items are closed by a delete (or by "
                "a pack's rules), never expired by the store; pass ttl=None"
            )
        text = None if op.value is None else encode_value(op.value)
        index = None if op.value is None else _check_put_index(op.index)
        return _Put(tuple(op.namespace), user, agent, _check_key(op.key), text, index)
    if isinstance(op, SearchOp):
        prefix = _check_labels(op.namespace_prefix, "namespace prefix")
        return _Search(
            user=prefix[0] if prefix else None,
            agent=prefix[1] if len(prefix) == 2 else None,
            query=op.query or None,
            filter=_check_filter(op.filter),
            limit=_count(op.limit, "limit"),
            offset=_count(op.offset, "offset"),
            touch=bool(op.refresh_ttl),
        )
    if isinstance(op, ListNamespacesOp):
        conditions = tuple(op.match_conditions or ())
        for condition in conditions:
            if condition.match_type not in ("prefix", "suffix"):
                raise ValueError(f"unknown match type {condition.match_type!r}")
            _check_labels(tuple(condition.path), "match path", wildcards=True)
        depth = op.max_depth
        if depth is not None and _count(depth, "max_depth") < 1:
            raise ValueError("max_depth must be at least 1")
        return _List(conditions, depth, _count(op.limit, "limit"), _count(op.offset, "offset"))
    raise TypeError(f"unknown store operation {type(op).__name__}")


def _check_path(path: object, where: str) -> str:
    """A field path LangGraph's ``get_text_at_path`` can follow (``$`` is the whole value)."""
    if not isinstance(path, str) or not path:
        raise IndexConfigError(
            f"{where}: a field path is a non-empty string, not {path!r}", where=where
        )
    if path != "$" and not tokenize_path(path):
        raise IndexConfigError(f"{where}: field path {path!r} names no field", where=where)
    return path


def _check_put_index(index: object) -> Literal[False] | tuple[str, ...] | None:
    """A put's ``index``: ``None`` (the store's fields), ``False``, or a list of paths."""
    if index is None or index is False:
        return index
    if isinstance(index, str) or not isinstance(index, list | tuple):
        raise IndexConfigError(
            f"a put's index is False or a list of field paths, not {index!r}", where="index"
        )
    return tuple(_check_path(path, f"index[{n}]") for n, path in enumerate(index))


# --- the pack -------------------------------------------------------------------------


@lru_cache(maxsize=1)
def store_pack() -> CompiledPack:
    """The compiled pack the store needs (:data:`PACK_PATH`), compiled once per process."""
    return compile_file(PACK_PATH)


def _check_consolidator(consolidator: Consolidator) -> None:
    wanted = store_pack()
    for compiled in consolidator.packs:
        if compiled.name == wanted.name:
            if compiled.sha256 != wanted.sha256:
                raise StoreStateError(
                    f"the Consolidator runs another version of pack {wanted.name!r} "
                    f"(sha256 {compiled.sha256[:12]}…, this store needs "
                    f"{wanted.sha256[:12]}…): open it with packs=[PACK_PATH, ...]"
                )
            return
    raise StoreStateError(
        f"the Consolidator does not run the store's pack {wanted.name!r}: open it with "
        "Consolidator.open(path, packs=[PACK_PATH, ...]) or use StargraphStore.from_path"
    )


# --- the semantic index ---------------------------------------------------------------

INDEX_KEYS: Final = ("dims", "embed", "fields")
"""The keys of LangGraph's ``IndexConfig`` this store reads."""
STORE_INDEX: Final = "store_index"
"""Episode metadata of a put with its own ``index``: ``false`` or the field paths."""


def _embedder_function(embedder: Embedder) -> Callable[[Sequence[str]], list[list[float]]]:
    """A stargraph :class:`~stargraph_mem.embedding.Embedder` as LangGraph's embed
    function."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        rows: list[list[float]] = embedder.embed(list(texts)).tolist()
        return rows

    return embed


class _SemanticIndex:
    """LangGraph's ``index`` over the items: their field texts embedded when a search
    first needs them, the vectors kept in this process per fact id (a put makes a new
    fact, so a kept vector never goes stale; a reopened store embeds again)."""

    def __init__(self, config: object) -> None:
        if not isinstance(config, Mapping):
            raise IndexConfigError(f"index must be a dict, not {_a(config)}", where="index")
        unknown = sorted(str(k) for k in config if k not in INDEX_KEYS)
        if unknown:
            raise IndexConfigError(
                f"index has unknown key(s) {', '.join(unknown)} (known: "
                + ", ".join(INDEX_KEYS)
                + ")",
                where="index",
            )
        embed = config.get("embed")
        if embed is None:
            raise IndexConfigError(
                "index needs 'embed': an Embeddings object, an embed "
                "function or a 'provider:model' string",
                where="index.embed",
            )
        dims = config.get("dims")
        if isinstance(embed, Embedder):
            dims = embedder_dims = embed.dimension if dims is None else dims
            if dims != embedder_dims:
                raise IndexConfigError(
                    f"index dims is {dims} but the embedder's vectors have {embedder_dims}",
                    where="index.dims",
                )
            embed = _embedder_function(embed)
        if not isinstance(embed, str | Embeddings) and not callable(embed):
            raise IndexConfigError(
                "index 'embed' must be an Embeddings object, an embed function or a "
                f"'provider:model' string, not {_a(embed)}",
                where="index.embed",
            )
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise IndexConfigError(
                f"index needs 'dims', the length of the embeddings (got {dims!r})",
                where="index.dims",
            )
        fields = config.get("fields") or ["$"]
        if isinstance(fields, str) or not isinstance(fields, list | tuple):
            raise IndexConfigError(
                f"index fields is a list of field paths, not {fields!r}", where="index.fields"
            )
        self.fields = tuple(_check_path(f, f"index.fields[{n}]") for n, f in enumerate(fields))
        self.dims = dims
        try:
            self.embeddings: Embeddings = ensure_embeddings(embed)
        except ValueError as exc:
            raise IndexConfigError(str(exc), where="index.embed") from exc
        self.config: IndexConfig = {
            "dims": dims,
            "embed": config["embed"],
            "fields": list(self.fields),
        }
        self.vectors: dict[str, npt.NDArray[np.float64]] = {}
        """Unit rows of each fact's field texts (none: the fact is not embedded)."""
        self.scopes: dict[str, tuple[str, str]] = {}
        """The ``(user, agent)`` of each fact in :attr:`vectors`."""

    def keep(self, fact: Fact, rows: npt.NDArray[np.float64]) -> None:
        self.vectors[fact.id] = rows
        self.scopes[fact.id] = (fact.user, fact.agent)

    def forget_closed(self, user: str | None, agent: str | None, current: set[str]) -> None:
        """Drop the vectors of facts under the prefix ``(user, agent)`` that are no longer
        current (replaced or deleted items), so the cache holds current items only."""
        gone = [
            fact_id
            for fact_id, (u, a) in self.scopes.items()
            if (user is None or u == user)
            and (agent is None or a == agent)
            and fact_id not in current
        ]
        for fact_id in gone:
            del self.vectors[fact_id], self.scopes[fact_id]

    def texts(self, value: dict[str, Any], paths: Sequence[str]) -> list[str]:
        """The texts ``paths`` select in ``value`` (missing fields give none)."""
        return [text for path in paths for text in get_text_at_path(value, path)]

    def _unit(self, rows: object, count: int, what: str) -> npt.NDArray[np.float64]:
        """``rows`` as ``count`` unit-length rows of ``dims`` (a zero vector stays zero)."""
        try:
            matrix = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise IndexConfigError(f"{what} are not lists of numbers", where="embed") from exc
        if matrix.shape != (count, self.dims) or not np.isfinite(matrix).all():
            raise IndexConfigError(
                f"{what}: expected {count} finite vector(s) of {self.dims} numbers (index "
                f"dims), got shape {matrix.shape}",
                where="embed",
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        unit: npt.NDArray[np.float64] = np.divide(
            matrix, norms, out=np.zeros_like(matrix), where=norms > 0
        )
        return unit

    async def documents(self, texts: list[str]) -> npt.NDArray[np.float64]:
        rows = await self.embeddings.aembed_documents(texts)
        return self._unit(rows, len(texts), "the embeddings of the items' texts")

    async def query(self, text: str) -> npt.NDArray[np.float64]:
        row = await self.embeddings.aembed_query(text)
        unit: npt.NDArray[np.float64] = self._unit([row], 1, "the query's embedding")[0]
        return unit


def _source_of(fact: Fact) -> str | None:
    """The episode whose put made an item fact (the pack's rules take it as the source)."""
    for step in fact.lineage:
        ids = step.get("source_episode_ids")
        if isinstance(ids, list) and ids and isinstance(ids[0], str):
            return ids[0]
    return None


# --- the store ------------------------------------------------------------------------


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The private loop thread: run until stopped, then release the loop's resources."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


class StargraphStore(BaseStore):
    """LangGraph's ``BaseStore`` over a :class:`Consolidator` (see the module docstring).

    ``StargraphStore.from_path(db)`` owns its Consolidator (opened and closed with the
    store); ``StargraphStore(consolidator)`` uses one that runs :data:`PACK_PATH` and
    that its caller opens and closes (``async with`` the store binds it to the loop).
    ``session`` is the session of the episodes the store records.

    ``index`` (LangGraph's ``IndexConfig``: ``dims``, ``embed``, ``fields``) turns on
    semantic search as LangGraph's own stores have it: ``search(prefix, query=...)`` ranks
    the items by the cosine between the query's embedding and their field texts' (best
    field per item; ``SearchItem.score`` is that cosine, ties broken by namespace and key),
    a put's ``index=False`` leaves the item out of the ranking (listed after the ranked
    ones, with no score) and ``index=[paths]`` embeds those fields instead. ``embed`` may
    also be a stargraph :class:`~stargraph_mem.embedding.Embedder`. Vectors are computed
    by the first search that needs them and kept in this process per fact (see the module
    docstring). Without ``index``, a query is a full-text search, as before.
    """

    supports_ttl = False

    def __init__(
        self,
        consolidator: Consolidator,
        *,
        session: str = DEFAULT_SESSION,
        index: IndexConfig | None = None,
    ) -> None:
        _check_consolidator(consolidator)
        problem = _label_problem(session)
        if problem is not None and "period" not in problem:  # sessions may have periods
            raise ValueError(f"session {session!r} {problem}")
        self.consolidator = consolidator
        self.session = session
        self._index = None if index is None else _SemanticIndex(index)
        self.index_config: IndexConfig | None = None if self._index is None else self._index.config
        """The semantic index's configuration (``None``: queries are full-text searches)."""
        self._owns = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        packs: Sequence[str | Path] = (),
        session: str = DEFAULT_SESSION,
        clock: Callable[[], datetime] = utc_now,
        read_only: bool | None = None,
        limits: Limits | None = None,
        index: IndexConfig | None = None,
    ) -> StargraphStore:
        """A store over the database at ``path`` running the store's pack (and ``packs``,
        which consolidate the same episodes); open it with ``async with`` or ``with``.
        ``clock`` stamps the episodes and the facts' validity times; ``limits`` bound a
        value's size (see :mod:`stargraph_mem.model.limits`); ``index`` configures semantic
        search (see the class)."""
        own = PACK_PATH.resolve()
        extra = [compile_file(p) for p in packs if Path(p).resolve() != own]
        compiled = [store_pack(), *extra]
        mem = Consolidator(path, compiled, clock=clock, read_only=read_only, limits=limits)
        store = cls(mem, session=session, index=index)
        store._owns = True
        return store

    # --- lifecycle ----------------------------------------------------------------------

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not None:
            raise StoreStateError("the store is open already (one `with` at a time)")
        self._loop = loop

    async def __aenter__(self) -> Self:
        self._bind(asyncio.get_running_loop())
        try:
            if self._owns:
                await self.consolidator.bootstrap()
        except BaseException:
            self._loop = None
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._owns:
                await self.consolidator.close()
        finally:
            self._loop = None

    def __enter__(self) -> Self:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_serve, args=(loop,), name="stargraph-store", daemon=True)
        self._bind(loop)
        self._thread = thread
        thread.start()
        try:
            if self._owns:
                self._call(self.consolidator.bootstrap)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._owns:
                self._call(self.consolidator.close)
        finally:
            self._stop()

    def _stop(self) -> None:
        """Stop and join the private loop thread (the loop closes itself)."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()

    def _home(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise StoreStateError(
                "the store is not open: use `async with StargraphStore.from_path(...)` "
                "(or `with` from synchronous code)"
            )
        return self._loop

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the store's loop from synchronous code, and wait for it."""
        loop = self._home()
        if _running_loop() is loop:
            raise StoreStateError(
                "synchronous store call on the event loop the store runs on (it would "
                "deadlock): await the async method instead (aput, aget, asearch, adelete, "
                "alist_namespaces, abatch)"
            )
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    async def _acall(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the store's loop from async code on any loop."""
        loop = self._home()
        if _running_loop() is loop:
            return await make()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), loop))

    # --- BaseStore ------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order from synchronous code (see the module docstring)."""
        checked = self._checked(ops)
        return self._call(lambda: self._run(checked))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; every op is checked before any is run."""
        checked = self._checked(ops)
        return await self._acall(lambda: self._run(checked))

    def _checked(self, ops: Iterable[Op]) -> list[_Checked]:
        """Every op checked (no I/O), puts and deletes against the consolidator's size
        limits as their episode and the item's fact will be (see :func:`_check_size`)."""
        checked = [_check_op(op) for op in ops]
        for op in checked:
            if isinstance(op, _Put):
                _check_size(op, self.consolidator.limits, self.session)
        return checked

    async def _run(self, ops: Sequence[_Checked]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, _Get):
                results.append(await self._get(op))
            elif isinstance(op, _Put):
                await self._put(op)
                results.append(None)
            elif isinstance(op, _Search):
                results.append(await self._search(op))
            else:
                results.append(await self._list(op))
        return results

    # --- extras ---------------------------------------------------------------------------

    async def afact(
        self, namespace: tuple[str, ...], key: str, *, as_of: datetime | None = None
    ) -> Fact | None:
        """The fact holding the item now (or at ``as_of``): for ``explain`` and history."""
        user, agent = scope_of(namespace)
        checked = _check_key(key)
        return await self._acall(lambda: self._fact(user, agent, checked, as_of))

    def fact(
        self, namespace: tuple[str, ...], key: str, *, as_of: datetime | None = None
    ) -> Fact | None:
        """:meth:`afact` from synchronous code."""
        user, agent = scope_of(namespace)
        checked = _check_key(key)
        return self._call(lambda: self._fact(user, agent, checked, as_of))

    # --- operations on the store's loop ---------------------------------------------------

    async def _fact(self, user: str, agent: str, key: str, as_of: datetime | None) -> Fact | None:
        pattern = FactPattern(user=user, agent=agent, subject=key, predicate=ITEM_PREDICATE)
        store = self.consolidator.fact_store
        found = await (store.query(pattern) if as_of is None else store.as_of(as_of, pattern))
        return found[-1] if found else None

    async def _versions(self, user: str, agent: str, key: str) -> list[Fact]:
        """Every fact the key ever had in its scope (oldest first)."""
        pattern = FactPattern(
            user=user, agent=agent, subject=key, predicate=ITEM_PREDICATE, include_history=True
        )
        return await self.consolidator.fact_store.query(pattern)

    async def _created_at(self, fact: Fact, versions: Sequence[Fact] | None = None) -> datetime:
        """When the item ``fact`` holds was created: follow ``superseded_by`` back to the
        fact a put made after no item (or a delete)."""
        if versions is None:
            versions = await self._versions(fact.user, fact.agent, fact.subject)
        before = {f.superseded_by: f for f in versions if f.superseded_by is not None}
        first, seen = fact, {fact.id}
        while (earlier := before.get(first.id)) is not None and earlier.id not in seen:
            seen.add(earlier.id)
            first = earlier
        return first.valid_from

    async def _get(self, op: _Get) -> Item | None:
        versions = await self._versions(op.user, op.agent, op.key)
        current = [f for f in versions if f.is_current]
        if not current:
            return None
        fact = current[-1]
        value = _held_value(fact)
        if value is None:
            raise ItemReadError(
                f"key {_shown(op.key)} in {op.namespace!r}: its current fact {fact.id} holds "
                "no item value (payload['value'] is not a JSON object's text; rule "
                f"{fact.rule_id}), so it is not an item the store made: put the key again "
                "to replace the fact, or delete it",
                key=op.key,
                namespace=op.namespace,
                fact_id=fact.id,
            )
        return Item(
            value=value,
            key=op.key,
            namespace=op.namespace,
            created_at=await self._created_at(fact, versions),
            updated_at=fact.valid_from,
        )

    async def _put(self, op: _Put) -> None:
        mem = self.consolidator
        content, metadata = _episode_of(op)
        episode = Episode(
            id=f"lg-{uuid.uuid4().hex}",
            content=content,
            timestamp=mem.clock(),
            source_node=SOURCE_NODE,
            user=op.user,
            session=self.session,
            agent=op.agent,
            metadata=metadata,
        )
        report = await mem.record(episode)
        rejections = (r for p in report.passes if p.pack == PACK_NAME for r in p.rejected)
        for rejected in rejections:
            if rejected.episode_id == episode.id:
                raise ItemWriteError(
                    f"{content} in {op.namespace!r} was rejected by rule "
                    f"{rejected.rule_id}: {rejected.reason}",
                    episode_id=episode.id,
                )

    async def _search_item(
        self, namespace: tuple[str, ...], fact: Fact, score: float | None
    ) -> SearchItem:
        return SearchItem(
            namespace=namespace,
            key=fact.subject,
            value=item_value(fact),
            created_at=await self._created_at(fact),
            updated_at=fact.valid_from,
            score=score,
        )

    def _hit(self, op: _Search, fact: Fact) -> tuple[str, ...] | None:
        """The namespace of a fact the search may return (an addressable current item
        whose value passes the filter), or ``None``. A fact holding no item value (one
        the pack did not make, as after an MCP ``correct_fact``) is no item: left out,
        with a warning, so that it does not fail the search of the others."""
        if fact.predicate != ITEM_PREDICATE or not fact.is_current:
            return None
        namespace = namespace_of(fact.user, fact.agent)
        if namespace is None:
            return None
        value = _held_value(fact)
        if value is None:
            logger.warning(
                "search leaves out fact %s (key %s in %r): it holds no item value",
                fact.id,
                _shown(fact.subject),
                namespace,
            )
            return None
        if op.filter is not None and not all(
            _matches(value.get(f), cond) for f, cond in op.filter.items()
        ):
            return None
        return namespace

    async def _search(self, op: _Search) -> list[SearchItem]:
        if op.limit == 0:
            return []
        if op.query is None:
            found = await self._listed(op)
        elif self._index is not None:
            found = await self._semantic(op, op.query, self._index)
        else:
            found = await self._ranked(op, op.query)
        return [
            await self._search_item(namespace, fact, score)
            for namespace, fact, score in found[op.offset : op.offset + op.limit]
        ]

    async def _listed(self, op: _Search) -> list[_Found]:
        """Every current item under the prefix that passes the filter, newest first."""
        pattern = FactPattern(user=op.user, agent=op.agent, predicate=ITEM_PREDICATE)
        facts = await self.consolidator.fact_store.query(pattern)
        found: list[_Found] = []
        for fact in sorted(facts, key=lambda f: (f.valid_from, f.id), reverse=True):
            namespace = self._hit(op, fact)
            if namespace is not None:
                found.append((namespace, fact, None))
        return found

    async def _semantic(self, op: _Search, query: str, index: _SemanticIndex) -> list[_Found]:
        """Every current item under the prefix that passes the filter, the embedded ones by
        cosine to ``query`` (best first, ties by namespace and key), then the others by
        namespace and key with no score; accesses are recorded for the page returned."""
        listed = await self._listed(op)
        if op.filter is None:
            index.forget_closed(op.user, op.agent, {fact.id for _, fact, _ in listed})
        await self._embed([fact for _, fact, _ in listed if fact.id not in index.vectors], index)
        wanted = await index.query(query)
        scored: list[_Found] = []
        unscored: list[_Found] = []
        for namespace, fact, _ in listed:
            rows = index.vectors[fact.id]
            if not len(rows):
                unscored.append((namespace, fact, None))
                continue
            best = round(float(np.max(rows @ wanted)), SCORE_DECIMALS) + 0.0  # no -0.0
            scored.append((namespace, fact, best))
        scored.sort(key=lambda found: (-(found[2] or 0.0), found[0], found[1].subject))
        unscored.sort(key=lambda found: (found[0], found[1].subject))
        found = scored + unscored
        mem = self.consolidator
        page = [fact.id for _, fact, _ in found[op.offset : op.offset + op.limit]]
        if op.touch and page and mem.read_only_reason is None:
            await mem.record_access(page)
        return found

    async def _embed(self, facts: Sequence[Fact], index: _SemanticIndex) -> None:
        """Embed the field texts of ``facts`` in one call (each put's own ``index`` read
        back from the episode that made the fact) and keep the vectors."""
        if not facts:
            return
        sources = {fact.id: _source_of(fact) for fact in facts}
        wanted = [eid for eid in sources.values() if eid is not None]
        records = await self.consolidator.memory.by_ids(wanted) if wanted else []
        chosen = {r.id: r.metadata.get(STORE_INDEX) for r in records}
        texts: list[str] = []
        owners: list[str] = []
        for fact in facts:
            choice = chosen.get(sources[fact.id] or "")
            if choice is False:
                continue
            paths = tuple(choice) if isinstance(choice, list) else index.fields
            for text in index.texts(item_value(fact), paths):
                texts.append(text)
                owners.append(fact.id)
        rows = await index.documents(texts) if texts else np.zeros((0, index.dims))
        for fact in facts:
            mine = [n for n, owner in enumerate(owners) if owner == fact.id]
            index.keep(fact, rows[mine])

    async def _ranked(self, op: _Search, query: str) -> list[_Found]:
        """The best hits of the project's fact search that pass the filter (it ranks at
        most :data:`MAX_LIMIT` hits); accesses are recorded for the hits returned only."""
        wanted = op.offset + op.limit
        if wanted > MAX_LIMIT:
            raise SearchError(
                f"a search with a query reaches its best {MAX_LIMIT} hits: offset + limit "
                f"is {wanted}",
                offset=op.offset,
                limit=op.limit,
            )
        mem = self.consolidator
        touch = op.touch and mem.read_only_reason is None  # a read-only file reads only
        exact = op.filter is None and op.offset == 0
        size = wanted
        while True:
            hits = await mem.search(
                query,
                user=op.user,
                agent=op.agent,
                predicate=ITEM_PREDICATE,
                limit=size,
                touch=touch and exact,
            )
            found: list[_Found] = []
            for hit in hits:
                namespace = self._hit(op, hit.fact)
                if namespace is not None:
                    found.append((namespace, hit.fact, hit.score))
            if len(found) >= wanted or len(hits) < size or size == MAX_LIMIT:
                break
            size = min(size * 4, MAX_LIMIT)
        if touch and not exact:
            for _, fact, _ in found[op.offset : wanted]:
                await mem.search(
                    user=fact.user, agent=fact.agent, subject=fact.subject, predicate=fact.predicate
                )
        return found

    async def _list(self, op: _List) -> list[tuple[str, ...]]:
        mem = self.consolidator
        namespaces: list[tuple[str, ...]] = []
        for partition in await mem.memory.partitions():
            namespace = namespace_of(partition.user, partition.agent)
            if namespace is None or not all(_path_matches(c, namespace) for c in op.conditions):
                continue
            pattern = FactPattern(
                user=partition.user, agent=partition.agent, predicate=ITEM_PREDICATE, limit=1
            )
            if await mem.fact_store.query(pattern):
                namespaces.append(namespace)
        if op.max_depth is not None:
            namespaces = list({ns[: op.max_depth] for ns in namespaces})
        namespaces.sort()
        return namespaces[op.offset : op.offset + op.limit]
