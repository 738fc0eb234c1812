"""Shared vocabulary: episodes, facts, deltas, cadence, time, canonical JSON.

Every layer (ir, compiler, engine, stores, CLI) may import these modules; they import
nothing from the rest of the package but :mod:`stargraph_mem.errors`. Import the module
you need (``stargraph_mem.model.time``, ``.cadence``, ``.episodes``, ``.deltas``,
``.facts``, ``.canonical``, ``.base``): this file loads none of them.
"""
