"""CLIPS environments that never print: every message is captured, none reaches stdout.

The one exception: while a pass runs its rules, the Python routers are off (see
``PackRuntime._unrouted``), so a rule's runtime error goes to stderr."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Final

import clips
from clips.routers import Router

from stargraph_mem.compiler.expressions import NORMAL_FORM_FUNCTION
from stargraph_mem.errors import CompileError
from stargraph_mem.ir.reference import normal_form_of

QUIET_ROUTER: Final = b"stargraph-quiet"
"""The name of the :class:`QuietRouter` (a pass's run switches it off: see
``PackRuntime._unrouted``)."""


class QuietRouter(Router):  # type: ignore[misc]
    """Swallows CLIPS console output (errors are still captured by clipspy's error router,
    which has a higher priority and raises them as ``CLIPSError``)."""

    def __init__(self) -> None:
        super().__init__(QUIET_ROUTER.decode(), 30)
        self.captured: list[str] = []

    def query(self, name: str) -> bool:
        return name in ("stdout", "stderr", "stdwrn", "stdin")

    def write(self, name: str, message: str) -> None:
        if len(self.captured) < 1000:
            self.captured.append(message)


def new_environment() -> clips.Environment:
    """A fresh, silent CLIPS environment, with the one Python function a generated program
    calls defined (:data:`~stargraph_mem.compiler.expressions.NORMAL_FORM_FUNCTION`)."""
    env = clips.Environment()
    env.add_router(QuietRouter())
    env.define_function(normal_form_of, NORMAL_FORM_FUNCTION)
    return env


def constructs(text: str) -> list[tuple[str, str]]:
    """The top-level constructs of CLIPS source ``text``: ``(name, text)`` in order.

    Strings (with their escapes) and ``;`` comments are skipped, so parentheses inside
    them do not count."""
    out: list[tuple[str, str]] = []
    depth, start, i, n = 0, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == ";":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                body = text[start : i + 1]
                words = body[1:].split(None, 2)
                out.append((words[1].rstrip(")") if len(words) > 1 else "", body))
        i += 1
    return out


def rejected_construct(text: str) -> tuple[str, str] | None:
    """The first construct of ``text`` CLIPS refuses, built one by one in a fresh
    environment: its name and CLIPS's own words (``None`` when each one builds)."""
    env = new_environment()
    for name, body in constructs(text):
        try:
            env.build(body)
        except clips.CLIPSError as exc:
            return name, " ".join(str(exc).split())
    return None


def load_constructs(env: clips.Environment, text: str) -> None:
    """Load constructs through a temporary file (faster than ``build``).

    When CLIPS refuses the program, the :class:`CompileError` names the first construct
    it refuses (``construct`` in the context, CLIPS's message as ``detail``), found by
    building the constructs one at a time; the message never repeats CLIPS's dump."""
    with tempfile.NamedTemporaryFile("w", suffix=".clp", encoding="utf-8", delete=False) as fh:
        fh.write(text)
        path = fh.name
    try:
        env.load(path)
    except clips.CLIPSError as exc:
        found = rejected_construct(text)
        if found is None:
            detail = " ".join(str(exc).replace(path, "<program>").split())
            raise CompileError(
                "CLIPS rejected the generated program", construct=None, detail=detail
            ) from exc
        name, detail = found
        raise CompileError(
            f"CLIPS rejected the generated construct '{name}'", construct=name, detail=detail
        ) from exc
    finally:
        Path(path).unlink(missing_ok=True)
