"""The specification's YAML store wiring: ``stores: {memory: "sqlite:./.memory"}``.

:func:`load_stores` reads the ``stores`` mapping (from a YAML file, or a mapping already
loaded) and returns the stores it names, not yet opened. Keys: ``memory`` (episodes,
:class:`SQLiteMemoryStore`) and ``facts`` (:class:`SQLiteFactStore`; ``fact`` too).
Values: ``sqlite:./x`` or ``sqlite:x`` (relative), ``sqlite:///abs/x`` (absolute) or a
plain path. A relative path is taken from the YAML file's folder when read from a file,
else from the working directory. Anything else is a :class:`StoreConfigError` naming the
key and the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from stargraph_mem.errors import StoreConfigError
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

__all__ = ["Stores", "load_stores", "sqlite_path"]

_KEYS: Final = {"memory": "memory", "facts": "facts", "fact": "facts"}
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
"""A URL scheme (two characters at least, so ``C:\\x`` stays a Windows path)."""


@dataclass
class Stores:
    """The stores a ``stores:`` mapping names (``None`` for those it leaves out)."""

    memory: SQLiteMemoryStore | None = None
    facts: SQLiteFactStore | None = None

    async def close(self) -> None:
        """Close every store that was opened."""
        for store in (self.memory, self.facts):
            if store is not None:
                await store.close()


def _bad(key: str, value: object, why: str) -> StoreConfigError:
    return StoreConfigError(f"stores.{key}: {value!r}: {why}", key=key, value=value)


def sqlite_path(key: str, value: object, base: Path | None = None) -> Path:
    """The database path ``value`` names (``sqlite:``, ``sqlite:///`` or a plain path)."""
    if not isinstance(value, str | Path) or not str(value).strip():
        raise _bad(key, value, "expected a non-empty SQLite location such as 'sqlite:./.memory'")
    text = str(value)
    scheme = _SCHEME.match(text)
    if scheme is not None:
        if scheme.group(1).lower() != "sqlite":
            supported = "'sqlite:./x', 'sqlite:///abs/x' or a plain path"
            raise _bad(key, value, f"unsupported scheme {scheme.group(1)!r} (use {supported})")
        text = text[scheme.end() :]
        if text.startswith("//"):
            if not text.startswith("///"):
                raise _bad(key, value, "a host is not supported: write 'sqlite:///abs/path'")
            text = text[2:]
        if not text:
            raise _bad(key, value, "no path after 'sqlite:'")
    path = Path(text).expanduser()
    return path if path.is_absolute() or base is None else base / path


def _document(source: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], Path | None]:
    """The mapping to read and the folder relative paths start from."""
    if isinstance(source, Mapping):
        return source, None
    path = Path(source)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise StoreConfigError(f"{path}: cannot read the store configuration: {exc}") from exc
    if not isinstance(loaded, Mapping):
        raise StoreConfigError(f"{path}: expected a mapping with a 'stores' key", key="stores")
    return loaded, path.parent


def load_stores(source: str | Path | Mapping[str, Any]) -> Stores:
    """The stores named by ``stores:`` in a YAML file or mapping (the mapping may also be
    the ``stores`` mapping itself). Stores open on first use (or ``async with``)."""
    document, base = _document(source)
    mapping = document.get("stores", document)
    if not isinstance(mapping, Mapping) or not mapping:
        raise StoreConfigError(
            f"stores: expected a mapping such as {{memory: 'sqlite:./.memory'}}, got {mapping!r}",
            key="stores",
            value=mapping,
        )
    stores = Stores()
    for key, value in mapping.items():
        kind = _KEYS.get(str(key))
        if kind is None:
            raise _bad(str(key), value, f"unknown store (use {', '.join(sorted(_KEYS))})")
        path = sqlite_path(str(key), value, base)
        if kind == "memory":
            stores.memory = SQLiteMemoryStore(path=path)
        else:
            stores.facts = SQLiteFactStore(path)
    return stores
