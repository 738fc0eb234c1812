"""Layered mappings: every version reads as the dict it stands for, whether its changes sit
on top of a shared base or were folded into a new one, and making a version never disturbs
an earlier one (FactList's lookups rely on it)."""

from __future__ import annotations

import pickle
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packs_helpers import engine_fact

from stargraph_mem.engine.passes.fact_list import FactList
from stargraph_mem.engine.passes.layered import GONE, Gone, Layered
from stargraph_mem.stores.fact import EngineFact

T0 = datetime(2026, 3, 1, tzinfo=UTC)

changes = st.dictionaries(
    st.integers(0, 60), st.one_of(st.just(GONE), st.integers(0, 9)), max_size=12
)


def applied(model: dict[int, int], step: dict[int, int | Gone]) -> dict[int, int]:
    out = dict(model)
    for key, value in step.items():
        if isinstance(value, Gone):
            out.pop(key, None)
        else:
            out[key] = value
    return out


def reads_as(layered: Layered[int, int], model: dict[int, int]) -> None:
    assert dict(layered) == model
    assert len(layered) == len(model)
    for key in range(-1, 62):
        assert (key in layered) == (key in model)
        assert layered.get(key) == model.get(key)
        assert layered.get(key, -5) == model.get(key, -5)
        if key in model:
            assert layered[key] == model[key]
        else:
            with pytest.raises(KeyError):
                layered[key]


@settings(max_examples=120, deadline=None)
@given(
    base=st.dictionaries(st.integers(0, 60), st.integers(0, 9), max_size=40),
    steps=st.lists(changes, max_size=25),
)
def test_every_version_reads_as_its_dict_and_earlier_ones_stay_as_they_were(
    base: dict[int, int], steps: list[dict[int, int | Gone]]
) -> None:
    versions = [Layered(dict(base))]
    models = [dict(base)]
    for step in steps:
        versions.append(versions[-1].changed(step))
        models.append(applied(models[-1], step))
    for layered, model in zip(versions, models, strict=True):
        reads_as(layered, model)


def test_changes_are_folded_into_a_new_base_once_they_outnumber_the_threshold() -> None:
    """Past max(16, √(2n)) changes a version has its own base; the one before keeps its."""
    first = Layered({k: k for k in range(100)})
    version = first
    for k in range(16):  # 16 changes: still on top of the first base
        version = version.changed({k: -k})
    assert version._base is first._base
    folded = version.changed({16: GONE})
    assert folded._base is not first._base and not folded._over
    assert 16 not in folded and folded[3] == -3 and len(folded) == 99
    assert first[3] == 3 and 16 in first and len(first) == 100


def fact(k: int, subject: str) -> EngineFact:
    """Fact ``f<k>`` (subject, p, o<k>), made ``k`` hours after T0, its observation known."""
    return replace(
        engine_fact(f"f{k:04d}", (subject, "p", f"o{k}"), valid_from=T0 + timedelta(hours=k)),
        observed_us=1,
    )


def test_a_fact_list_changed_many_times_keeps_every_earlier_list_and_its_lookups() -> None:
    """A streaming run: each pass closes one fact and makes another, long past the point
    where the lookups fold their changes; every list (and its lookups) stays as made."""

    current = FactList(fact(k, f"s{k % 7}") for k in range(50))
    current.ids()
    current.keyed(("subject",))
    lists = [current]
    for step in range(120):
        closed = current[(step * 13) % len(current)]
        current = current.changed([closed.id], [fact(1000 + step, closed.subject)])
        lists.append(current)
    for made in lists:
        fresh = FactList(list(made))
        assert made.ids() == fresh.ids()
        assert made.keyed(("subject",)) == fresh.keyed(("subject",))
        assert made.keyed(("subject", "object")) == fresh.keyed(("subject", "object"))
    assert len(lists[0]) == len(lists[-1]) == 50
    assert lists[0].ids().keys().isdisjoint({f"f{1000 + k:04d}" for k in range(120)})


def test_a_changed_fact_list_pickles_with_its_removals() -> None:
    """A worker process gets the facts a pass left pickled: a removed id stays removed
    there, an emptied key stays empty, and the next change folds as it would here."""

    facts = FactList(fact(k, f"s{k}") for k in range(40))
    facts.ids()
    facts.keyed(("subject",))
    changed = facts.changed(["f0001", "f0002"], [fact(100, "s3")])
    copy = pickle.loads(pickle.dumps(changed))
    assert pickle.loads(pickle.dumps(GONE)) is GONE
    assert "f0001" not in copy.ids() and copy.ids().get("f0001") is None
    assert "s1" not in copy.keyed(("subject",))
    assert copy.keyed(("subject",)).get("s1", ()) == ()
    assert copy.ids() == changed.ids() == FactList(list(changed)).ids()
    # enough further changes to fold the removals into a new base, on both sides
    more = [f"f{k:04d}" for k in range(3, 30)]
    here, there = changed.changed(more, []), copy.changed(more, [])
    assert here.ids() == there.ids() == FactList(list(here)).ids()
    assert here.keyed(("subject",)) == there.keyed(("subject",))
    assert set(there.ids()) == {f"f{k:04d}" for k in (0, *range(30, 40), 100)}
