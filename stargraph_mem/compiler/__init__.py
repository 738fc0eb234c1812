"""IR → CLIPS compiler: emitters per IR node, typed quoting, ``CompiledPack``."""

from __future__ import annotations

from stargraph_mem.compiler.pack import CompiledPack, CompiledRule, compile_file, compile_text

__all__ = ["CompiledPack", "CompiledRule", "compile_file", "compile_text"]
