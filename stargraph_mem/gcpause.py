"""Pausing the cyclic garbage collector around allocation-heavy batches."""

from __future__ import annotations

import gc
import threading


class GCPause:
    """Pauses the cyclic garbage collector while any batch runs; restores it after the last.

    Batches and passes build several short-lived container objects per delta; with a large
    heap of deltas, cycle detection alone cost a third of the apply time. Reference counting
    still frees everything: only the search for cycles waits until the batch ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False

    def __call__(self) -> GCPause:
        """``with gc_paused():`` (the pause is counted process-wide, so the object itself
        is the context manager)."""
        return self

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._was_enabled:
                gc.enable()


gc_paused = GCPause()
"""Process-wide: the fact store's batches and the runtime's passes share it."""
