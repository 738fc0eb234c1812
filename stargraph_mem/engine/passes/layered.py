"""A read-only mapping that the next version of it shares: a base dict plus the changes
made since, so a version with a few changes costs those changes, not a copy of the base.

:class:`~stargraph_mem.engine.passes.fact_list.FactList` keeps its lookups (facts by id, by the
fields fact patterns join on) this way: a streaming pass changes one or two facts of a
partition that may hold thousands, and the list it leaves must not disturb the one it was
given (a pass being applied, or a dry run, still holds that one).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from math import isqrt
from typing import Final, TypeVar, overload

__all__ = ["GONE", "Gone", "Layered"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class Gone:
    """The value of a key a change removed (one instance, :data:`GONE`, also once
    unpickled: a worker process gets the facts a pass left this way)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "GONE"

    def __reduce__(self) -> str:
        return "GONE"


GONE: Final = Gone()
"""Marks a removed key in the changes given to :meth:`Layered.changed`."""


class Layered(Mapping[K, V]):
    """``base`` (never changed once given) with ``over`` on top (a key's new value, or
    :data:`GONE`). :meth:`changed` makes the next version: it copies only the changes,
    and folds them into a new base once they outnumber about √(2n) of n keys, so a
    version costs O(√n) steps at most, amortised."""

    __slots__ = ("_base", "_len", "_over")

    def __init__(self, base: dict[K, V], over: dict[K, V | Gone] | None = None) -> None:
        self._base = base
        self._over: dict[K, V | Gone] = over or {}
        self._len = -1

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, /, default: V | T) -> V | T: ...

    def get(self, key: K, /, default: object = None) -> object:
        over = self._over
        if key in over:
            found = over[key]
            return default if found is GONE else found
        return self._base.get(key, default)

    def __getitem__(self, key: K) -> V:
        over = self._over
        if key in over:
            found = over[key]
            if isinstance(found, Gone):
                raise KeyError(key)
            return found
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        over = self._over
        if key in over:
            return over[key] is not GONE
        return key in self._base

    def __iter__(self) -> Iterator[K]:
        over = self._over
        yield from (key for key in self._base if key not in over)
        yield from (key for key, value in over.items() if value is not GONE)

    def __len__(self) -> int:
        if self._len < 0:
            self._len = sum(1 for _ in self)
        return self._len

    def changed(self, changes: Mapping[K, V | Gone]) -> Layered[K, V]:
        """The next version: this one with ``changes`` (a value, or :data:`GONE` to remove
        the key); this one stays as it is."""
        over = {**self._over, **changes}
        if len(over) <= max(16, isqrt(2 * len(self._base))):
            return Layered(self._base, over)
        base = dict(self._base)
        for key, value in over.items():
            if value is GONE:
                base.pop(key, None)
            else:
                base[key] = value  # type: ignore[assignment]
        return Layered(base)
