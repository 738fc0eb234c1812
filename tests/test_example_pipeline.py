"""``examples/pipeline.py``: the Consolidator as a node of a plain asyncio pipeline."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_pipeline_consolidates_each_turn_before_answering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await load_example("pipeline").main(tmp_path / "memory.db")
    assert capsys.readouterr().out.splitlines() == [
        "remember turn0: add=1",
        "answer turn0: alice likes tea",
        "remember turn1: noop=1",
        "answer turn1: alice likes tea",
        "remember turn2: update=1",
        "answer turn2: alice likes coffee",
        "tick: 0 passes due",
        "why: changed_object_update: (alice, likes) changed to coffee",
    ]
