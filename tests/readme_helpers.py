"""Run a documentation section's Python example verbatim and compare what it prints."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def docs_page(marker: str) -> str:
    """The text of the one documentation page that holds ``marker``."""
    found = [
        page.read_text(encoding="utf-8")
        for page in sorted(DOCS.rglob("*.md"))
        if marker in page.read_text(encoding="utf-8")
    ]
    assert len(found) == 1, f"{len(found)} pages of docs/ hold {marker!r}"
    return found[0]


def readme_section_example(heading: str) -> tuple[str, str]:
    """The first ``python`` block of the README's ``## heading`` section, and the output
    shown after it (the block that follows ``prints``)."""
    text = docs_page(f"\n## {heading}\n")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```\n", 1)[0]
    output = section.split("prints\n\n```\n", 1)[1].split("```\n", 1)[0]
    return code, output


def readme_example_after(marker: str) -> tuple[str, str]:
    """The first ``python`` block after ``marker`` in the documentation, and the output shown
    after it (the block that follows ``prints``)."""
    text = docs_page(marker).split(marker, 1)[1]
    code = text.split("```python\n", 1)[1].split("```\n", 1)[0]
    output = text.split("prints\n\n```\n", 1)[1].split("```\n", 1)[0]
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


def readme_transcript(marker: str) -> list[tuple[list[str], str]]:
    """The ``$ command`` / output pairs of the documentation's first shell block after
    ``marker``."""
    text = docs_page(marker)
    block = text.split(marker, 1)[1].split("```\n", 1)[1].split("```\n", 1)[0]
    steps: list[tuple[list[str], str]] = []
    command = ""
    for line in block.splitlines():
        if line.startswith("$ ") or command.endswith("\\"):
            start = "" if line.startswith("$ ") else command.removesuffix("\\")
            command = (start + " " + line.removeprefix("$ ")).strip()
            if not command.endswith("\\"):
                steps.append((shlex.split(command), ""))
        else:
            args, out = steps[-1]
            steps[-1] = (args, out + line + "\n")
    return steps


def check_transcript(marker: str, count: int) -> None:
    """Run the documentation's shell block after ``marker`` (``count`` commands, each
    ``stargraph-mem ...``) in the working directory; each must print what the page shows."""
    from typer.testing import CliRunner

    from stargraph_mem.cli import app

    steps = readme_transcript(marker)
    assert len(steps) == count
    for args, expected in steps:
        assert args[0] == "stargraph-mem"
        result = CliRunner().invoke(app, args[1:])
        assert (result.exit_code, result.stdout) == (0, expected), args
