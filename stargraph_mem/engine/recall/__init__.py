"""Recall's store-independent parts: intent and complexity of a query, time bounds, Reciprocal
Rank Fusion, the result models and context assembly within a token budget.

Every module here is pure (no SQL, no I/O): the engine runs the strategies against the
stores and hands their ranked lists to these functions.
"""
