"""IR → CLIPS compiler: emitters per IR node, typed quoting, ``CompiledPack``.

The public names are imported on first use (PEP 562): a light module of the package
(:mod:`~stargraph_mem.compiler.build_cache`, which answers ``validate`` of an unchanged
pack) loads without the IR models and the emitters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stargraph_mem.compiler.pack import CompiledPack, CompiledRule, compile_file, compile_text

__all__ = ["CompiledPack", "CompiledRule", "compile_file", "compile_text"]

if not TYPE_CHECKING:  # mypy reads the imports above: a misspelt name stays an error

    def __getattr__(name: str) -> object:
        """Import a public name from :mod:`~.pack` on first use, and keep it here."""
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from stargraph_mem.compiler import pack

        value = getattr(pack, name)
        globals()[name] = value
        return value
