"""Optional integrations (each behind its extra): import the submodule you need.

This package imports nothing itself, so ``import stargraph_mem`` never pulls in an
optional dependency.
"""
