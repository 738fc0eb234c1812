"""The README's first command: ``examples/demo.sh`` runs end to end on a scratch database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_runs_end_to_end() -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("STARGRAPH_MEM_DB", None)
    done = subprocess.run(
        ["bash", "examples/demo.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # the demo's own story: a fact replaced by a later episode, explained with its sources
    assert "alice    likes      0.8         coffee" in out
    assert "reason     repeated (alice, likes) in one pass" in out
    assert "replaces   " in out and "(alice, likes, tea)" in out
