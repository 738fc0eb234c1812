"""Where a memory lives: a database URL, parsed and redacted, with no backend imported.

A plain path or ``sqlite:///…`` names a SQLite file, ``postgresql://…`` a server. Backend
modules import this module; it imports none of them (so nothing here cycles back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

from stargraph_mem.errors import StoreConfigError

__all__ = ["EXAMPLES", "DatabaseURL", "parse_database_url", "redact"]

Backend = Literal["sqlite", "postgresql"]

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres"})
EXAMPLES: Final = "a path, 'sqlite:///abs/path.db', 'sqlite:rel/path.db' or 'postgresql://host/db'"


@dataclass(frozen=True, slots=True)
class DatabaseURL:
    """Where a memory lives: ``backend`` and, for SQLite, the file ``path``; ``url`` is
    what the user wrote (PostgreSQL: the connection URL)."""

    backend: Backend
    url: str
    path: Path | None = None

    def __str__(self) -> str:
        """The location for messages: the path, or the URL without its password."""
        if self.path is not None:
            return str(self.path)
        return redact(self.url)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


def bad_location(value: object, why: str) -> StoreConfigError:
    return StoreConfigError(f"database {value!r}: {why}", key="db", value=str(value))


def parse_database_url(value: str | Path) -> DatabaseURL:
    """Read a database location: a plain path, ``sqlite:``/``sqlite:///`` or
    ``postgresql://``/``postgres://``; anything else raises :class:`StoreConfigError`."""
    if isinstance(value, Path):
        return DatabaseURL("sqlite", str(value), value)
    if not isinstance(value, str) or not value.strip():
        raise bad_location(value, f"expected {EXAMPLES}")
    scheme = _SCHEME.match(value)
    if scheme is None:
        path = Path(value).expanduser()
        return DatabaseURL("sqlite", value, path)
    name = scheme.group(1).lower()
    if name in _POSTGRES_SCHEMES:
        parts = urlsplit(value)
        if not parts.netloc and not parts.path.strip("/") and not parts.query:
            raise bad_location(value, "no server or database after 'postgresql://'")
        return DatabaseURL("postgresql", value)
    if name != "sqlite":
        raise bad_location(value, f"unsupported scheme {scheme.group(1)!r} (use {EXAMPLES})")
    rest = value[scheme.end() :]
    if rest.startswith("//"):
        if not rest.startswith("///"):
            raise bad_location(
                value, "a host is not supported for SQLite: write 'sqlite:///abs/path'"
            )
        rest = "/" + rest.lstrip("/")  # sqlite:///abs and sqlite:////abs: the same file
    if not rest.strip("/"):
        raise bad_location(value, "no path after 'sqlite:'")
    return DatabaseURL("sqlite", value, Path(rest).expanduser())
