"""The MCP server's stdio transport: every request line gets an answer (extra ``mcp``).

The SDK's own stdio transport drops a line its JSON reader refuses (text that is not JSON,
a lone surrogate escape such as ``"\\ud800"``, nesting deeper than its parser takes), so a
client waits forever for the reply. Here each line is read and checked first:

- not JSON (or not UTF-8 outside its strings): a JSON-RPC error, code -32700, id ``null``;
- JSON that is no JSON-RPC message (an array, a request without ``method``): -32600, with
  the request's id when it has a usable one, else ``null``;
- a request whose params cannot be used: text that is not UTF-8 or holds a lone surrogate,
  nesting deeper than :data:`MAX_MESSAGE_DEPTH` levels (a tool's arguments may nest
  :data:`~stargraph_mem.model.base.MAX_JSON_DEPTH`): -32602, with the request's id and a
  message naming where (``params.arguments.metadata``).

Nothing refused reaches the server, and a notification (no id) or a client's response is
never answered (JSON-RPC forbids it): the refusal is logged instead. Depth is measured on
the text before anything is parsed, so no nesting can exhaust a parser's stack.

While serving, file descriptors 0 and 1 point at the null device and at stderr (as the
SDK's transport does), so stray reads see end of file and stray prints miss the wire.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.mcpserver import MCPServer
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from stargraph_mem.model.base import MAX_JSON_DEPTH, unicode_problem

__all__ = ["MAX_MESSAGE_DEPTH", "Answer", "screen_line", "serve_stdio_lines"]

MAX_MESSAGE_DEPTH: Final = MAX_JSON_DEPTH + 2
"""Deepest nesting of a message: the envelope and ``params`` around a tool's arguments,
which may nest :data:`MAX_JSON_DEPTH` levels (the SDK's own JSON reader stops at 200)."""

_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""A JSON string (escapes included; linear, no backtracking) or a bracket."""
_COLON: Final = re.compile(r"\s*:")
_WHERE_LEVELS: Final = 3
"""Keys named in a too-deep refusal: ``params.arguments.<argument>``."""

logger = logging.getLogger(__name__)

Answer = SessionMessage | JSONRPCError | None
"""What a line comes to: a message for the server, an error to send back, or nothing."""


# --- the outline of a line, read without parsing ----------------------------------------------


@dataclass
class _Outline:
    """What a scan of the text finds without building anything: the object keys around
    the first place its nesting passes the limit, and the top-level members."""

    deep_at: list[str] | None = None
    top: dict[str, int] = field(default_factory=dict)
    """Top-level keys (``id``, ``method``) and where their values start."""


def _outline(text: str, limit: int) -> _Outline:
    """Scan ``text`` token by token for nesting deeper than ``limit`` and the keys a
    refusal names (text that is not JSON gives some outline; its parse fails later)."""
    found = _Outline()
    depth = 0
    keys: list[str | None] = [None] * (_WHERE_LEVELS + 1)
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if 0 < depth <= _WHERE_LEVELS:
                keys[depth] = None
            elif depth > limit and found.deep_at is None:
                found.deep_at = [key for key in keys[1:] if key is not None]
        elif mark in ("]", "}"):
            depth -= 1
        elif 0 < depth <= _WHERE_LEVELS and (colon := _COLON.match(text, token.end())):
            key = _decoded(mark)
            keys[depth] = key
            if depth == 1 and key is not None:
                found.top.setdefault(key, colon.end())
    return found


def _decoded(token: str) -> str | None:
    """A JSON string token's text (``None`` if it is not one)."""
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _scalar_at(text: str, start: int) -> object:
    """The scalar JSON value starting at ``start`` (``None`` for a container or bad JSON:
    a container is never decoded, so its depth cannot matter)."""
    begin = len(text) - len(text[start:].lstrip())
    if begin >= len(text) or text[begin] in "[{":
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, begin)
    except ValueError:
        return None
    return value


# --- ids, paths, replies ----------------------------------------------------------------------


def _usable_id(value: object) -> str | int | None:
    """A request id to answer with: a string UTF-8 can carry or an integer, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and unicode_problem(value) is None:
        return value
    return None


def _path(parts: list[object]) -> str:
    """``params.arguments.metadata['a b'][0]``: keys as names where they are ones."""
    text = ""
    for part in parts:
        if isinstance(part, str) and part.isascii() and part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{part!a}]"
    return text or "the message"


def _error(code: int, message: str, request_id: object = None) -> JSONRPCError:
    """A JSON-RPC error reply (id ``null`` when the request's id is unknown or unusable)."""
    return JSONRPCError(
        jsonrpc="2.0", id=_usable_id(request_id), error=ErrorData(code=code, message=message)
    )


def _answer(code: int, message: str, members: Collection[str], request_id: object) -> Answer:
    """The error replying to a message with these top-level ``members``; nothing for a
    notification (``method``, no ``id``) or a response (``result`` or ``error``), which
    JSON-RPC never answers (the refusal is logged)."""
    notification = "method" in members and "id" not in members
    response = "method" not in members and ("result" in members or "error" in members)
    if notification or response:
        logger.warning("ignored a message that is not a request: %s", message)
        return None
    return _error(code, message, request_id)


# --- checks on parsed messages ----------------------------------------------------------------


def _bad_text(value: object, utf8: bool) -> str | None:
    """Where the first string (key or value) of ``value`` that UTF-8 cannot carry is, and
    why; found without recursion."""
    stack: list[tuple[object, list[object]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = unicode_problem(item)
            if problem is not None:
                why = problem if utf8 else "is not UTF-8 text"
                return f"{_path(path)} {why}"
        elif isinstance(item, dict):
            for key in item:
                problem = unicode_problem(key)
                if problem is not None:
                    why = problem if utf8 else "is not UTF-8 text"
                    return f"{_path(path)}: key {key!a} {why}"
            stack.extend((child, [*path, key]) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(
                (child, [*path, index]) for index, child in reversed(list(enumerate(item)))
            )
    return None


def _no_constants(name: str) -> None:
    """``NaN`` and ``Infinity`` are not JSON."""
    raise ValueError(f"{name} is not JSON")


def screen_line(line: bytes) -> Answer:
    """What to do with one line read from stdin (see the module docstring)."""
    raw = line.strip()
    if not raw:
        return None
    try:
        text, utf8 = raw.decode("utf-8"), True
    except UnicodeDecodeError:  # bad bytes become U+DC80..U+DCFF, found in strings below
        text, utf8 = raw.decode("utf-8", "surrogateescape"), False
    outline = _outline(text, MAX_MESSAGE_DEPTH)
    if outline.deep_at is not None:
        return _too_deep(text, outline)
    try:
        parsed: object = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        return _error(PARSE_ERROR, f"Parse error: {_parse_problem(exc, utf8)}")
    return _checked(raw, parsed, utf8)


def _too_deep(text: str, outline: _Outline) -> Answer:
    """The refusal of a message nested deeper than :data:`MAX_MESSAGE_DEPTH` (never
    parsed: its id is read from the text); a request's params are invalid, anything else
    is no request."""
    where = _path(list(outline.deep_at or ()))
    code, kind = (
        (INVALID_PARAMS, "Invalid params")
        if "method" in outline.top
        else (INVALID_REQUEST, "Invalid Request")
    )
    message = (
        f"{kind}: {where} nests deeper than {MAX_MESSAGE_DEPTH} levels "
        f"(a tool's arguments may nest {MAX_JSON_DEPTH})"
    )
    request_id = _scalar_at(text, outline.top["id"]) if "id" in outline.top else None
    return _answer(code, message, outline.top, request_id)


def _checked(raw: bytes, parsed: object, utf8: bool) -> Answer:
    """A parsed line as the server's message, or the error that refuses it."""
    if not isinstance(parsed, dict):
        return _error(INVALID_REQUEST, f"Invalid Request: a message is an object, not {_a(parsed)}")
    request_id = parsed.get("id")
    problem = _bad_text(parsed, utf8)
    if problem is not None:
        return _answer(INVALID_PARAMS, f"Invalid params: {problem}", parsed, request_id)
    if "id" in parsed and "method" in parsed and _usable_id(request_id) is None:
        return _error(INVALID_REQUEST, "Invalid Request: an id is a string or an integer")
    try:
        message = jsonrpc_message_adapter.validate_json(raw, by_name=False)
    except ValidationError:
        return _error(
            INVALID_REQUEST,
            "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
            request_id,
        )
    return SessionMessage(message)


def _parse_problem(exc: BaseException, utf8: bool) -> str:
    """A parse failure in one line, for the -32700 reply."""
    if not utf8:
        return "the line is not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (character {exc.pos + 1})"
    return str(exc)


def _a(value: object) -> str:
    """``an array``, ``a number``: a JSON value's kind with its article."""
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kind.get(type(value), "a number")


# --- serving --------------------------------------------------------------------------------


@contextmanager
def _wire() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The process's stdin and stdout for the protocol alone: while serving, fds 0 and 1
    point at the null device and at stderr; both are restored afterwards."""
    try:
        wire_in = os.dup(0)
        try:
            wire_out = os.dup(1)
        except OSError:
            os.close(wire_in)
            raise
    except OSError:  # no descriptors to move: serve the streams in place
        yield sys.stdin.buffer, sys.stdout.buffer
        return
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        with (
            os.fdopen(wire_in, "rb", closefd=False) as reader,
            os.fdopen(wire_out, "wb", closefd=False) as writer,
        ):
            yield reader, writer
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for fd in (null, wire_in, wire_out):
            os.close(fd)


async def _read(
    lines: anyio.AsyncFile[bytes],
    to_server: MemoryObjectSendStream[SessionMessage | Exception],
    to_client: MemoryObjectSendStream[SessionMessage],
) -> None:
    """Hand each good line to the server and answer each bad one; close both at the end."""
    async with to_server, to_client:
        async for line in lines:
            try:
                answer = screen_line(line)
            except Exception:  # a bug here must not end the session, nor leave a request
                logger.exception("could not check a line read from stdin")
                answer = _error(INTERNAL_ERROR, "Internal error: the line could not be checked")
            if isinstance(answer, SessionMessage):
                await to_server.send(answer)
            elif answer is not None:
                await to_client.send(SessionMessage(answer))


async def _write(
    replies: MemoryObjectReceiveStream[SessionMessage], out: anyio.AsyncFile[bytes]
) -> None:
    """Write each message as one line of JSON."""
    async with replies:
        async for reply in replies:
            text = reply.message.model_dump_json(by_alias=True, exclude_unset=True)
            await out.write(text.encode() + b"\n")
            await out.flush()


async def serve_stdio_lines(server: MCPServer[Any]) -> None:
    """Serve ``server`` on stdin/stdout until stdin closes, answering every request."""
    lowlevel = server._lowlevel_server  # the SDK's in-process client reaches it so too
    with _wire() as (wire_in, wire_out):
        lines, out = anyio.wrap_file(wire_in), anyio.wrap_file(wire_out)
        to_server, requests = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        to_client, replies = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read, lines, to_server, to_client.clone())
            tasks.start_soon(_write, replies, out)
            options = lowlevel.create_initialization_options()
            await lowlevel.run(requests, to_client, options)
