"""Asserting facts through CLIPS's FactBuilder C API, one deftemplate per builder."""

from __future__ import annotations

from typing import Any

import clips
from clips._clips import ffi, lib

from stargraph_mem.errors import EngineError


class FactBuilder:
    """Asserts facts of one deftemplate through CLIPS's FactBuilder C API directly.

    Skips clipspy's per-slot value conversion (``Template.assert_fact`` costs about twice
    as much); slot values are Python ``str``/``int``/``float`` or ``clips.Symbol``.
    """

    def __init__(self, env: clips.Environment, template: str) -> None:
        self._envp = env._env
        self._template = template
        self._fb = lib.CreateFactBuilder(self._envp, template.encode())
        if self._fb == ffi.NULL:
            raise EngineError(f"no deftemplate {template!r} in the loaded program")
        self._value = ffi.new("CLIPSValue *")

    def put(self, slot: bytes, value: Any) -> None:
        envp, cell = self._envp, self._value
        kind = type(value)
        if kind is str:
            cell.lexemeValue = lib.CreateString(envp, value.encode())
        elif kind is int:
            cell.integerValue = lib.CreateInteger(envp, value)
        elif kind is float:
            cell.floatValue = lib.CreateFloat(envp, value)
        elif kind is clips.Symbol:
            cell.lexemeValue = lib.CreateSymbol(envp, value.encode())
        else:
            lib.FBAbort(self._fb)
            raise EngineError(f"{self._template}.{slot.decode()}: cannot assert {kind.__name__}")
        if lib.FBPutSlot(self._fb, slot, cell) != 0:
            lib.FBAbort(self._fb)
            raise EngineError(f"{self._template}.{slot.decode()}: CLIPS refused {value!r}")

    def assert_fact(self) -> None:
        if lib.FBAssert(self._fb) == ffi.NULL and lib.FBError(self._envp) != 0:
            raise EngineError(f"CLIPS could not assert a {self._template} fact")

    def dispose(self) -> None:
        lib.FBDispose(self._fb)
