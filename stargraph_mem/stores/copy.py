"""Copy a whole memory from one database to another (SQLite ⇄ PostgreSQL), all or nothing.

Every stored table is copied row by row in key order into an empty target inside one
transaction of the target; derived data (the search index) is rebuilt there, and each
copied table's digest is compared with the source's before the transaction commits, so
the target ends up holding either an identical memory or nothing. Claims and the
scheduler lease are not copied: they belong to processes of the source.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from stargraph_mem.errors import StoreError
from stargraph_mem.stores.database import DatabaseURL, open_database, parse_database_url
from stargraph_mem.stores.tables import COPIED_TABLES, Table

__all__ = [
    "COPIED_TABLES",
    "CopyReport",
    "CopyTarget",
    "Table",
    "TableSource",
    "copy_database",
]

CHUNK: Final = 5_000


CHECKED: Final = ("episodes", "facts", "audit")
"""Tables that must be empty in a target (a memory is never merged into another)."""


class TableSource(Protocol):
    """A database whose tables can be read for a copy."""

    def rows(self, table: Table, chunk: int) -> AsyncIterator[list[tuple[Any, ...]]]:
        """The table's rows (its :attr:`Table.columns`, in :attr:`Table.order`), by chunk."""
        ...


class CopyTarget(Protocol):
    """A database being filled inside one transaction (see :meth:`loading`)."""

    async def count(self, table: str) -> int: ...

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None: ...

    def rows(self, table: Table, chunk: int) -> AsyncIterator[list[tuple[Any, ...]]]: ...

    async def finish(self) -> None:
        """Rebuild derived data (search index) and counters after the rows are in."""
        ...


class Copyable(Protocol):
    """A database owner that supports copies in both directions."""

    def source(self) -> TableSource: ...

    def loading(self) -> AbstractAsyncContextManager[CopyTarget]: ...


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What was copied: rows per table, and the digest both sides agreed on."""

    source: str
    target: str
    rows: dict[str, int]
    digests: dict[str, str]


def _normal(value: Any) -> Any:
    """One value as both backends give it back (memoryview → bytes, floats as floats)."""
    if isinstance(value, memoryview):
        return value.tobytes()
    return value


async def _digest(
    rows: AsyncIterator[list[tuple[Any, ...]]], on_rows: Callable[[int], None] | None = None
) -> tuple[int, str]:
    """Row count and SHA-256 of a table's rows in order (canonical JSON per row)."""
    digest = hashlib.sha256()
    count = 0
    async for chunk in rows:
        for row in chunk:
            values = [_normal(v) for v in row]
            encoded = [v.hex() if isinstance(v, bytes) else v for v in values]
            digest.update(orjson.dumps(encoded))
            digest.update(b"\n")
        count += len(chunk)
        if on_rows is not None:
            on_rows(len(chunk))
    return count, digest.hexdigest()


def _source_exists(url: DatabaseURL) -> None:
    if url.path is not None and not url.path.is_file():
        raise StoreError(f"{url.path}: database file does not exist", source=str(url))


def _same(a: DatabaseURL, b: DatabaseURL) -> bool:
    """Whether two locations name one database (one file, or one server URL)."""
    if a.path is not None and b.path is not None:
        return a.path.resolve() == b.path.resolve()
    return a.url == b.url


async def copy_database(
    source: str | Path,
    target: str | Path,
    *,
    progress: Callable[[str, int], None] | None = None,
) -> CopyReport:
    """Copy every table of ``source`` into the empty database ``target`` in one target
    transaction; the rows' digests are compared before it commits (see module doc).

    A SQLite target file this copy created is removed again when the copy fails.
    """
    src_url, dst_url = parse_database_url(source), parse_database_url(target)
    _source_exists(src_url)
    if _same(src_url, dst_url):
        raise StoreError(f"copy: source and target are the same database ({src_url})")
    created = dst_url.path is not None and not dst_url.path.exists()
    try:
        return await _copy(src_url, dst_url, progress)
    except BaseException:
        if created and dst_url.path is not None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{dst_url.path}{suffix}").unlink(missing_ok=True)
        raise


async def _copy(
    src_url: DatabaseURL, dst_url: DatabaseURL, progress: Callable[[str, int], None] | None
) -> CopyReport:
    rows: dict[str, int] = {}
    digests: dict[str, str] = {}
    async with open_database(src_url) as src, open_database(dst_url) as dst:
        source: Copyable = src  # type: ignore[assignment]
        destination: Copyable = dst  # type: ignore[assignment]
        reader = source.source()
        async with destination.loading() as loader:
            for name in CHECKED:
                held = await loader.count(name)
                if held:
                    raise StoreError(
                        f"copy: {dst_url} already holds {held} row(s) in {name}; "
                        "the target must be an empty database",
                        target=str(dst_url),
                    )
            for table in COPIED_TABLES:
                count = 0
                async for chunk in reader.rows(table, CHUNK):
                    await loader.insert(table, chunk)
                    count += len(chunk)
                    if progress is not None:
                        progress(table.name, len(chunk))
                rows[table.name] = count
            await loader.finish()
            for table in COPIED_TABLES:
                n_src, d_src = await _digest(reader.rows(table, CHUNK))
                n_dst, d_dst = await _digest(loader.rows(table, CHUNK))
                if (n_src, d_src) != (n_dst, d_dst):
                    raise StoreError(
                        f"copy: {table.name} differs after the copy ({n_src} rows in "
                        f"{src_url}, {n_dst} in {dst_url}); nothing was written",
                        table=table.name,
                    )
                digests[table.name] = d_src
    return CopyReport(str(src_url), str(dst_url), rows, digests)
