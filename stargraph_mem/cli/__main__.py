"""``python -m stargraph_mem.cli``: the ``stargraph-mem`` command."""

from __future__ import annotations

from stargraph_mem.cli import main

main()
