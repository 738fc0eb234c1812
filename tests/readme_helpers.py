"""Run a README section's Python example verbatim and compare what it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_section_example(heading: str) -> tuple[str, str]:
    """The first ``python`` block of the README's ``## heading`` section, and the output
    shown after it (the block that follows ``prints``)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```\n", 1)[0]
    output = section.split("prints\n\n```\n", 1)[1].split("```\n", 1)[0]
    return code, output


def run_example(
    code: str, tmp_path: Path, pack: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as ``example.py`` in ``tmp_path`` with a copy of the repository's ``pack``
    at the same relative path."""
    (tmp_path / pack).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / pack).write_text((ROOT / pack).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
