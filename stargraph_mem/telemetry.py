"""Metrics and traces through the OpenTelemetry API, when it is importable.

Nothing here needs OpenTelemetry: without ``opentelemetry-api`` (the ``otel`` extra)
every instrument and span is a cheap no-op object. With the API but no SDK configured,
the API's own no-op providers answer (one call each). An application that installs an
SDK ``MeterProvider`` / ``TracerProvider`` globally gets the measurements there; a test
or an embedding application can hand providers over with :func:`configure` instead.

Attributes are bounded, operator-defined values only (pack and rule names, kinds,
reasons from a fixed list, error type names): never user ids nor episode content. The
names follow OpenTelemetry's semantic conventions (see docs/operations-telemetry.md).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = [
    "Attributes",
    "Instruments",
    "PassSpan",
    "available",
    "configure",
    "enabled",
    "instruments",
    "set_backlog",
    "span",
]

SCOPE: Final = "stargraph_mem"
"""The instrumentation scope's name (meter and tracer)."""

PACK: Final = "stargraph_mem.pack"
RULE: Final = "stargraph_mem.rule"
PASS_KIND: Final = "stargraph_mem.pass.kind"
PASS_OUTCOME: Final = "stargraph_mem.pass.outcome"
DELTA_KIND: Final = "stargraph_mem.delta.kind"
REJECTION_REASON: Final = "stargraph_mem.rejection.reason"
QUARANTINE_REASON: Final = "stargraph_mem.quarantine.reason"
CONFLICT_KIND: Final = "stargraph_mem.conflict.kind"
RECALL_STRATEGY: Final = "stargraph_mem.recall.strategy"
ERROR_TYPE: Final = "error.type"
RULE_COUNT: Final = "stargraph_mem.rule.count"
PARTITION_COUNT: Final = "stargraph_mem.partition.count"
EPISODE_COUNT: Final = "stargraph_mem.episode.count"

ATTRIBUTE_KEYS: Final = frozenset(
    {
        PACK,
        RULE,
        PASS_KIND,
        PASS_OUTCOME,
        DELTA_KIND,
        REJECTION_REASON,
        QUARANTINE_REASON,
        CONFLICT_KIND,
        RECALL_STRATEGY,
        ERROR_TYPE,
    }
)
"""Every attribute key a metric of this package carries (each with bounded values)."""

Attributes = Mapping[str, str | bool | int | float]


class Counter(Protocol):
    def add(self, amount: int | float, attributes: Attributes | None = None) -> None: ...


class Histogram(Protocol):
    def record(self, amount: int | float, attributes: Attributes | None = None) -> None: ...


class _NullInstrument:
    """A counter and a histogram that measure nothing (no OpenTelemetry API)."""

    def add(self, amount: int | float, attributes: Attributes | None = None) -> None:
        return None

    def record(self, amount: int | float, attributes: Attributes | None = None) -> None:
        return None


class _NullSpan:
    """A span that records nothing (no OpenTelemetry API)."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Attributes) -> None:
        return None

    def record_exception(self, exception: BaseException) -> None:
        return None

    def is_recording(self) -> bool:
        return False

    def end(self, end_time: int | None = None) -> None:
        return None


_NULL: Final = _NullInstrument()


@dataclass
class Instruments:
    """The package's instruments, created once per provider (see :func:`configure`)."""

    passes: Counter = _NULL
    episodes: Counter = _NULL
    deltas: Counter = _NULL
    rejections: Counter = _NULL
    quarantines: Counter = _NULL
    pass_duration: Histogram = _NULL
    apply_duration: Histogram = _NULL
    sweep_candidates: Counter = _NULL
    takeovers: Counter = _NULL
    conflicts: Counter = _NULL
    recall_duration: Histogram = _NULL
    observed: list[Any] = field(default_factory=list, repr=False)
    """The observable gauges (kept so they live as long as the instruments)."""


@dataclass
class _State:
    """What :func:`configure` chose: instruments, tracer, and whether an SDK listens."""

    instruments: Instruments = field(default_factory=Instruments)
    tracer: Tracer | None = None
    enabled: bool = False
    explicit: bool = False
    """Whether providers were handed over (else the API's global ones are followed)."""
    backlog: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Pack → (episodes pending, age in seconds of the oldest), as last measured."""


_state = _State()
_api: tuple[Any, Any] | None = None
"""The ``opentelemetry.metrics`` and ``opentelemetry.trace`` modules (None: not loaded)."""


def _modules() -> tuple[Any, Any] | None:
    """The OpenTelemetry API's metrics and trace modules, or None when not importable."""
    global _api
    if _api is None:
        try:
            _api = (
                importlib.import_module("opentelemetry.metrics"),
                importlib.import_module("opentelemetry.trace"),
            )
        except ImportError:
            return None
    return _api


def available() -> bool:
    """Whether the OpenTelemetry API is importable (the ``otel`` extra)."""
    return _modules() is not None


def enabled() -> bool:
    """Whether measurements reach an SDK (a provider handed to :func:`configure`, or a
    global one set before it): costly measurements (the backlog) are taken only then."""
    if _state.explicit:
        return _state.enabled
    found = _modules()
    return found is not None and (
        _is_sdk(found[0].get_meter_provider()) or _is_sdk(found[1].get_tracer_provider())
    )


def configure(
    meter_provider: MeterProvider | None = None, tracer_provider: TracerProvider | None = None
) -> None:
    """Create the instruments and tracer from these providers (None: the API's global
    ones, which follow a provider set globally later on); no-ops without the API."""
    found = _modules()
    if found is None:
        _state.instruments, _state.tracer, _state.enabled = Instruments(), None, False
        return
    metrics, trace = found
    meters = meter_provider or metrics.get_meter_provider()
    tracers = tracer_provider or trace.get_tracer_provider()
    _state.instruments = _create(meters.get_meter(SCOPE))
    _state.tracer = tracers.get_tracer(SCOPE)
    _state.enabled = _is_sdk(meters) or _is_sdk(tracers)
    _state.explicit = meter_provider is not None or tracer_provider is not None


def _is_sdk(provider: object) -> bool:
    """Whether ``provider`` is an implementation, not one of the API's no-op or proxies."""
    name = type(provider).__name__
    return not (name.startswith(("NoOp", "_NoOp", "_Proxy", "Proxy")))


def _create(meter: Meter) -> Instruments:
    """Every instrument of the package from ``meter``."""
    out = Instruments(
        passes=meter.create_counter(
            "stargraph_mem.passes", "{pass}", "Consolidation passes, by outcome."
        ),
        episodes=meter.create_counter(
            "stargraph_mem.episodes.consumed", "{episode}", "Episodes read by applied passes."
        ),
        deltas=meter.create_counter(
            "stargraph_mem.deltas", "{delta}", "Deltas of applied passes, by kind."
        ),
        rejections=meter.create_counter(
            "stargraph_mem.rejections", "{episode}", "Episodes rejected by passes, by reason."
        ),
        quarantines=meter.create_counter(
            "stargraph_mem.quarantines",
            "{quarantine}",
            "Rows that could not be decoded, and partitions whose pass failed.",
        ),
        pass_duration=meter.create_histogram(
            "stargraph_mem.pass.duration", "s", "One pass: read, CLIPS run and apply."
        ),
        apply_duration=meter.create_histogram(
            "stargraph_mem.pass.apply.duration", "s", "The apply (commit) of one pass."
        ),
        sweep_candidates=meter.create_counter(
            "stargraph_mem.sweep.candidates",
            "{partition}",
            "Partitions with candidate facts found by sweeps at their fire times.",
        ),
        takeovers=meter.create_counter(
            "stargraph_mem.lease.takeovers",
            "{lease}",
            "Partitions leased after another worker held them without applying a pass.",
        ),
        conflicts=meter.create_counter(
            "stargraph_mem.conflicts.retried",
            "{pass}",
            "Passes decided or computed again after another writer got there first.",
        ),
        recall_duration=meter.create_histogram(
            "stargraph_mem.recall.duration", "s", "One recall (fact search), by strategy."
        ),
    )
    out.observed = [
        meter.create_observable_gauge(
            "stargraph_mem.backlog.episodes",
            [_observe_pending],
            "{episode}",
            "Episodes not consumed yet, per pack, as the worker last measured them.",
        ),
        meter.create_observable_gauge(
            "stargraph_mem.backlog.oldest_age",
            [_observe_age],
            "s",
            "Age of the oldest episode not consumed yet, per pack.",
        ),
    ]
    return out


def _observations(index: int) -> list[Observation]:
    found = _modules()
    if found is None:  # pragma: no cover - the gauges exist only with the API
        return []
    metrics = found[0]
    return [
        metrics.Observation(values[index], {PACK: pack}) for pack, values in _state.backlog.items()
    ]


def _observe_pending(options: CallbackOptions) -> list[Observation]:
    return _observations(0)


def _observe_age(options: CallbackOptions) -> list[Observation]:
    return _observations(1)


def set_backlog(pack: str, episodes: int, oldest_age: float) -> None:
    """The backlog the gauges report for ``pack`` (episodes pending, oldest age in s)."""
    _state.backlog[pack] = (episodes, oldest_age)


def instruments() -> Instruments:
    """The instruments in effect (no-ops until :func:`configure` found the API)."""
    return _state.instruments


@contextmanager
def span(name: str, attributes: Attributes | None = None) -> Iterator[Any]:
    """A span over the ``with`` block, current inside it (a child of the caller's)."""
    tracer = _state.tracer
    if tracer is None:
        yield _NullSpan()
        return
    with tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


class PassSpan:
    """One pass's span, opened when it starts and ended once its apply is done (which may
    run while the next pass is computed): its read and CLIPS run become child spans from
    the pass's timings, its apply a child span around the commit."""

    __slots__ = ("_start", "span")

    def __init__(self, pack: str, rules: int, partitions: int, kind: str = "episodes") -> None:
        tracer = _state.tracer
        self._start = time.time_ns()
        if tracer is None:
            self.span: Any = _NullSpan()
            return
        self.span = tracer.start_span(
            "stargraph_mem.pass",
            attributes={
                PACK: pack,
                RULE_COUNT: rules,
                PARTITION_COUNT: partitions,
                PASS_KIND: kind,
            },
            start_time=self._start,
        )

    @contextmanager
    def current(self) -> Iterator[None]:
        """The pass's span is the current one inside the block (not ended by it)."""
        found = _modules()
        if found is None or not self.span.is_recording():
            yield
            return
        with found[1].use_span(self.span, end_on_exit=False, record_exception=False):
            yield

    def phases(self, read: float, run: float, episodes: int) -> None:
        """Child spans ``read`` and ``clips run`` from the pass's start, of these many
        seconds, and the episodes it read."""
        tracer = _state.tracer
        if tracer is None or not self.span.is_recording():
            return
        trace = _modules()
        assert trace is not None
        parent = trace[1].set_span_in_context(self.span)
        self.span.set_attribute(EPISODE_COUNT, episodes)
        read_end = self._start + int(read * 1e9)
        for name, start, end in (
            ("stargraph_mem.pass.read", self._start, read_end),
            ("stargraph_mem.pass.clips_run", read_end, read_end + int(run * 1e9)),
        ):
            tracer.start_span(name, parent, start_time=start).end(end_time=end)

    @contextmanager
    def apply(self) -> Iterator[None]:
        """A child span ``apply`` over the block (the pass's commit)."""
        tracer = _state.tracer
        if tracer is None or not self.span.is_recording():
            yield
            return
        with self.current(), tracer.start_as_current_span("stargraph_mem.pass.apply"):
            yield

    def end(self, error: BaseException | None = None) -> None:
        """End the pass's span (recording ``error`` when it failed)."""
        if error is not None and self.span.is_recording():
            self.span.record_exception(error)
            self.span.set_attribute(ERROR_TYPE, type(error).__name__)
            found = _modules()
            if found is not None:
                self.span.set_status(found[1].Status(found[1].StatusCode.ERROR))
        self.span.end()


def sum_by(rows: Sequence[tuple[Attributes, int]]) -> dict[tuple[tuple[str, Any], ...], int]:
    """Amounts summed per distinct attribute set (one ``add`` each instead of one per row)."""
    out: dict[tuple[tuple[str, Any], ...], int] = {}
    for attributes, amount in rows:
        key = tuple(sorted(attributes.items()))
        out[key] = out.get(key, 0) + amount
    return out


configure()
