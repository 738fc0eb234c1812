"""``stargraph-mem new``: a starting rule pack and its pack test file.

The pack has one example rule and passes ``validate``, ``lint`` and ``test --coverage``
as written; both files name their JSON Schema on their first line (a path relative to
the file) so an editor running yaml-language-server checks and completes them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from stargraph_mem.authoring.packtest import default_tests_path
from stargraph_mem.authoring.schemas import schema_path
from stargraph_mem.errors import ScaffoldError
from stargraph_mem.ir.models import NAME_PATTERN

PACK_TEMPLATE = """\
# yaml-language-server: $schema={schema}
# Rule pack '{name}'. Check and test it (from this file's directory) with:
#   stargraph-mem validate {name}.yaml
#   stargraph-mem lint {name}.yaml
#   stargraph-mem test {name}.yaml --coverage     # runs tests/{name}.yaml
ir_version: 1
pack: {name}
version: "0.1.0"
description: What this pack consolidates.
fields:                      # the metadata keys rules read, with their types
  subject: string
  predicate: string
  object: string
defaults:
  cadence: {{cron: "0 3 * * *"}}   # nightly; {{every: 1}} consolidates on every new episode
  confidence: 0.8
rules:
  # An example rule: an episode whose metadata holds a statement (subject, predicate,
  # object) becomes a fact. `bind` names a value; "{{s}}" inserts it into a template.
  - id: add_statement
    description: An episode stating something becomes a fact.
    when:
      - episode: {{subject: {{bind: s}}, predicate: {{bind: p}}, object: {{bind: o}}}}
    emit:
      kind: add
      subject: "{{s}}"
      predicate: "{{p}}"
      object: "{{o}}"
      reason: "new statement about {{s}}"
"""

TESTS_TEMPLATE = """\
# yaml-language-server: $schema={schema}
# Cases for ../{name}.yaml: run with `stargraph-mem test {name}.yaml --coverage` there.
pack: {name}
now: 2026-01-01T03:00:00+00:00
coverage: {{min: 1.0}}
cases:
  - name: a statement becomes a fact
    episodes:
      - {{id: e1, triple: [alice, likes, tea]}}
      - {{id: e2, content: "no statement here"}}
    expect:
      deltas:
        - {{kind: add, rule: add_statement, triple: [alice, likes, tea], sources: [e1]}}
      facts:
        - {{triple: [alice, likes, tea], id: e1, rule: add_statement}}
"""


def pack_file(target: str | Path) -> Path:
    """``rules/mine`` or ``rules/mine.yaml`` → ``rules/mine.yaml``."""
    path = Path(target)
    return path if path.suffix == ".yaml" else path.with_name(path.name + ".yaml")


def schema_reference(kind: str, directory: Path) -> str:
    """The schema's path relative to ``directory`` (a file URI when there is none)."""
    schema = schema_path(kind).resolve()
    try:
        return Path(os.path.relpath(schema, directory.resolve())).as_posix()
    except ValueError:  # another drive
        return schema.as_uri()


def new_pack(target: str | Path) -> list[Path]:
    """Write the pack ``target`` (``.yaml`` added when missing) and its test file beside
    it in ``tests/``; refuse to overwrite either. Returns the two paths."""
    pack = pack_file(target)
    name = pack.stem
    if not re.match(NAME_PATTERN, name):
        raise ScaffoldError(
            f"invalid pack name {name!r}: use lower-case letters, digits and '_' "
            "(starting with a letter), at most 63 characters",
            path=str(pack),
        )
    tests = default_tests_path(pack)
    for path in (pack, tests):
        if path.exists():
            raise ScaffoldError(f"{path}: already exists (not overwritten)", path=str(path))
    texts = {
        pack: PACK_TEMPLATE.format(schema=schema_reference("pack", pack.parent), name=name),
        tests: TESTS_TEMPLATE.format(schema=schema_reference("tests", tests.parent), name=name),
    }
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    return [pack, tests]
