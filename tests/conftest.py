"""Collection: tests of optional extras are collected only when the extra is installed."""

from __future__ import annotations

import importlib.util

collect_ignore: list[str] = []
if importlib.util.find_spec("langgraph") is None:
    # the `graph` extra (pip install '.[graph]') is not installed
    collect_ignore.append("test_example_langgraph.py")
