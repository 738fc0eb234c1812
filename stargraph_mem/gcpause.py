"""Pausing the cyclic garbage collector around allocation-heavy batches."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


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

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and self._was_enabled:
                    gc.enable()


gc_paused = GCPause()
"""Process-wide: the fact store's batches and the runtime's passes share it."""
