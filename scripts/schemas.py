"""Write, or check, the repository's generated files: the JSON Schemas in ``ir_schemas/``
and the operator table of the rule-pack reference (``docs/rule-packs.md``). For
maintainers and CI (``--check`` exits 1 on drift);
users find the installed schemas with ``stargraph-mem schema --path KIND``.

    python scripts/schemas.py            # rewrite what is out of date
    python scripts/schemas.py --check    # compare only; exit 1 when anything drifted
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from stargraph_mem.authoring.schemas import check_schemas, write_schemas
from stargraph_mem.ir.operators import with_readme_table

ROOT = Path(__file__).resolve().parents[1]
"""The repository: the defaults are its ``ir_schemas/`` and ``docs/rule-packs.md``, wherever the
script is run from."""


class Failed(Exception):
    """A problem reported as ``error: …`` with exit code 1."""


def readme_table(readme: Path, *, write: bool) -> bool:
    """Whether the README's operator table differs from the operator table (rewritten when
    ``write``); a missing README is skipped with a note."""
    if not readme.is_file():
        print(f"{readme}: not found; operator table skipped", file=sys.stderr)
        return False
    text = readme.read_text(encoding="utf-8")
    try:
        fresh = with_readme_table(text)
    except ValueError as exc:
        raise Failed(f"{readme}: {exc}") from exc
    if fresh == text:
        return False
    if write:
        readme.write_text(fresh, encoding="utf-8")
    else:
        print(f"{readme}: operator table out of date", file=sys.stderr)
    return True


def check(directory: Path, readme: Path) -> None:
    """Compare the files with freshly generated ones; :class:`Failed` on any drift."""
    drift = check_schemas(directory)
    for item in drift:
        print(f"{directory / item.name}: {item.problem}", file=sys.stderr)
    stale = readme_table(readme, write=False)
    if drift or stale:
        raise Failed("schemas drifted; run `python scripts/schemas.py` and commit the result")
    print(f"schemas up to date in {directory}")


def write(directory: Path, readme: Path) -> None:
    """Rewrite the schema files and the README's operator table."""
    for written in write_schemas(directory):
        print(f"wrote {written}")
    if readme_table(readme, write=True):
        print(f"wrote the operator table in {readme}")


def parser() -> argparse.ArgumentParser:
    """The command line: ``--check``, ``--dir``, ``--readme``."""
    found = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    found.add_argument("--check", action="store_true", help="compare; exit 1 on drift")
    found.add_argument("--dir", type=Path, default=ROOT / "ir_schemas", help="schema folder")
    page = ROOT / "docs" / "rule-packs.md"
    found.add_argument("--readme", type=Path, default=page, help="the operator table's page")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the script; the exit code (0, or 1 after an ``error: …`` line)."""
    args = parser().parse_args(argv)
    try:
        (check if args.check else write)(args.dir, args.readme)
    except (Failed, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
