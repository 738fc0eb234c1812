"""Former home of the pass runner, kept so existing imports go on working.

See :mod:`~stargraph_mem.engine.runner` (passes), :mod:`~stargraph_mem.engine.batch`
(many partitions per transaction), :mod:`~stargraph_mem.engine.report` (a pass's result)
and :mod:`~stargraph_mem.engine.remote` (the worker process's side).
"""

from __future__ import annotations

from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES as DEFAULT_MAX_EPISODES
from stargraph_mem.engine.remote import PassServer as PassServer
from stargraph_mem.engine.report import LegacyFilter as LegacyFilter
from stargraph_mem.engine.report import PassReport as PassReport
from stargraph_mem.engine.report import rejections_of as rejections_of
from stargraph_mem.engine.runner import PassRunner as PassRunner
from stargraph_mem.engine.runner import WorkerMode as WorkerMode
