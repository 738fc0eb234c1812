"""Write, or check, the JSON Schemas in ``ir_schemas/`` (generated from the IR models and
the operator table). For maintainers and CI (``--check`` exits 1 on drift); users find the
installed schemas with ``stargraph-mem schema --path KIND``. The operator table of the
rule-pack reference is ``scripts/gen_docs.py``'s.

    python scripts/schemas.py            # rewrite what is out of date
    python scripts/schemas.py --check    # compare only; exit 1 when anything drifted
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from stargraph_mem.authoring.schemas import check_schemas, write_schemas

ROOT = Path(__file__).resolve().parents[1]
"""The repository: the default folder is its ``ir_schemas/``, wherever the script runs."""


class Failed(Exception):
    """A problem reported as ``error: …`` with exit code 1."""


def check(directory: Path) -> None:
    """Compare the files with freshly generated ones; :class:`Failed` on any drift."""
    drift = check_schemas(directory)
    for item in drift:
        print(f"{directory / item.name}: {item.problem}", file=sys.stderr)
    if drift:
        raise Failed("schemas drifted; run `python scripts/schemas.py` and commit the result")
    print(f"schemas up to date in {directory}")


def write(directory: Path) -> None:
    """Rewrite the schema files."""
    for written in write_schemas(directory):
        print(f"wrote {written}")


def parser() -> argparse.ArgumentParser:
    """The command line: ``--check``, ``--dir``."""
    found = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    found.add_argument("--check", action="store_true", help="compare; exit 1 on drift")
    found.add_argument("--dir", type=Path, default=ROOT / "ir_schemas", help="schema folder")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the script; the exit code (0, or 1 after an ``error: …`` line)."""
    args = parser().parse_args(argv)
    try:
        (check if args.check else write)(args.dir)
    except (Failed, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
