"""Option and argument values turned into Python values without pydantic.

Typer (0.29 and later) coerces every parameter value through a pydantic ``TypeAdapter``
built when the command runs: importing pydantic and building the adapters costs more than
most commands' own work, and commands such as ``validate`` of an unchanged pack need
nothing else of pydantic. The values our commands take are plain: text, whole and decimal
numbers (with typer's ``min``/``max``), paths (with typer's file checks, done by typer's
own function) and lists of these. :class:`PlainValue` takes such a value exactly as typer's
adapter would; any other annotation, and any value it cannot take as it is (a number
outside its range, ``inf``, an empty path, bytes…), goes to typer's own coercion, so every
error message stays typer's.

The commands' parameters get it from :func:`plain_values` (applied with the readable
metavars, see :mod:`~.help`); it relies on typer's ``RuntimeParam`` contract
(``_coerce_value``) and the parameter's lazily built ``_runtime_param``.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer._click import Context as ClickContext  # typer vendors click
from typer._coercion import RuntimeParam, build_runtime_param
from typer._param_types import coerce_cli_path
from typer.core import TyperArgument, TyperOption

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class _NotPlain(Exception):
    """The value is left to typer's own coercion."""


@dataclass(frozen=True)
class PlainValue(RuntimeParam):
    """A parameter's coercion that needs no pydantic for plain values (see the module)."""

    def _coerce_value(self, value: Any, param: Any, ctx: ClickContext) -> Any:
        try:
            origin: Any = typing.get_origin(self.annotation)
            if origin is list:
                (item,) = typing.get_args(self.annotation)
                if not isinstance(value, list | tuple):
                    value = [value]
                return [self._leaf(item, v, param, ctx) for v in value]
            return self._leaf(self.annotation, value, param, ctx)
        except _NotPlain:
            fallback = build_runtime_param(param.type_descriptor)
            return fallback._coerce_value(value, param=param, ctx=ctx)

    def _leaf(self, annotation: Any, value: Any, param: Any, ctx: ClickContext) -> Any:
        info = self.parameter_info
        if annotation is str and isinstance(value, str):
            return value
        if annotation is bool and isinstance(value, bool):
            return value
        if annotation is int or annotation is float:
            return self._number(annotation, value)
        if isinstance(annotation, type) and issubclass(annotation, Path):
            if isinstance(value, Path):  # a default: typer takes it as it is too
                value = str(value)
            if info.path_type is not None or not isinstance(value, str) or value in ("", "-"):
                raise _NotPlain
            if "\0" in value:
                raise _NotPlain
            return coerce_cli_path(
                annotation(value), info, path_type=annotation, param=param, ctx=ctx
            )
        raise _NotPlain

    def _number(self, annotation: type[Any], value: Any) -> Any:
        if isinstance(value, bool):
            raise _NotPlain
        if isinstance(value, str):
            if not (_INT if annotation is int else _FLOAT).fullmatch(value):
                raise _NotPlain
            number = annotation(value)
        elif isinstance(value, int) or (annotation is float and isinstance(value, float)):
            number = annotation(value)
        else:
            raise _NotPlain
        low, high = self.parameter_info.min, self.parameter_info.max
        if (low is not None and number < low) or (high is not None and number > high):
            if not self.parameter_info.clamp:
                raise _NotPlain  # typer words the range error
            number = annotation(low) if low is not None and number < low else annotation(high)
        return number


def plain_values(params: Sequence[Any]) -> None:
    """Give ``params`` (typer's options and arguments) :class:`PlainValue` coercion, in
    place; idempotent, and a parameter with a ``parser`` keeps typer's."""
    for param in params:
        if not isinstance(param, TyperOption | TyperArgument):
            continue
        info = param.type_descriptor.parameter_info
        if param._runtime_param is None and info.parser is None and not _file(param):
            param._runtime_param = PlainValue(
                parameter_info=info, annotation=param.type_descriptor.annotation
            )


def _file(param: TyperOption | TyperArgument) -> bool:
    return param.type_descriptor.file_annotation is not None


__all__ = ["PlainValue", "plain_values"]
