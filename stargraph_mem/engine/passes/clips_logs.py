"""The logs a ``near`` pass follows between episodes, read straight from CLIPS's fact list.

Rules that make a fact log it in ``sm-made`` (its address) and rules that close one log it
in ``sm-gone`` (its id); see ``NEAR_TEMPLATE`` in the compiler. Taking a log reads its
facts through the C API and retracts them: no CLIPS function call, no multifield and no
Python fact object per entry (a streaming record's pass takes each log once).
"""

from __future__ import annotations

from typing import Any

from clips._clips import ffi, lib

from stargraph_mem.engine.passes.near import statement


class FactLogs:
    """The ``sm-made`` and ``sm-gone`` logs of one environment."""

    __slots__ = ("_gone", "_made", "_value")

    def __init__(self, envp: Any) -> None:
        self._made = lib.FindDeftemplate(envp, b"sm-made")
        self._gone = lib.FindDeftemplate(envp, b"sm-gone")
        self._value = ffi.new("CLIPSValue *")

    def has_made(self) -> bool:
        return bool(lib.GetNextFactInTemplate(self._made, ffi.NULL) != ffi.NULL)

    def has_gone(self) -> bool:
        return bool(lib.GetNextFactInTemplate(self._gone, ffi.NULL) != ffi.NULL)

    def take_made(self) -> list[tuple[str, str, int]]:
        """``(id, statement, observed_us)`` of each fact made since the last take that is
        still asserted, in the order they were made; the log is emptied."""
        value = self._value
        out: list[tuple[str, str, int]] = []
        logs = _facts_of(self._made)
        for log in logs:
            lib.GetFactSlot(log, b"f", value)
            made = value.factValue
            if lib.FactExistp(made):
                out.append(
                    (
                        self._text(made, b"f_id"),
                        statement(
                            self._text(made, b"f_subject"),
                            self._text(made, b"f_predicate"),
                            self._text(made, b"f_object"),
                        ),
                        self._integer(made, b"f_observed_at"),
                    )
                )
        _retract(logs)
        return out

    def take_gone(self) -> list[str]:
        """The ids of the facts closed since the last take, in order; the log is emptied."""
        logs = _facts_of(self._gone)
        out = [self._text(log, b"id") for log in logs]
        _retract(logs)
        return out

    def _text(self, fact: Any, slot: bytes) -> str:
        lib.GetFactSlot(fact, slot, self._value)
        return str(ffi.string(self._value.lexemeValue.contents).decode())

    def _integer(self, fact: Any, slot: bytes) -> int:
        lib.GetFactSlot(fact, slot, self._value)
        return int(self._value.integerValue.contents)


def _facts_of(template: Any) -> list[Any]:
    """The facts of ``template``, in the fact list's order."""
    out = []
    fact = lib.GetNextFactInTemplate(template, ffi.NULL)
    while fact != ffi.NULL:
        out.append(fact)
        fact = lib.GetNextFactInTemplate(template, fact)
    return out


def _retract(facts: list[Any]) -> None:
    for fact in facts:
        lib.Retract(fact)
