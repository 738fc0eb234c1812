"""What a ``run`` worker tells its operator: one structured log line per tick, the backlog
gauges, and the metrics in Prometheus' text format (``--metrics-port``).

Logs go through the standard :mod:`logging` module (logger ``stargraph_mem.worker``): an
application routes them as it wishes; the CLI installs a stderr handler only when asked
(``--log-format text|json``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from stargraph_mem import telemetry
from stargraph_mem.engine.passes.sweep import swept
from stargraph_mem.model.time import to_us, to_utc
from stargraph_mem.stores.scope import Partition

if TYPE_CHECKING:
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.engine.passes.report import ConsolidationReport
    from stargraph_mem.engine.passes.runner import PassRunner

__all__ = [
    "BACKLOG_SECONDS",
    "Backlog",
    "JsonFormatter",
    "LogFormat",
    "Observing",
    "log_tick",
    "observed_tick",
    "serve_metrics",
    "setup_logging",
    "tick_fields",
]

logger = logging.getLogger("stargraph_mem.worker")

LogFormat = Literal["text", "json"]

BACKLOG_SECONDS: Final = 15.0
"""The backlog (a few statements per pack over every partition) is measured at most this
often, and only while an OpenTelemetry SDK listens."""

_RECORD_FIELDS: Final = frozenset(vars(logging.makeLogRecord({})))
"""The attributes every log record has (the rest came as ``extra``)."""


def tick_fields(report: ConsolidationReport) -> dict[str, Any]:
    """One tick as flat fields: passes applied, episodes consumed, deltas by kind,
    rejected and quarantined counts, conflicts, due pairs held by others, seconds."""
    applied = [p for p in report.passes if p.applied]
    fields: dict[str, Any] = {
        "event": "tick",
        "now": report.now.isoformat(),
        "passes": len(applied),
        "episodes": sum(p.episodes for p in applied),
    }
    fields.update(report.counts)
    fields["rejected"] = sum(len(p.rejected) + len(p.gated_out) for p in applied)
    fields["quarantined"] = len(report.failed) + sum(len(p.quarantined) for p in applied)
    fields["conflicts"] = len(report.conflicts)
    fields["held"] = len(report.held)
    fields["seconds"] = round(report.timings.get("total", 0.0), 6)
    return fields


def log_tick(report: ConsolidationReport) -> None:
    """Log the tick's line (INFO), and a warning per quarantined partition."""
    fields = tick_fields(report)
    text = " ".join(f"{k}={v}" for k, v in fields.items() if k != "event")
    logger.info("tick %s", text, extra={"fields": fields})
    for failed in report.failed:
        logger.warning(
            "pack %s: partition user=%r agent=%r quarantined for this tick: %s",
            failed.pack,
            failed.partition.user,
            failed.partition.agent,
            failed.failed,
            extra={"fields": {"event": "quarantine", "pack": failed.pack}},
        )
    if report.conflicts:
        logger.warning(
            "%d due pass(es) applied by another scheduler first: decided again next tick",
            len(report.conflicts),
            extra={"fields": {"event": "conflict", "conflicts": len(report.conflicts)}},
        )


async def observed_tick(
    mem: Consolidator, backlog: Backlog, now: datetime | None = None
) -> ConsolidationReport:
    """One tick of a ``run`` worker (at ``now``, default the clock's): its log line, then
    the backlog when due."""
    report = await mem.tick(now)
    log_tick(report)
    await backlog.measure(mem, report.now)
    return report


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the record's
    ``fields`` (from ``extra={"fields": {...}}``) or other ``extra`` keys."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created).astimezone().isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key == "fields" and isinstance(value, dict):
                document.update(value)
            elif key not in _RECORD_FIELDS and key not in document:
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, sort_keys=True)


def setup_logging(fmt: str, level: int = logging.INFO) -> logging.Handler:
    """Send the package's log records (``stargraph_mem.*``) to stderr as ``fmt`` says
    (``json`` or ``text``); :meth:`Observing.close` takes the handler off."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    package = logging.getLogger("stargraph_mem")
    package.addHandler(handler)
    package.setLevel(level)
    return handler


@dataclass
class Observing:
    """What a ``run`` worker set up for its operator: a log handler, a metrics server."""

    handler: logging.Handler | None = None
    server: Any = None
    level: int = logging.NOTSET
    backlog: Backlog = field(default_factory=lambda: Backlog())

    @classmethod
    def start(cls, log_format: str | None, metrics_port: int | None) -> Observing:
        """Log to stderr in ``log_format`` (None: leave logging alone) and serve metrics
        on ``metrics_port`` (None: none)."""
        level = logging.getLogger("stargraph_mem").level
        handler = None if log_format is None else setup_logging(log_format)
        server = None if metrics_port is None else serve_metrics(metrics_port)
        return cls(handler, server, level)

    def close(self) -> None:
        """Stop serving metrics and take the log handler off."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.handler is not None:
            package = logging.getLogger("stargraph_mem")
            package.removeHandler(self.handler)
            package.setLevel(self.level)


@dataclass
class Backlog:
    """Measures episodes pending per pack and the age of the oldest, at most every
    :data:`BACKLOG_SECONDS`, for the ``stargraph_mem.backlog.*`` gauges."""

    every: float = BACKLOG_SECONDS
    _last: float | None = None

    async def measure(self, mem: Consolidator, now: datetime, force: bool = False) -> bool:
        """Measure when due (and an SDK listens, or ``force``); whether it did."""
        if not force and not telemetry.enabled():
            return False
        if not force and self._last is not None and time.monotonic() - self._last < self.every:
            return False
        self._last = time.monotonic()
        partitions = await mem.memory.partitions()
        for runner in mem.runners:
            episodes, oldest = await pack_backlog(mem, runner, partitions, now)
            telemetry.set_backlog(runner.pack, episodes, oldest)
        return True


async def pack_backlog(
    mem: Consolidator, runner: PassRunner, partitions: Sequence[Partition], now: datetime
) -> tuple[int, float]:
    """The episodes of ``partitions`` the pack's episode rules have not consumed, and the
    age in seconds at ``now`` of the oldest of them (0 when none)."""
    rules = [r for r in runner.rules_of(None) if not swept(r)]
    if not rules or not partitions:
        return 0, 0.0
    ids = [r.id for r in rules]
    counts = await runner.pending_of(partitions, ids)
    bases = await runner.facts.pass_bases(runner.pack, partitions)
    lows = [runner.low(marks, rules, None) for marks, _ in bases]
    spans = await mem.schedule_store.spans_of(list(zip(partitions, lows, strict=True)))
    deferred = await runner.facts.deferred_of(runner.pack, partitions)
    firsts = [span[0] for span in spans if span is not None]
    firsts += [d.ts_us for found in deferred for d in found if d.rule_id in ids]
    if not firsts:
        return sum(counts), 0.0
    return sum(counts), max(0.0, (to_us(to_utc(now)) - min(firsts)) / 1e6)


def serve_metrics(port: int, host: str = "0.0.0.0") -> Any:
    """Serve the package's metrics in Prometheus' text format on ``host:port`` (path
    ``/metrics``) from a thread; the instruments are created anew on a provider that
    feeds it. Needs the ``otel`` extra. Returns the HTTP server (``shutdown()`` stops it)."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import start_http_server
    except ImportError as exc:
        raise RuntimeError(
            "--metrics-port needs the otel extra: pip install 'stargraph_mem[otel]'"
        ) from exc
    reader = PrometheusMetricReader()
    telemetry.configure(meter_provider=MeterProvider(metric_readers=[reader]))
    server, _ = start_http_server(port, addr=host)
    return server
