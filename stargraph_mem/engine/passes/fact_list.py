"""The facts one pass holds: a partition's current facts as a list kept between passes with
its lookups (by id, by key), and the changes a pass makes to them.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from stargraph_mem.engine.passes.layered import GONE, Gone, Layered
from stargraph_mem.engine.passes.slot_values import key_of
from stargraph_mem.model import lifecycle
from stargraph_mem.stores.fact import EngineFact


class FactList(list[EngineFact]):
    """A partition's current facts as a pass leaves them: ordered by ``valid_from``, then
    id, each with its observation time, with the lookups the next pass needs (made on
    first use, and carried into the list the next pass leaves). Never changed once made:
    :meth:`changed` makes the next one, whose lookups share this one's (see
    :class:`~stargraph_mem.engine.passes.layered.Layered`)."""

    __slots__ = ("_ids", "_keyed")

    def __init__(self, facts: Iterable[EngineFact] = ()) -> None:
        super().__init__(facts)
        self._ids: Layered[str, EngineFact] | None = None
        self._keyed: dict[tuple[str, ...], Layered[Any, list[EngineFact]]] = {}

    def ids(self) -> Layered[str, EngineFact]:
        """The facts by id."""
        if self._ids is None:
            self._ids = Layered({f.id: f for f in self})
        return self._ids

    def keyed(self, fields: tuple[str, ...]) -> Layered[Any, list[EngineFact]]:
        """The facts by their values of ``fields`` (one field: the value), each list in
        the order of this one."""
        found = self._keyed.get(fields)
        if found is None:
            of = key_of(fields)
            index: dict[Any, list[EngineFact]] = {}
            for fact in self:
                index.setdefault(of(fact), []).append(fact)
            found = self._keyed[fields] = Layered(index)
        return found

    def changed(self, gone: Iterable[str], made: Sequence[EngineFact]) -> FactList:
        """The list without the facts of ids ``gone`` and with ``made`` (which replace
        any facts of the same ids), in order; lookups made so far come along, changed
        only where the facts changed."""
        ids = self.ids()
        removed = [ids[fid] for fid in {*gone, *(f.id for f in made)} if fid in ids]
        out = FactList(self)
        for fact in removed:
            at = bisect_left(out, fact_order(fact), key=fact_order)
            if at < len(out) and out[at] is fact:
                del out[at]
            else:  # not where the order puts it: find it the long way
                out.remove(fact)
        for fact in made:
            insort(out, fact, key=fact_order)
        by_id: dict[str, EngineFact | Gone] = {fact.id: GONE for fact in removed}
        by_id.update((f.id, f) for f in made)
        out._ids = ids.changed(by_id)
        for fields, index in self._keyed.items():
            of = key_of(fields)
            lists: dict[Any, list[EngineFact]] = {}
            for fact in removed:
                key = of(fact)
                lists[key] = [f for f in lists.get(key, index.get(key, ())) if f is not fact]
            for fact in made:
                key = of(fact)
                same = list(lists.get(key, index.get(key, ())))
                insort(same, fact, key=fact_order)
                lists[key] = same
            out._keyed[fields] = index.changed(
                {key: same if same else GONE for key, same in lists.items()}
            )
        return out


class PassFacts:
    """The partition's current facts during a pass, by id: the stored ones as given, and
    those the pass changed or made (a pass over a few episodes touches a few of many
    facts). Facts are never changed in place: a change replaces the fact."""

    __slots__ = ("given", "gone", "stored", "used")

    def __init__(self, facts: list[EngineFact]) -> None:
        self.given = facts
        self.stored: Mapping[str, EngineFact] = (
            facts.ids() if isinstance(facts, FactList) else {f.id: f for f in facts}
        )
        self.used: dict[str, EngineFact] = {}
        """Facts changed or made in the pass (or whose observation time was filled in)."""
        self.gone: set[str] = set()
        """Stored facts the pass closed."""

    def __contains__(self, fid: str) -> bool:
        return fid in self.used or (fid in self.stored and fid not in self.gone)

    def get(self, fid: str) -> EngineFact | None:
        found = self.used.get(fid)
        if found is None and fid in self.stored and fid not in self.gone:
            found = self.stored[fid]
            if not found.observed_us:
                found = self.used[fid] = _observed(found)
        return found

    def pop(self, fid: str) -> EngineFact:
        found = self.get(fid)
        if found is None:
            raise KeyError(fid)
        self.used.pop(fid, None)
        if fid in self.stored:
            self.gone.add(fid)
        return found

    def __setitem__(self, fid: str, fact: EngineFact) -> None:
        self.used[fid] = fact

    def after(self) -> list[EngineFact]:
        """The current facts once the pass is done, ordered by ``valid_from``, then id."""
        used, gone, given = self.used, self.gone, self.given
        if isinstance(given, FactList):  # in order, observation times known
            if not used and not gone:
                return given
            return given.changed(gone, list(used.values()))
        out = [_observed(f) for f in given if f.id not in used and f.id not in gone]
        out += used.values()
        out.sort(key=fact_order)
        return FactList(out)


def fact_order(f: EngineFact) -> tuple[int, str]:
    return f.valid_from_us, f.id


def as_archived(f: EngineFact) -> EngineFact:
    """An archived fact as a pass's patterns see it."""
    return replace(_observed(f), status=lifecycle.ARCHIVED)


def _observed(f: EngineFact) -> EngineFact:
    """``f`` with its observation time known (a stored fact that had none: its
    ``valid_from``)."""
    return f if f.observed_us else replace(f, observed_us=f.valid_from_us)
