"""The pure fact lifecycle (model/lifecycle.py) and the delta kinds table (model/deltas.py)."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import pytest

from stargraph_mem.model import lifecycle
from stargraph_mem.model.deltas import (
    DELTA_ADAPTER,
    DELTA_BY_KIND,
    DELTA_KINDS,
    Delta,
    DeltaKind,
    FactDelta,
    kind_creates,
    kind_takes,
)
from stargraph_mem.model.lifecycle import Carried, FactState

T = datetime(2026, 1, 1, tzinfo=UTC)
PACKAGE = Path(__file__).parent.parent / "stargraph_mem"


def delta(kind: str, **fields: Any) -> Delta:
    base: dict[str, Any] = {
        "kind": kind,
        "source_episode_ids": ["e1"],
        "promotion_ts": T,
        "rule_id": "r",
        "confidence": 0.5,
    }
    if kind_creates(kind):
        base["fact"] = {"subject": "s", "predicate": "p", "object": "o"}
    return DELTA_ADAPTER.validate_python({**base, **fields})


def state(**fields: Any) -> FactState:
    return FactState(
        "u", "a", fields.pop("valid_from_us", 100), fields.pop("closed", False), **fields
    )


def test_kinds_come_from_the_union() -> None:
    assert DELTA_KINDS == get_args(DeltaKind) == ("add", "update", "delete", "noop")
    assert [DELTA_BY_KIND[k] for k in DELTA_KINDS] == list(get_args(Delta))
    assert [k for k in DELTA_KINDS if kind_creates(k)] == ["add", "update"]
    assert [k for k in DELTA_KINDS if kind_takes(k, "replaces")] == ["update", "delete"]
    assert [k for k in DELTA_KINDS if kind_takes(k, "reinforces")] == ["noop"]
    assert all(issubclass(DELTA_BY_KIND[k], FactDelta) == kind_creates(k) for k in DELTA_KINDS)


def test_what_each_kind_names() -> None:
    update = delta("update", replaces=["f1", "f2"])
    assert (update.closed_ids, update.reinforced_ids, update.close_status) == (
        ["f1", "f2"],
        (),
        "superseded",
    )
    assert update.restores and not delta("delete", replaces=["f1"]).restores
    assert delta("delete", replaces=["f1"], status="archived").close_status == "archived"
    noop = delta("noop", reinforces=["f3"])
    assert (noop.named_ids, noop.observes, noop.creates) == (["f3"], True, False)
    assert not delta("delete", replaces=["f1"]).observes
    assert delta("add").named_ids == []


def test_refusal_only_lets_a_replacing_delta_restore_an_archived_fact_once() -> None:
    update, delete = delta("update", replaces=["f1"]), delta("delete", replaces=["f1"])
    assert lifecycle.refusal("archived", False, update) is None
    assert lifecycle.refusal("archived", True, update) == "archived fact already restored"
    assert lifecycle.refusal("archived", False, delete) == "fact is already closed"
    assert lifecycle.refusal("deleted", False, update) == "fact is already closed"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("new", (500, 0, 450)), ("inherit", (300, 4, 420)), ("reinforce", (500, 5, 450))],
)
def test_carry_by_lifecycle(kind: Any, expected: tuple[int, int, int]) -> None:
    before = [
        state(reinforced_at_us=300, reinforcement_count=4, observed_us=200, access_count=2,
              last_access_us=50, pin=(7, "keep")),
        state(reinforced_at_us=250, reinforcement_count=1, observed_us=420, access_count=3,
              last_access_us=80),
    ]  # fmt: skip
    made = lifecycle.carry(kind, Carried(500, 0, 450), before)
    assert (made.reinforced_at_us, made.reinforcement_count, made.observed_us) == expected
    assert (made.access_count, made.last_access_us, made.pinned) == (5, 80, True)
    assert lifecycle.carry(kind, Carried(500, 0, 450), []) == Carried(500, 0, 450)


def test_carried_pin_is_the_earliest_then_lowest_id() -> None:
    before = [state(pin=(9, "b")), state(), state(pin=(3, "a")), state(pin=(3, "c"))]
    assert lifecycle.carried_pin(before, ["f1", "f2", "f4", "f3"]) == ((3, "a"), "f4")
    assert lifecycle.carried_pin([state()], ["f1"]) is None
    event = lifecycle.pin_event("fnew", 10, ((3, "a"), "f4"))
    assert (event.fact_id, event.event, event.at_us, event.reason, event.related_id) == (
        "fnew",
        "pinned",
        10,
        "a",
        "f4",
    )


def test_closes_never_before_valid_from_and_restores_archived() -> None:
    update = delta("update", replaces=["f1", "f2"])
    named = [state(valid_from_us=900), state(closed=True, status="archived")]
    first, second = lifecycle.closes(update, named, 500)
    assert (first.fact_id, first.at_us, first.status, first.restore) == (
        "f1",
        900,
        "superseded",
        False,
    )
    assert (second.fact_id, second.at_us, second.restore) == ("f2", 500, True)
    event = lifecycle.restore_event(second, "why", "fnew")
    assert (event.fact_id, event.event, event.related_id) == ("f2", "restored", "fnew")
    (closed,) = lifecycle.closes(delta("delete", replaces=["f1"], status="expired"), named[:1], 5)
    assert (closed.at_us, closed.status) == (900, "expired")


def test_reinforced() -> None:
    fact = state(reinforced_at_us=300, reinforcement_count=2, observed_us=400)
    assert lifecycle.reinforced(fact, 200, None) == (300, 3, 400)
    assert lifecycle.reinforced(fact, 600, 500) == (600, 3, 500)


def test_lifecycle_module_is_pure() -> None:
    """No I/O, SQL or CLIPS: it imports only the standard library and the model."""
    tree = ast.parse((PACKAGE / "model" / "lifecycle.py").read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    allowed = {"__future__", "collections.abc", "dataclasses", "typing"}
    assert {m for m in imported if m and not m.startswith("stargraph_mem.model")} <= allowed


def test_kind_names_are_written_once() -> None:
    """Outside model/deltas.py no module lists the delta kinds itself."""
    spelled = ('"add", "update", "delete", "noop"', "AddDelta | UpdateDelta | DeleteDelta")
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "deltas.py" and any(text in path.read_text() for text in spelled)
    ]
    assert offenders == []
