"""Where each part of a loaded YAML document was written: positions by IR path, and
:class:`~stargraph_mem.errors.IRIssue` values placed on them.

A leaf of ``ir``: the loader fills a :class:`SourceMap`, and the checks and the
validation-error mapping (:mod:`~stargraph_mem.ir.issues`) read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stargraph_mem.errors import IRIssue

PathKey = tuple[str | int, ...]
Positions = dict[PathKey, tuple[int, int]]


class SourceMap:
    """Positions of every key/value in a loaded YAML document, by IR path."""

    def __init__(
        self, file: str, positions: Positions, data: Any, values: Positions | None = None
    ) -> None:
        self.file = file
        self.positions = positions
        self.data = data
        self.values = values or {}
        """Positions of scalar values themselves (``positions`` has their keys')."""

    def value_at(self, path: PathKey) -> tuple[int, int] | None:
        """Line/col of the scalar value at ``path`` (None when it is not a scalar)."""
        return self.values.get(path)

    def locate(self, path: PathKey) -> tuple[int | None, int | None]:
        """Line/col (1-based) of the deepest known prefix of ``path``."""
        for end in range(len(path), -1, -1):
            pos = self.positions.get(path[:end])
            if pos is not None:
                return pos
        return None, None

    def issue(
        self,
        path: PathKey,
        message: str,
        *,
        severity: str = "error",
        at: tuple[int, int] | None = None,
    ) -> IRIssue:
        """An :class:`IRIssue` at ``path`` (or at ``at`` when given) with the rule id filled
        in when inside a rule."""
        line, col = self.locate(path) if at is None else at
        return IRIssue(
            message=message,
            file=self.file,
            line=line,
            col=col,
            path=format_path(path),
            rule_id=self.rule_id_at(path),
            severity=severity,
        )

    def rule_id_at(self, path: PathKey) -> str | None:
        if len(path) >= 2 and path[0] == "rules" and isinstance(path[1], int):
            rules = self.data.get("rules") if isinstance(self.data, dict) else None
            if isinstance(rules, list) and 0 <= path[1] < len(rules):
                rule = rules[path[1]]
                if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                    return str(rule["id"])
        return None


def format_path(path: Iterable[str | int]) -> str:
    """``('rules', 2, 'emit')`` → ``rules[2].emit``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out
