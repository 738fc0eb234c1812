"""``stargraph-mem mcp``: serve the memory to MCP clients over stdio.

The MCP SDK (optional extra ``mcp``) is imported inside the command, so ``--help`` and the
other commands never load it.
"""

from __future__ import annotations

from stargraph_mem.cli.base import DEFAULT_DB, DbOption, PacksOption, app, fail, run

__all__ = ["mcp"]


@app.command(name="mcp")
def mcp(packs: PacksOption, db: DbOption = DEFAULT_DB) -> None:
    """Serve the memory as an MCP server on stdin/stdout, for an MCP client to launch.

    Tools: record_episode, search_facts, list_facts, explain_fact, consolidate,
    remember_fact, correct_fact, confirm_fact, weak_facts, memory_stats, search_memory,
    get_entity_info (see the documentation's Integrations page).

    The database is created if missing; the server exits when stdin closes.

    Needs the MCP SDK 2.x: pip install 'stargraph_mem\\[mcp]'
    """
    try:
        from stargraph_mem.integrations.mcp_server import serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("mcp", "mcp_types"):
            raise
        fail("the mcp command needs the MCP SDK 2.x: pip install 'stargraph_mem[mcp]'")
    run(serve_stdio(db, packs))
