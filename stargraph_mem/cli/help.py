"""Help written for a terminal: every command's ``--help`` in one place.

- Docstrings and option help reflow to the terminal's width: a paragraph's line breaks in
  the source are spaces (:func:`reflow`); a blank line still separates paragraphs, and a
  paragraph starting with ``\\b`` keeps its lines.
- Values are named as a person reads them (:func:`metavar`): ``PATH``, ``N``, ``TIME``,
  ``TEXT``, ``USER``; a flag shows none, a choice its values (``auto|always|never``),
  arguments their names (``PACK``, ``[TESTS]...``) in the usage line and ``PATH``/``TEXT``
  in the type column.
- Each command's help ends with examples (:data:`EXAMPLES`, shown as an "Examples"
  epilog); ``tests/test_cli_help.py`` runs every one.

Commands get this by being registered on :class:`HelpTyper` (the app in ``cli/base.py``);
the group applies :func:`readable_params` to its own options.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import import_module
from pathlib import PurePath
from typing import Any

import typer
from typer._click import Context as ClickContext  # typer vendors click
from typer.core import TyperArgument, TyperCommand, TyperOption

from stargraph_mem.cli.values import plain_values

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": (
        "stargraph-mem new rules/my_pack",
        "stargraph-mem test rules/my_pack.yaml --coverage",
        "stargraph-mem ingest episodes.jsonl",
        "stargraph-mem consolidate --pack rules/my_pack.yaml",
        "stargraph-mem facts --user alice",
    ),
    "put": (
        'stargraph-mem put --user alice --session s1 --agent chat "I like tea"',
        "stargraph-mem put --user alice --session s1 --agent chat --meta n=3 hi",
        "stargraph-mem put --user al --session s --agent a --max-content-bytes 9000 hi",
    ),
    "recent": (
        "stargraph-mem recent --user alice",
        "stargraph-mem recent --user alice --session s1 --limit 5 --json",
    ),
    "validate": (
        "stargraph-mem validate rules/default.yaml",
        "stargraph-mem validate --json rules/default.yaml rules/fact_lifecycle.yaml",
    ),
    "compile": (
        "stargraph-mem compile rules/default.yaml --print",
        "stargraph-mem compile rules/default.yaml -o .",
    ),
    "schema": (
        "stargraph-mem schema --path pack",
        "stargraph-mem schema --path episode",
    ),
    "info": ("stargraph-mem info rules/default.yaml",),
    "recall": (
        'stargraph-mem recall "what does alice like" --user alice --agent chat',
        "stargraph-mem recall tea --user alice --agent chat --kinds facts --json",
        "stargraph-mem recall tea --user alice --agent chat --context 200",
    ),
    "entity": (
        "stargraph-mem entity alice --user alice --agent chat",
        "stargraph-mem entity alice --user alice --agent chat --json",
    ),
    "define-entity": ("stargraph-mem define-entity Alice --user alice --agent chat --alias Ally",),
    "embed": (
        "stargraph-mem embed",
        "stargraph-mem embed --embedder hash:128 --batch 256",
    ),
    "consolidate": (
        "stargraph-mem consolidate --pack rules/default.yaml",
        "stargraph-mem consolidate --pack rules/default.yaml --dry-run --trace",
        "stargraph-mem consolidate --pack rules/default.yaml --now 2030-01-01T03:00Z",
        "stargraph-mem consolidate --pack rules/default.yaml --reconnect-seconds 120",
        "stargraph-mem consolidate --pack rules/default.yaml --max-fact-bytes 131072",
    ),
    "facts": (
        "stargraph-mem facts --user alice",
        "stargraph-mem facts --search tea --limit 5",
        "stargraph-mem facts --as-of 2026-03-01T00:00:00+00:00 --json",
    ),
    "copy": ("stargraph-mem copy --from memory.db --to copy.db",),
    "explain": ("stargraph-mem explain FACT_ID",),
    "pin": ('stargraph-mem pin FACT_ID --reason "the user asked to keep it"',),
    "unpin": ("stargraph-mem unpin FACT_ID",),
    "restore": ('stargraph-mem restore FACT_ID --reason "archived too early"',),
    "history": ("stargraph-mem history FACT_ID", "stargraph-mem history FACT_ID --spec --json"),
    "update-status": (
        'stargraph-mem update-status FACT_ID challenged --reason "two sources disagree"',
        'stargraph-mem update-status FACT_ID active --reason "checked: still true"',
        "stargraph-mem update-status FACT_ID invalidated --reason wrong",
    ),
    "ingest": (
        "stargraph-mem ingest episodes.jsonl",
        "stargraph-mem ingest --max-errors 5 episodes.jsonl",
        "stargraph-mem ingest --skip-invalid --rejects rejects.jsonl episodes.jsonl",
    ),
    "new": ("stargraph-mem new rules/my_pack",),
    "test": (
        "stargraph-mem test rules/default.yaml",
        "stargraph-mem test rules/default.yaml --coverage -k update",
    ),
    "run": (
        "stargraph-mem run --pack rules/default.yaml",
        "stargraph-mem run --pack rules/default.yaml --once --json",
        "stargraph-mem run --pack rules/default.yaml --once --reconnect-seconds 120",
        "stargraph-mem run --pack rules/default.yaml --once --log-format json",
        "stargraph-mem run --pack rules/default.yaml --metrics-port 9464",
    ),
    "status": (
        "stargraph-mem status --pack rules/default.yaml",
        "stargraph-mem status --user alice --rule add_note",
    ),
    "mcp": ("stargraph-mem mcp --pack rules/default.yaml --db memory.db",),
    "replay": (
        "stargraph-mem replay --pack rules/default.yaml",
        "stargraph-mem replay --pack rules/default.yaml --exit-code --json",
    ),
    "lint": (
        "stargraph-mem lint rules/default.yaml",
        "stargraph-mem lint --strict rules/default.yaml rules/fact_lifecycle.yaml",
    ),
}
"""Examples by command name (``""``: the group). ``FACT_ID`` stands for an id that
``stargraph-mem facts`` prints; every other word is typed as shown."""


def examples_epilog(name: str) -> str | None:
    """The "Examples" epilog of command ``name`` (None without examples)."""
    lines = EXAMPLES.get(name)
    if not lines:
        return None
    return "Examples:\n" + "\n".join(f"  {line}" for line in lines)


def reflow(text: str | None) -> str | None:
    """``text`` with each paragraph on one line (a ``\\b`` paragraph keeps its lines), so
    the terminal, not the source, decides where lines break."""
    if text is None:
        return None
    head, cut, tail = text.partition("\f")
    paragraphs = [p for p in head.strip().split("\n\n") if p.strip()]
    out = [p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs]
    return "\n\n".join(out) + cut + tail


NAMED = {
    "user": "USER",
    "session": "SESSION",
    "agent": "AGENT",
    "now": "TIME",
    "as_of": "TIME",
    "timestamp": "TIME",
    "db": "PATH|URL",
    "source": "PATH|URL",
    "target": "PATH|URL",
    "id": "ID",
    "fact_id": "ID",
    "meta": "KEY=VALUE",
    "interval": "SECONDS",
    "lease_seconds": "SECONDS",
    "cadence": "CRON",
    "out": "DIR",
    "file": "PATH",
}
"""Metavars by parameter name (its Python name), before the type decides."""


def _type_metavar(param: TyperOption | TyperArgument) -> str:
    """The value's name by its type: ``PATH``/``DIR``, ``N``, a choice's values, ``TEXT``."""
    desc = param.type_descriptor
    if desc.is_choice:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices or ())
    annotation = desc.annotation
    inner = typing.get_args(annotation)[0] if desc.is_list else annotation
    if desc.is_path or desc.is_file or (isinstance(inner, type) and issubclass(inner, PurePath)):
        return "DIR" if desc.parameter_info.file_okay is False else "PATH"
    if inner in (int, float):
        return "N"
    return "TEXT"


def metavar(param: TyperOption | TyperArgument) -> str:
    """What the help shows for ``param``'s value (an explicit ``metavar`` wins)."""
    if param.metavar is not None and not param.metavar.startswith("<"):
        return param.metavar
    return NAMED.get(param.name or "") or _type_metavar(param)


class _Argument(TyperArgument):
    """An argument whose usage reads ``PACK``, ``[TESTS]...`` and whose type column reads
    ``PATH`` or ``TEXT`` (typer's own shows ``{pack}`` and ``<file>``)."""

    readable_type: str = "TEXT"

    def display_type_rich(self, ctx: ClickContext) -> str | None:
        return self.readable_type

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        return name if self.required else f"[{name}]"


def readable_params(params: Sequence[Any]) -> None:
    """Give ``params`` readable metavars (in place; idempotent)."""
    for param in params:
        if isinstance(param, TyperOption):
            if param.is_flag or param.count:
                param.metavar = ""
            else:
                param.metavar = metavar(param)
        elif isinstance(param, TyperArgument) and not isinstance(param, _Argument):
            kind = metavar(param)
            name = (param.name or "arg").upper()
            param.__class__ = _Argument
            assert isinstance(param, _Argument)
            param.readable_type = kind
            param.metavar = f"{name}..." if param.nargs != 1 else name
        help_text = getattr(param, "help", None)
        if isinstance(help_text, str):
            param.help = reflow(help_text)


DEFERRED_RICH: dict[str, str] = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
"""What typer's help formatter imports but our help never uses (markdown help text, pretty
tracebacks: the app disables both), and the one name it takes from each module."""


class _DeferredClass(type):
    """The metaclass of a stand-in for a class not imported yet: calling the stand-in or
    reading one of its attributes imports the real class and uses it."""

    def real(cls) -> Any:
        return getattr(import_module(cls.__module__), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls.real(), name)


@contextmanager
def _deferred_rich() -> Iterator[None]:
    """While the block runs, ``from rich.markdown import Markdown`` (and the same of
    :data:`DEFERRED_RICH`) gives a stand-in instead of importing the module; afterwards
    the modules import as usual (the stand-ins then import them when used)."""
    placed = {name: type(sys)(name) for name in DEFERRED_RICH if name not in sys.modules}
    for name, module in placed.items():
        stand_in = _DeferredClass(DEFERRED_RICH[name], (), {"__module__": name})
        setattr(module, DEFERRED_RICH[name], stand_in)
        sys.modules[name] = module
    try:
        yield
    finally:
        for name, module in placed.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def load_help_formatter() -> None:
    """Import typer's rich help formatter without the rich modules it imports for features
    our help does not use (:data:`DEFERRED_RICH`): a third of ``--help``'s start-up."""
    if "typer.rich_utils" in sys.modules:
        return
    with _deferred_rich():
        import_module("typer.rich_utils")


class HelpCommand(TyperCommand):
    """A command whose help reflows, names values readably and ends with examples."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = reflow(self.help)
        self.short_help = reflow(self.short_help)
        if self.epilog is None:
            self.epilog = examples_epilog(self.name or "")
        readable_params(self.params)
        plain_values(self.params)

    def get_params(self, ctx: ClickContext) -> list[Any]:
        params = super().get_params(ctx)
        readable_params(params)
        plain_values(params)
        return params

    def format_help(self, ctx: ClickContext, formatter: Any) -> None:
        load_help_formatter()
        super().format_help(ctx, formatter)


class HelpTyper(typer.Typer):
    """A Typer whose commands are :class:`HelpCommand` unless a command names its own."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        kwargs.setdefault("cls", HelpCommand)
        return super().command(*args, **kwargs)
