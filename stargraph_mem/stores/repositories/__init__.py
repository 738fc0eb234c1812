"""Repositories written once over SQL, bound to a backend by its dialect and connection."""
