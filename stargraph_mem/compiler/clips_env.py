"""CLIPS environments that never print: every message is captured, none reaches stdout."""

from __future__ import annotations

import tempfile
from pathlib import Path

import clips
from clips.routers import Router

from stargraph_mem.errors import CompileError


class QuietRouter(Router):  # type: ignore[misc]
    """Swallows CLIPS console output (errors are still captured by clipspy's error router,
    which has a higher priority and raises them as ``CLIPSError``)."""

    def __init__(self) -> None:
        super().__init__("stargraph-quiet", 30)
        self.captured: list[str] = []

    def query(self, name: str) -> bool:
        return name in ("stdout", "stderr", "stdwrn", "stdin")

    def write(self, name: str, message: str) -> None:
        if len(self.captured) < 1000:
            self.captured.append(message)


def new_environment() -> clips.Environment:
    """A fresh, silent CLIPS environment."""
    env = clips.Environment()
    env.add_router(QuietRouter())
    return env


def load_constructs(env: clips.Environment, text: str) -> None:
    """Load constructs through a temporary file (faster than ``build``; names the failure)."""
    with tempfile.NamedTemporaryFile("w", suffix=".clp", encoding="utf-8", delete=False) as fh:
        fh.write(text)
        path = fh.name
    try:
        env.load(path)
    except clips.CLIPSError as exc:
        detail = " ".join(str(exc).replace(path, "<pack>").split())
        raise CompileError(f"CLIPS rejected the generated program: {detail}") from exc
    finally:
        Path(path).unlink(missing_ok=True)
