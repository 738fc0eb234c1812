"""Quoting of literals by type for CLIPS source text. User text never reaches CLIPS unquoted."""

from __future__ import annotations

import math
from typing import Any

from stargraph_mem.errors import CompileError


def clips_string(value: str) -> str:
    """A CLIPS string literal: backslash and double quote escaped; NUL refused."""
    if "\x00" in value:
        raise CompileError("NUL characters cannot be represented in CLIPS strings")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def clips_float(value: float) -> str:
    """A CLIPS float literal (always with a decimal point or exponent)."""
    if not math.isfinite(value):
        raise CompileError(f"non-finite number {value!r} cannot be compiled")
    text = repr(float(value))
    return text if any(c in text for c in ".eE") else text + ".0"


def clips_literal(value: Any, ftype: str) -> str:
    """Render ``value`` as the CLIPS literal the runtime stores for a field of ``ftype``."""
    if ftype == "boolean":
        return "TRUE" if value else "FALSE"
    if ftype == "number":
        return clips_float(float(value))
    if ftype == "integer" or ftype == "timestamp":
        return str(int(value))
    if isinstance(value, str):
        return clips_string(value)
    raise CompileError(f"cannot render {value!r} as a {ftype} literal")
