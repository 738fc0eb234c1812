"""``stargraph-mem mcp`` answers every request line, even one it cannot read: a line that is
not JSON gets a -32700 error with id null, a request with a lone surrogate, undecodable
bytes or nesting too deep a -32602 error carrying its id, and the server goes on serving
with nothing written. Driven over a real subprocess's stdin and stdout; the line checks
are also run directly, with nesting far beyond any parser's stack."""

from __future__ import annotations

import json
import queue
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from e2e_helpers import DEDUP
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCRequest

from stargraph_mem.integrations.mcp_server import TOOL_NAMES
from stargraph_mem.integrations.mcp_stdio import MAX_MESSAGE_DEPTH, screen_line
from stargraph_mem.model.base import MAX_JSON_DEPTH

SCRIPT = Path(sys.executable).with_name("stargraph-mem")
NO_REPLY_AFTER = 120.0
"""Seconds to wait for a reply before calling it missing (never reached when it comes)."""

SURROGATE = '"\\ud800"'
"""A lone surrogate as JSON writes it: valid JSON syntax, not valid Unicode text."""


def nested(levels: int) -> str:
    """JSON text of ``levels`` nested lists around ``1``."""
    return "[" * levels + "1" + "]" * levels


def call(request_id: object, tool: str, arguments: str) -> bytes:
    """A ``tools/call`` line, its arguments given as JSON text (it may be hostile)."""
    envelope = f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "tools/call",'
    return f'{envelope} "params": {{"name": "{tool}", "arguments": {arguments}}}}}'.encode()


def episode_args(**extra: str) -> str:
    """``record_episode`` arguments: a valid episode, with fields replaced by raw JSON."""
    fields = {"content": '"Alice likes tea"', "user": '"alice"', "session": '"s1"'}
    fields |= {"agent": '"rag"', **extra}
    return "{" + ", ".join(f'"{key}": {value}' for key, value in fields.items()) + "}"


class Server:
    """``stargraph-mem mcp`` in a subprocess: write lines, read the replies one by one."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.stderr = ""
        """What the server wrote on stderr, once it exited."""
        self.replies: queue.Queue[bytes] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, out: IO[bytes]) -> None:
        for line in out:
            self.replies.put(line)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        try:
            line = self.replies.get(timeout=NO_REPLY_AFTER)
        except queue.Empty:
            pytest.fail("the server sent no reply", pytrace=False)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, line: bytes) -> dict[str, Any]:
        self.send(line)
        return self.reply()


@contextmanager
def serving(db: Path) -> Iterator[Server]:
    """A server past the initialize handshake; on exit stdin closes and it must exit 0."""
    proc = subprocess.Popen(
        [str(SCRIPT), "mcp", "--db", str(db), "--pack", str(DEDUP)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    server = Server(proc)
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    try:
        assert server.ask(json.dumps(hello).encode())["id"] == 0
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield server
    finally:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.close()
        code = proc.wait(timeout=NO_REPLY_AFTER)
        server.stderr = proc.stderr.read().decode()
        proc.stderr.close()
        assert code == 0, server.stderr


def error_of(reply: dict[str, Any], request_id: object, code: int) -> str:
    """The message of an error reply, after checking its id and code."""
    assert set(reply) == {"jsonrpc", "id", "error"}, reply
    assert (reply["jsonrpc"], reply["id"], reply["error"]["code"]) == ("2.0", request_id, code)
    message: str = reply["error"]["message"]
    return message


def episodes(db: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT id FROM episodes").fetchall()


# --- over stdio ---------------------------------------------------------------------------------


def test_every_unreadable_request_gets_an_error_with_its_id_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "m.db"
    with serving(db) as server:
        surrogate = server.ask(call(1, "explain_fact", f'{{"fact_id": {SURROGATE}}}'))
        assert error_of(surrogate, 1, -32602) == (
            "Invalid params: params.arguments.fact_id contains a lone surrogate '\\ud800' at "
            "index 0 (not valid Unicode text: it cannot be stored as UTF-8)"
        )
        content = server.ask(call("two", "record_episode", episode_args(content=SURROGATE)))
        assert "params.arguments.content contains a lone surrogate" in error_of(
            content, "two", -32602
        )
        key = server.ask(call(3, "record_episode", episode_args(metadata=f"{{{SURROGATE}: 1}}")))
        assert "params.arguments.metadata: key '\\ud800' contains a lone surrogate" in (
            error_of(key, 3, -32602)
        )
        too_deep = (
            "Invalid params: params.arguments.metadata nests deeper than 66 levels "
            "(a tool's arguments may nest 64)"
        )
        for request_id, levels in ((4, 200), (5, 5_000), (6, 100_000)):
            deep = episode_args(metadata=f'{{"a": {nested(levels)}}}')
            reply = server.ask(call(request_id, "record_episode", deep))
            assert error_of(reply, request_id, -32602) == too_deep
        not_utf8 = call(7, "record_episode", episode_args()).replace(b"Alice", b"Al\xffce")
        assert error_of(server.ask(not_utf8), 7, -32602) == (
            "Invalid params: params.arguments.content is not UTF-8 text"
        )
        assert error_of(server.ask(b"hello, server"), None, -32700) == (
            "Parse error: Expecting value (character 1)"
        )
        assert error_of(server.ask(b'{"jsonrpc": "2.0", "id": 8, '), None, -32700)
        assert error_of(server.ask(b"[1, 2]"), None, -32600) == (
            "Invalid Request: a message is an object, not an array"
        )
        no_method = server.ask(b'{"jsonrpc": "2.0", "id": 9}')
        assert "not a JSON-RPC 2.0 request" in error_of(no_method, 9, -32600)
        # wrong types: params the SDK refuses (-32602), arguments a tool refuses (isError)
        wrong = b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": 5}}'
        assert error_of(server.ask(wrong), 13, -32602)
        typed = server.ask(call(14, "record_episode", episode_args(content="5")))
        assert typed["id"] == 14 and typed["result"]["isError"] is True
        assert "content" in typed["result"]["content"][0]["text"]
        # a notification is never answered, even a bad one: the next reply is the next id's
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\\udfff"}}')
        listed = server.ask(b'{"jsonrpc": "2.0", "id": 10, "method": "tools/list"}')
        assert listed["id"] == 10 and len(listed["result"]["tools"]) == len(TOOL_NAMES)
        # and the server still serves calls, with nothing of the refused ones written
        facts = server.ask(call(11, "list_facts", "{}"))
        assert facts["id"] == 11 and facts["result"]["structuredContent"]["total"] == 0
        assert episodes(db) == []
        recorded = server.ask(call(12, "record_episode", episode_args()))
        assert recorded["id"] == 12 and not recorded["result"].get("isError"), recorded
    assert len(episodes(db)) == 1
    assert "WARNING  ignored a message" in server.stderr  # the notification, logged


def test_arguments_nested_to_the_limit_reach_the_tool(tmp_path: Path) -> None:
    # the arguments, metadata and 62 lists: 64 levels (with the envelope and params, 66)
    at_limit = episode_args(metadata=f'{{"a": {nested(MAX_JSON_DEPTH - 2)}}}')
    over = episode_args(metadata=f'{{"a": {nested(MAX_JSON_DEPTH - 1)}}}')
    with serving(tmp_path / "m.db") as server:
        kept = server.ask(call(1, "record_episode", at_limit))
        assert kept["id"] == 1 and not kept["result"].get("isError"), kept
        assert error_of(server.ask(call(2, "record_episode", over)), 2, -32602)


# --- the line checks ----------------------------------------------------------------------------


def refusal(line: bytes) -> tuple[object, int, str]:
    answer = screen_line(line)
    assert isinstance(answer, JSONRPCError), answer
    return answer.id, answer.error.code, answer.error.message


@pytest.mark.parametrize("levels", [MAX_MESSAGE_DEPTH - 1, 10_000, 1_000_000])
def test_depth_is_measured_on_the_text_without_recursion(levels: int) -> None:
    line = f'{{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {{"x": {nested(levels)}}}}}'
    if levels + 2 <= MAX_MESSAGE_DEPTH:
        answer = screen_line(line.encode())
        assert isinstance(answer, SessionMessage)
        assert isinstance(answer.message, JSONRPCRequest)
        return
    assert refusal(line.encode()) == (
        1,
        -32602,
        "Invalid params: params.x nests deeper than 66 levels (a tool's arguments may nest 64)",
    )


def test_brackets_in_strings_are_not_nesting_and_escaped_keys_are_read() -> None:
    brackets = "[{" * MAX_MESSAGE_DEPTH + '\\"'
    line = f'{{"jsonrpc": "2.0", "method": "ping", "params": {{"s": "{brackets}"}}, "\\u0069d": 5}}'
    answer = screen_line(line.encode())
    assert isinstance(answer, SessionMessage)
    assert isinstance(answer.message, JSONRPCRequest) and answer.message.id == 5
    assert answer.message.params == {"s": "[{" * MAX_MESSAGE_DEPTH + '"'}


@pytest.mark.parametrize(
    ("line", "code"),
    [
        # an id nested too deep is never decoded, one that is not text never echoed
        (f'{{"jsonrpc": "2.0", "id": {nested(100)}, "method": "ping"}}', -32602),
        (f'{{"jsonrpc": "2.0", "id": {SURROGATE}, "method": "ping", "params": {{}}}}', -32602),
        ('{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"n": NaN}}', -32700),
        ('{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"n": 1} x', -32700),
        ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600),
        ("]]]] " + '"id": 1', -32700),
        ("]" * 20 + "[" * 5 + '"id": 1', -32700),
        ('{"a": ' * 100, -32600),  # too deep to parse, and no method: no request
    ],
)
def test_an_id_that_cannot_be_echoed_is_answered_as_null(line: str, code: int) -> None:
    request_id, got, _ = refusal(line.encode())
    assert (request_id, got) == (None, code)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"   \r",
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\\ud800"}}',
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": ' + b"[" * 5000 + b"}",
        b'{"jsonrpc": "2.0", "id": 3, "result": {"a": "\\ud800"}}',
        b'{"jsonrpc": "2.0", "id": 3, "error": {"code": 1, "message": "' + b"\xff" + b'"}}',
        b'{"jsonrpc": "2.0", "id": 3, "result": ' + b"[" * 5000 + b"}",
    ],
)
def test_blank_lines_notifications_and_responses_get_no_reply(line: bytes) -> None:
    assert screen_line(line) is None
