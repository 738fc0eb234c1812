"""``examples/stargraph08_script.py``: a stargraph 0.8 script, import paths renamed, runs
as written in a fresh directory and prints what its author expects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "stargraph08_script.py"


def test_the_script_uses_no_stargraph_mem_name_but_its_imports() -> None:
    text = SCRIPT.read_text()
    code = text.split('"""', 2)[2]  # after the module docstring
    imports = [line for line in code.splitlines() if "stargraph_mem" in line]
    assert imports == [
        "from stargraph_mem.errors import MigrationNotSupported",
        "from stargraph_mem.salience import RuleBasedScorer, SalienceContext",
        "from stargraph_mem.stores import (",
    ]
    assert "due_only" not in code and "Consolidator" not in code


def test_the_stargraph_08_script_runs_unchanged(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        "session S1/rag: ['ep-2', 'ep-1']",
        "alice/rag: ['ep-6', 'ep-3', 'ep-2', 'ep-1']",
        "alice: 5",
        "health fragments: 6",
        "cadence every: 100",
        "deltas: ['add', 'add', 'add', 'update', 'noop', 'add']",
        "rule ids: ['rule.memory.preferences']",
        "alice likes: 1 fact(s)",
        "alice facts: 3",
        "  from ['ep-2'] confidence 0.8",
        "  from ['ep-3', 'ep-1'] confidence 0.8",
        "  from ['ep-4'] confidence 0.8",
        "salience in [0, 1]: True older scores lower: True",
        "pinned: True",
        "unpinned",
        "migrated to version 2",
        "refused: rename_column v1-add-column-only",
    ]
    assert {p.name for p in tmp_path.iterdir()} >= {".memory", ".facts"}
