"""JSON Schemas of what users write, written to ``ir_schemas/`` and checked for drift.

Three files: ``rule_pack.v1.json`` (a rule pack, :mod:`stargraph_mem.ir.schema`),
``pack_tests.v1.json`` (a pack test file, from the models of
:mod:`~stargraph_mem.authoring.packtest`) and ``episode.v1.json`` (one line of what
``stargraph-mem ingest`` reads, from :class:`~stargraph_mem.stores.models.Episode`).
Pack test files and episode lines carry no version; ``v1`` names their first format.

Where they are: the repository keeps them in ``ir_schemas/``; a wheel carries the same
files as ``stargraph_mem/ir_schemas/`` (``force-include`` in ``pyproject.toml``), and
``stargraph-mem schema --path pack`` prints the copy the running code uses. The files
have no ``$id``: a schema is named by its path, every ``$ref`` is local
(``#/$defs/...``), so nothing needs a URI to be fetched, and an editor is pointed at the
file by a first line such as ``# yaml-language-server: $schema=../ir_schemas/rule_pack.v1.json``
(a path relative to the YAML file).

The models load when a schema is generated, not on import: ``stargraph-mem schema --path``
imports this module and starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import orjson

Schema = dict[str, Any]

SCHEMA_DIR = Path("ir_schemas")
"""Where :func:`write_schemas` and :func:`check_schemas` look by default (relative to the
working directory; ``scripts/schemas.py`` passes the repository's)."""
FILES = {
    "pack": "rule_pack.v1.json",  # ir_version 1 (tests/test_schemas.py checks IR_VERSION)
    "tests": "pack_tests.v1.json",
    "episode": "episode.v1.json",
}
"""Schema file name by what it describes."""
PACKAGED = "ir_schemas"
"""The schemas' directory inside an installed ``stargraph_mem`` package."""


def pack_tests_schema() -> Schema:
    """A pack test file: the models' shape, an ``expect`` with at least one section, a
    case in one of its two forms, and a pass time on the file, on every single-pass case
    or on every pass.

    A single-pass case has an ``expect`` and no ``passes``; a multi-pass case has
    ``passes``, no ``now`` or ``episodes`` of its own, and an ``expect`` on the case or
    on at least one pass.

    Only the loader decides on duplicate case names, ids repeated within a case, passes
    whose times go backwards, and times that fall before year 1; the run decides whether
    ``pack`` names the pack.
    """
    from stargraph_mem.authoring.packtest import Expect, PackTests
    from stargraph_mem.ir.schema import duration_text, model_schema

    schema = model_schema(PackTests, "stargraph_mem pack test file")
    defs = schema["$defs"]
    duration_text(defs)
    defs["Expect"]["anyOf"] = [
        {"required": [name], "properties": {name: {"type": "array"}}}
        for name in Expect.model_fields
    ]
    expects = {"required": ["expect"], "properties": {"expect": {"type": "object"}}}
    single = {
        "required": ["expect"],
        "properties": {"expect": {"type": "object"}, "passes": {"type": "null"}},
    }
    multi = {
        "required": ["passes"],
        "properties": {"passes": {"type": "array"}},
        "not": {"anyOf": [{"required": ["now"]}, {"required": ["episodes"]}]},
        "anyOf": [expects, {"properties": {"passes": {"contains": expects}}}],
    }
    defs["Case"]["anyOf"] = [single, multi]
    timed = {"required": ["now"], "properties": {"now": {"type": "string"}}}
    multi_pass = {"required": ["passes"], "properties": {"passes": {"type": "array"}}}
    every_case = {"properties": {"cases": {"items": {"anyOf": [timed, multi_pass]}}}}
    schema["anyOf"] = [timed, every_case]
    return schema


def episode_schema() -> Schema:
    """One JSON line of ``ingest``: an episode, with the metadata keys the default
    classification reads typed as ``check_honoured_metadata`` wants them.

    Only ``ingest`` decides on NUL characters and lone surrogates in text, integers
    beyond 64 bits in metadata, and times whose UTC value leaves years 1 to 9999; it
    also takes times the schema refuses (a Unix time as a number, ``_`` before the time).
    """
    from stargraph_mem.ir.schema import model_schema
    from stargraph_mem.model.episodes import HONOURED_METADATA_KEYS, Episode, Intent

    schema = model_schema(Episode, "stargraph_mem episode (one JSON line of ingest)")
    text = {"type": ["string", "null"]}
    honoured: dict[str, Any] = {name: text for name in HONOURED_METADATA_KEYS}
    # any string intent is stored; one other than noop/delete/update classifies as an add
    honoured["intent"] = {"type": ["string", "null"], "examples": [*get_args(Intent)]}
    honoured["replaces"] = {"type": ["array", "null"], "items": {"type": "string"}}
    schema["properties"]["metadata"]["properties"] = honoured
    return schema


def _body(schema: Schema) -> bytes:
    return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def schemas() -> dict[str, bytes]:
    """File name → schema bytes (sorted keys, trailing newline: stable for diffs)."""
    from stargraph_mem.ir.schema import rule_pack_schema

    built = {"pack": rule_pack_schema(), "tests": pack_tests_schema(), "episode": episode_schema()}
    return {FILES[kind]: _body(schema) for kind, schema in built.items()}


@dataclass(frozen=True)
class SchemaDrift:
    """A schema file that is missing, stale or unexpected."""

    name: str
    problem: str


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """(Re)write every schema file; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, body in schemas().items():
        path = directory / name
        path.write_bytes(body)
        written.append(path)
    return written


def check_schemas(directory: Path = SCHEMA_DIR) -> list[SchemaDrift]:
    """Compare files on disk with freshly generated schemas."""
    expected = schemas()
    drift = []
    for name, body in expected.items():
        path = directory / name
        if not path.exists():
            drift.append(SchemaDrift(name, "missing"))
        elif path.read_bytes() != body:
            drift.append(SchemaDrift(name, "out of date"))
    if directory.exists():
        for path in sorted(directory.glob("*.json")):
            if path.name not in expected:
                drift.append(SchemaDrift(path.name, "not generated by this version"))
    return drift


def installed_dir() -> Path:
    """The schemas the running code ships: the package's copy in a wheel, else the
    checkout's ``ir_schemas/`` (an editable install runs from the repository)."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / PACKAGED
    return packaged if packaged.is_dir() else package.parent / PACKAGED


def schema_path(kind: str) -> Path:
    """The installed schema file for ``kind`` (``pack``, ``tests`` or ``episode``)."""
    return installed_dir() / FILES[kind]
