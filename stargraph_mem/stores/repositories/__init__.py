"""Repositories written once for every backend: SQL in the qmark style, rendered by a
dialect and run over the backend's connection."""
