"""The import contracts of ``pyproject.toml`` ([tool.importlinter]: layers and no cycles)
hold: ``lint-imports`` run on the package, as CI runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports() -> str:
    """The ``lint-imports`` beside this interpreter (a venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    assert found is not None, "lint-imports is not installed (the test extra has it)"
    return found


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [lint_imports(), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", done.stdout), done.stdout
