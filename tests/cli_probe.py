"""Run the CLI in a fresh interpreter and see which of some modules it loaded (start-up
tests: what a command does not need, it must not import)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WATCHED = (
    "clips",
    "croniter",
    "numpy",
    "pydantic",
    "rich.markdown",
    "stargraph_mem.ir.loader",
    "stargraph_mem.compiler.pack",
    "stargraph_mem.engine.api",
    "stargraph_mem.embedding",
)

PROBE = """
import sys
from stargraph_mem.cli import main
sys.argv = ["stargraph-mem", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
loaded = ",".join(name for name in WATCHED if name in sys.modules)
sys.stderr.write(f"\\nexit={code} loaded={loaded}\\n")
""".replace("WATCHED", repr(WATCHED))


def loaded(env: dict[str, str], *args: str) -> tuple[str, set[str]]:
    """The CLI's exit code for ``args`` and the :data:`WATCHED` modules it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    verdicts = [line for line in done.stderr.splitlines() if line.startswith("exit=")]
    assert len(verdicts) == 1, done.stdout + done.stderr
    code, modules = (part.split("=", 1)[1] for part in verdicts[0].split())
    return code, set(filter(None, modules.split(",")))
