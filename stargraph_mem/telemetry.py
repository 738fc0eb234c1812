"""Metrics and traces through the OpenTelemetry API, when it is importable.

Nothing here needs OpenTelemetry: until an SDK listens, every instrument and span is a
no-op object behind one cached check, and the API is not even imported unless the
application did. An application that installs an SDK ``MeterProvider`` /
``TracerProvider`` globally gets the measurements there (the global providers are looked
at again every second); a test or an embedding application can hand providers over with
:func:`configure` instead.

Attributes are bounded, operator-defined values only (pack and rule names, kinds,
reasons from a fixed list, error type names): never user ids nor episode content. The
names follow OpenTelemetry's semantic conventions (see docs/operations-telemetry.md).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, TypeVar

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
    "live_instruments",
    "record_span",
    "set_backlog",
    "set_embedding_backlog",
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
READ_SECONDS: Final = "stargraph_mem.pass.read.duration"
RUN_SECONDS: Final = "stargraph_mem.pass.clips_run.duration"
APPLY_SECONDS: Final = "stargraph_mem.pass.apply.duration"
"""A record's folded pass (see :func:`record_span`): its phases' seconds, as attributes."""

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
T = TypeVar("T")


class Counter(Protocol):
    def add(self, amount: int | float, attributes: Attributes | None = None) -> None: ...


class Histogram(Protocol):
    def record(self, amount: int | float, attributes: Attributes | None = None) -> None: ...


class _NullInstrument:
    """A counter and a histogram that measure nothing (no SDK listens)."""

    def add(self, amount: int | float, attributes: Attributes | None = None) -> None:
        return None

    def record(self, amount: int | float, attributes: Attributes | None = None) -> None:
        return None


class Tally:
    """A monotonic counter kept in this process, per attribute set: ``add`` is a dict
    update, and the SDK reads the totals when it collects (an observable counter), so a
    pass pays no SDK call per count."""

    __slots__ = ("_lock", "totals")

    def __init__(self) -> None:
        self.totals: dict[frozenset[tuple[str, Any]], int | float] = {}
        self._lock = threading.Lock()
        """Adds come from several threads (the event loop's, the SDK's collection)."""

    def add(self, amount: int | float, attributes: Attributes | None = None) -> None:
        key = frozenset(attributes.items()) if attributes else frozenset()
        with self._lock:
            self.totals[key] = self.totals.get(key, 0) + amount

    def observe(self, options: CallbackOptions) -> list[Observation]:
        """The totals as observations (a copy: a pass may add meanwhile)."""
        found = _modules()
        assert found is not None
        with self._lock:
            totals = list(self.totals.items())
        return [found[0].Observation(v, dict(k)) for k, v in totals]


def drain(waiting: deque[T]) -> list[T]:
    """Take every item of ``waiting`` (appended to by other threads meanwhile: an item
    appended after the last one taken stays for the next drain, never lost)."""
    out = []
    take = waiting.popleft
    while True:
        try:
            out.append(take())
        except IndexError:
            return out


class Spread:
    """A histogram whose measurements wait in this process until the SDK collects:
    ``record`` is a deque append, and a callback the SDK runs at the start of each
    collection hands them over (so a streaming ``record`` pays no SDK call for its
    durations). More than :attr:`LIMIT` waiting (no reader collecting) are handed over at
    once. Measurements so handed over carry no exemplar of the trace that made them."""

    __slots__ = ("_histogram", "_waiting")

    LIMIT: Final = 10_000

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._waiting: deque[tuple[int | float, Attributes | None]] = deque()

    def record(self, amount: int | float, attributes: Attributes | None = None) -> None:
        self._waiting.append((amount, attributes))
        if len(self._waiting) >= self.LIMIT:
            self.flush()

    def flush(self) -> None:
        """Hand the waiting measurements to the SDK's histogram."""
        for amount, attributes in drain(self._waiting):
            self._histogram.record(amount, attributes)


class _NullSpan:
    """A span that records nothing (no SDK listens)."""

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
_NULL_SPAN: Final = _NullSpan()


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
    """The observable instruments (kept so they live as long as the others)."""
    live: bool = False
    """Whether an SDK's meter made these (else :meth:`later` drops what it is given)."""
    waiting: deque[tuple[Callable[[Instruments, Any], None], Any]] = field(
        default_factory=deque, repr=False
    )
    """Counting put off until the SDK collects (see :meth:`later`)."""
    durations: deque[tuple[tuple[str, str], float, float]] = field(
        default_factory=deque, repr=False
    )
    """Passes' seconds and their applies', by (pack, pass kind), put off until the SDK
    collects (see :meth:`PassSpan.timed`)."""

    LATER_LIMIT: ClassVar[int] = 1_000
    """Put-off countings that wait at most (then they are done at once)."""

    def later(self, count: Callable[[Instruments, T], None], what: T) -> None:
        """Run ``count(self, what)`` when the SDK next collects (before it reads the
        totals), not now: a streaming ``record`` pays a deque append for its report's
        counts. :attr:`LATER_LIMIT` waiting (no reader collecting) are done at once."""
        if not self.live:
            return
        waiting = self.waiting
        waiting.append((count, what))
        if len(waiting) >= self.LATER_LIMIT:
            self.catch_up()

    def catch_up(self) -> None:
        """Do the put-off countings, in the order they were put off, and record the
        put-off durations."""
        for count, what in drain(self.waiting):
            count(self, what)
        for timed in drain(self.durations):
            _durations(self, timed)


GLOBAL_CHECK_SECONDS: Final = 1.0
"""Without providers handed over, how often the API's global providers are looked at
again (an application may set an SDK's after the first measurement)."""


@dataclass
class _State:
    """What :func:`configure` chose: instruments, tracer, and whether an SDK listens."""

    instruments: Instruments = field(default_factory=Instruments)
    tracer: Tracer | None = None
    enabled: bool = False
    explicit: bool = False
    """Whether providers were handed over (else the API's global ones are followed)."""
    checked: float = 0.0
    """When (monotonic) the global providers were last looked at."""
    backlog: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Pack → (episodes pending, age in seconds of the oldest), as last measured."""
    embedding_backlog: int | None = None
    """Episodes and facts without a vector of the embedder in use, as last measured."""
    detailed_records: bool = False
    """Whether a record's pass gets a span of its own with child spans (see
    :func:`record_span`)."""


_state = _State()
_API_MODULES: Final = ("opentelemetry.metrics", "opentelemetry.trace")
_api: tuple[Any, Any] | None = None
"""The ``opentelemetry.metrics`` and ``opentelemetry.trace`` modules (None: not loaded)."""


def _modules() -> tuple[Any, Any] | None:
    """The OpenTelemetry API's metrics and trace modules, or None when not importable."""
    global _api
    if _api is None:
        try:
            metrics, trace = (importlib.import_module(name) for name in _API_MODULES)
            _api = (metrics, trace)
        except ImportError:
            return None
    return _api


def available() -> bool:
    """Whether the OpenTelemetry API is importable (the ``otel`` extra)."""
    return _modules() is not None


def enabled() -> bool:
    """Whether measurements reach an SDK: providers handed to :func:`configure`, or the
    API's global ones once an SDK's were set there (looked at again every
    :data:`GLOBAL_CHECK_SECONDS`). Until then instruments and spans are no-ops."""
    return _current_state().enabled


def _current_state() -> _State:
    """The state, after following the global providers when they are due a look."""
    state = _state
    if not state.explicit and time.monotonic() - state.checked >= GLOBAL_CHECK_SECONDS:
        _follow_globals()
    return state


def _follow_globals() -> None:
    """Build from the global providers when an SDK's appeared there (or went away). An
    application that set one has imported the API: until then it is not imported here
    (which would cost every process that never measures)."""
    _state.checked = time.monotonic()
    if not any(name in sys.modules for name in _API_MODULES):
        return
    found = _modules()
    if found is None:
        return
    meters, tracers = found[0].get_meter_provider(), found[1].get_tracer_provider()
    if (_is_sdk(meters) or _is_sdk(tracers)) != _state.enabled:
        _build(meters, tracers)


def configure(
    meter_provider: MeterProvider | None = None,
    tracer_provider: TracerProvider | None = None,
    *,
    detailed_records: bool = False,
) -> None:
    """Measure into these providers (None: the API's global ones, followed when an SDK's
    is set there later); no-ops without the API or an SDK. With ``detailed_records``, a
    streaming record's pass gets its own span tree as every other pass does (by default
    it is described on the record's span: see :func:`record_span`)."""
    _state.detailed_records = detailed_records
    _state.explicit = meter_provider is not None or tracer_provider is not None
    _state.checked = time.monotonic()
    found = _modules()
    if found is None:
        _state.instruments, _state.tracer, _state.enabled = Instruments(), None, False
        return
    _build(
        meter_provider or found[0].get_meter_provider(),
        tracer_provider or found[1].get_tracer_provider(),
    )


def _build(meters: MeterProvider, tracers: TracerProvider) -> None:
    """Instruments from ``meters`` and the tracer from ``tracers``, those of an SDK only."""
    _state.instruments = _instruments_of(meters) if _is_sdk(meters) else Instruments()
    _state.tracer = tracers.get_tracer(SCOPE) if _is_sdk(tracers) else None
    if _state.tracer is not None:
        global _api_trace, _api_context
        _api_trace = importlib.import_module("opentelemetry.trace")
        _api_context = importlib.import_module("opentelemetry.context")
    _state.enabled = _is_sdk(meters) or _is_sdk(tracers)


_BUILT: dict[int, tuple[MeterProvider, Instruments]] = {}
"""Instruments by meter provider: made once each (a provider handed over again, or the
global one followed again, gets the same ones)."""


def _instruments_of(meters: MeterProvider) -> Instruments:
    """The package's instruments on ``meters``, created on first use."""
    found = _BUILT.get(id(meters))
    if found is None or found[0] is not meters:
        found = _BUILT[id(meters)] = (meters, _create(meters.get_meter(SCOPE)))
    return found[1]


def _is_sdk(provider: object) -> bool:
    """Whether ``provider`` is an implementation, not one of the API's no-op or proxies."""
    name = type(provider).__name__
    return not (name.startswith(("NoOp", "_NoOp", "_Proxy", "Proxy")))


def _tally(meter: Meter, name: str, unit: str, description: str, out: list[Any]) -> Tally:
    """A :class:`Tally` the SDK observes as the monotonic counter ``name``."""
    tally = Tally()
    out.append(meter.create_observable_counter(name, [tally.observe], unit, description))
    return tally


PASS_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
)  # fmt: skip
"""Bucket bounds (seconds) of the pass and apply durations: a streaming pass to a backlog's."""
RECALL_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
"""Bucket bounds (seconds) of the recall durations."""


def _histogram(
    meter: Meter, name: str, description: str, bounds: Sequence[float], spreads: list[Spread]
) -> Spread:
    """A :class:`Spread` over a histogram of seconds with these bucket bounds as its advice
    (an API older than 1.23 takes no advice: the SDK's default bounds then)."""
    try:
        made = meter.create_histogram(
            name, "s", description, explicit_bucket_boundaries_advisory=bounds
        )
    except TypeError:  # pragma: no cover - older API
        made = meter.create_histogram(name, "s", description)
    spread = Spread(made)
    spreads.append(spread)
    return spread


def _flusher(
    spreads: Sequence[Spread], tools: list[Instruments]
) -> Callable[[CallbackOptions], list[Observation]]:
    """An observable instrument's callback that does the put-off countings of ``tools``
    (its one :class:`Instruments`, once made) and hands every spread's measurements over
    (the SDK runs callbacks in the order their instruments were made, before it reads its
    storage: this one is made first), and observes nothing."""

    def flush(options: CallbackOptions) -> list[Observation]:
        for made in tools:
            made.catch_up()
        for spread in spreads:
            spread.flush()
        return []

    return flush


def _create(meter: Meter) -> Instruments:
    """Every instrument of the package from ``meter``."""
    kept: list[Any] = []
    spreads: list[Spread] = []
    made: list[Instruments] = []
    # first: its callback does the put-off countings and hands the histograms' waiting
    # measurements over at collection
    kept.append(
        meter.create_observable_gauge(
            "stargraph_mem.telemetry.flush", [_flusher(spreads, made)], "1", "Observes nothing."
        )
    )
    out = Instruments(
        passes=_tally(
            meter, "stargraph_mem.passes", "{pass}", "Consolidation passes, by outcome.", kept
        ),
        episodes=_tally(
            meter,
            "stargraph_mem.episodes.consumed",
            "{episode}",
            "Episodes read by applied passes.",
            kept,
        ),
        deltas=_tally(
            meter, "stargraph_mem.deltas", "{delta}", "Deltas of applied passes, by kind.", kept
        ),
        rejections=_tally(
            meter,
            "stargraph_mem.rejections",
            "{episode}",
            "Episodes rejected by passes, by reason.",
            kept,
        ),
        quarantines=_tally(
            meter,
            "stargraph_mem.quarantines",
            "{quarantine}",
            "Rows that could not be decoded, and partitions whose pass failed.",
            kept,
        ),
        pass_duration=_histogram(
            meter,
            "stargraph_mem.pass.duration",
            "One pass: read, CLIPS run and apply.",
            PASS_BUCKETS,
            spreads,
        ),
        apply_duration=_histogram(
            meter,
            "stargraph_mem.pass.apply.duration",
            "The apply of one pass.",
            PASS_BUCKETS,
            spreads,
        ),
        sweep_candidates=_tally(
            meter,
            "stargraph_mem.sweep.candidates",
            "{partition}",
            "Partitions with candidate facts found by sweeps at their fire times.",
            kept,
        ),
        takeovers=_tally(
            meter,
            "stargraph_mem.lease.takeovers",
            "{lease}",
            "Partitions leased after another worker held them without applying a pass.",
            kept,
        ),
        conflicts=_tally(
            meter,
            "stargraph_mem.conflicts.retried",
            "{pass}",
            "Passes decided or computed again after another writer got there first.",
            kept,
        ),
        recall_duration=_histogram(
            meter,
            "stargraph_mem.recall.duration",
            "One recall, by strategy.",
            RECALL_BUCKETS,
            spreads,
        ),
    )
    kept += [
        meter.create_observable_gauge(
            "stargraph_mem.backlog.episodes",
            [_observe_pending],
            "{episode}",
            "Episodes not consumed yet, per pack, as the worker last measured them.",
        ),
        meter.create_observable_gauge(
            "stargraph_mem.embedding.backlog",
            [_observe_embedding_backlog],
            "{item}",
            "Episodes and current facts not embedded yet (embedded by the next recall of "
            "their partition, or by a backfill).",
        ),
        meter.create_observable_gauge(
            "stargraph_mem.backlog.oldest_age",
            [_observe_age],
            "s",
            "Age of the oldest episode not consumed yet, per pack.",
        ),
    ]
    out.observed = kept
    out.live = True
    made.append(out)
    return out


def _observations(index: int) -> list[Observation]:
    found = _modules()
    assert found is not None
    metrics = found[0]
    return [
        metrics.Observation(values[index], {PACK: pack})
        for pack, values in dict(_state.backlog).items()
    ]


def _observe_pending(options: CallbackOptions) -> list[Observation]:
    return _observations(0)


def _observe_age(options: CallbackOptions) -> list[Observation]:
    return _observations(1)


def _observe_embedding_backlog(options: CallbackOptions) -> list[Observation]:
    found = _modules()
    if found is None or _state.embedding_backlog is None:
        return []
    return [found[0].Observation(_state.embedding_backlog)]


def set_embedding_backlog(items: int) -> None:
    """The embedding backlog the gauge reports (items without a vector)."""
    _state.embedding_backlog = items


def set_backlog(pack: str, episodes: int, oldest_age: float) -> None:
    """The backlog the gauges report for ``pack`` (episodes pending, oldest age in s)."""
    _state.backlog[pack] = (episodes, oldest_age)


def instruments() -> Instruments:
    """The instruments in effect (no-ops until an SDK listens)."""
    enabled()
    return _state.instruments


def live_instruments() -> Instruments | None:
    """The instruments in effect when an SDK's meter made them, else None (one call for
    the check and the instruments: a record pays for every call)."""
    tools = _current_state().instruments
    return tools if tools.live else None


_NOTHING: Final = nullcontext()
_NULL_CURRENT: Final = nullcontext(_NULL_SPAN)


class _Current:
    """A span started with the caller's span as parent, current inside the ``with`` block
    and ended after it, an exception recorded on it: what the tracer's
    ``start_as_current_span`` does, in a third of the calls (a record pays for each)."""

    __slots__ = ("_token", "span")

    def __init__(self, span: Any) -> None:
        self.span = span
        self._token: Any = None

    def __enter__(self) -> Any:
        self._token = _api_context.attach(_api_trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        _api_context.detach(self._token)
        if error is not None:
            _failed(self.span, error)
        self.span.end()


def _failed(span: Any, error: BaseException) -> None:
    """Record ``error`` on ``span`` when it is an ``Exception`` (as the API's ``use_span``:
    not ``GeneratorExit`` and kin)."""
    if isinstance(error, Exception):
        trace = _api_trace
        span.record_exception(error)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))


class _RecordCurrent:
    """A record's span, current inside the ``with`` block as :class:`_Current`'s, that
    also waits there for the record's first pass to describe itself on (see
    :func:`record_span`): that pass finds it in :data:`_FOLD`."""

    __slots__ = ("_fold_token", "_token", "fold", "span")

    def __init__(self, span: Any, fold: bool) -> None:
        self.span = span
        self.fold = fold
        """Whether a pass may still describe itself on this span (taken once)."""
        self._token: Any = None
        self._fold_token: Any = None

    def __enter__(self) -> Any:
        self._token = _api_context.attach(_api_trace.set_span_in_context(self.span))
        # a record's passes fold into it, or (fold=False) none does, not even into an
        # enclosing record's
        self._fold_token = _FOLD.set(self if self.fold else None)
        return self.span

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        _FOLD.reset(self._fold_token)
        _api_context.detach(self._token)
        if error is not None:
            _failed(self.span, error)
        self.span.end()


_api_trace: Any = None
_api_context: Any = None
"""``opentelemetry.trace`` and ``opentelemetry.context``, once a tracer was built."""


def span(name: str, attributes: Attributes | None = None) -> AbstractContextManager[Any]:
    """A span over the ``with`` block, current inside it (a child of the caller's)."""
    tracer = _state.tracer if enabled() else None
    if tracer is None:
        return _NULL_CURRENT
    return _Current(tracer.start_span(name, attributes=attributes))


_FOLD: ContextVar[_RecordCurrent | None] = ContextVar("stargraph_mem_fold", default=None)
"""The record span a record's first pass may describe itself on (taken once)."""


RECORD_SPAN: Final = "stargraph_mem.record"


def record_span(
    attributes: Attributes | None = None, *, fold: bool = True
) -> AbstractContextManager[Any]:
    """The span of one ``record``: current inside the block, and the span its first pass
    describes itself on (pack, rule and partition counts, episodes read, and the read,
    CLIPS run and apply seconds as attributes), so a streaming record costs one span, not
    five. A second pass of the same record (another pack, a backlog) gets its own span
    tree; so does every pass after ``configure(detailed_records=True)``, and every pass of
    a span opened with ``fold=False`` (``record_many``: one record, many partitions)."""
    state = _current_state()
    tracer = state.tracer  # None unless an SDK's tracer listens
    if tracer is None:
        return _NULL_CURRENT
    span = tracer.start_span(RECORD_SPAN, attributes=attributes)
    return _RecordCurrent(span, fold and not state.detailed_records)


_KINDS: dict[tuple[str, str], dict[str, str]] = {}
"""The duration histograms' attributes by (pack, pass kind): made once each (a
:class:`Spread` keeps them as they are until the SDK collects)."""


def _durations(tools: Instruments, timed: tuple[tuple[str, str], float, float]) -> None:
    """Record a pass's duration and its apply's, attributed by (pack, pass kind)."""
    key, seconds, apply = timed
    found = _KINDS.get(key)
    if found is None:
        found = _KINDS[key] = {PACK: key[0], PASS_KIND: key[1]}
    tools.pass_duration.record(seconds, found)
    tools.apply_duration.record(apply, found)


class PassSpan:
    """One pass's span, opened when it starts and ended once its apply is done (which may
    run while the next pass is computed): its read and CLIPS run become child spans from
    the pass's timings, its apply a child span around the commit. A record's first pass
    is folded into the record's span instead (see :func:`record_span`): its attributes
    are kept here and set on that span in one call when the pass ends."""

    __slots__ = ("_folded", "_kind", "_start", "_tracer", "span")

    span: Any
    """The pass's span (the record's when folded; a no-op one when no SDK listens)."""
    _kind: tuple[str, str]
    """(pack, pass kind): the duration histograms' attributes (see :func:`_durations`)."""
    _folded: dict[str, Any] | None
    """A folded pass's attributes, set on the record's span once, when the pass ends."""

    def __init__(self, pack: str, rules: int, partitions: int, kind: str = "episodes") -> None:
        self._kind = (pack, kind)
        self._start = 0
        self._folded = None
        record = _FOLD.get()
        if record is not None and record.fold:  # a record's span waits for its first pass
            record.fold = False
            self._tracer = None
            self.span = record.span
            self._folded = {PACK: pack, RULE_COUNT: rules, PARTITION_COUNT: partitions}
            if kind != "episodes":  # a record's pass reads episodes (said once, here)
                self._folded[PASS_KIND] = kind
            return
        self._tracer = _state.tracer if enabled() else None
        if self._tracer is None:
            self.span = _NULL_SPAN
            return
        self._start = time.time_ns()
        self.span = self._tracer.start_span(
            "stargraph_mem.pass",
            attributes={
                PACK: pack,
                RULE_COUNT: rules,
                PARTITION_COUNT: partitions,
                PASS_KIND: kind,
            },
            start_time=self._start,
        )

    def current(self) -> AbstractContextManager[Any]:
        """The pass's span is the current one inside the block (not ended by it)."""
        if self._folded is not None or self._tracer is None:
            return _NOTHING
        if not self.span.is_recording():
            return _NOTHING
        used: AbstractContextManager[Any] = _api_trace.use_span(
            self.span, end_on_exit=False, record_exception=False
        )
        return used

    def phases(self, read: float, run: float, episodes: int) -> None:
        """Child spans ``read`` and ``clips_run`` from the pass's start, of these many
        seconds, and the episodes it read."""
        folded = self._folded
        if folded is not None:
            folded[EPISODE_COUNT] = episodes
            folded[READ_SECONDS] = read
            folded[RUN_SECONDS] = run
            return
        if self._tracer is None or not self.span.is_recording():
            return
        parent = _api_trace.set_span_in_context(self.span)
        self.span.set_attribute(EPISODE_COUNT, episodes)
        read_end = self._start + int(read * 1e9)
        for name, start, end in (
            ("stargraph_mem.pass.read", self._start, read_end),
            ("stargraph_mem.pass.clips_run", read_end, read_end + int(run * 1e9)),
        ):
            self._tracer.start_span(name, parent, start_time=start).end(end_time=end)

    def apply(self) -> AbstractContextManager[Any]:
        """A child span ``apply`` over the block (the pass's commit), current inside it."""
        if self._folded is not None or self._tracer is None:
            return _NOTHING
        if not self.span.is_recording():
            return _NOTHING
        parent = _api_trace.set_span_in_context(self.span)
        return self._tracer.start_as_current_span("stargraph_mem.pass.apply", parent)

    def timed(self, compute: float, apply: float) -> None:
        """Record the applied pass's duration (``compute`` + ``apply`` seconds) and its
        apply's in the histograms (one measurement per pass span: a batch of partitions
        is one), when the SDK next collects (:attr:`Instruments.durations`)."""
        if self._folded is not None:
            self._folded[APPLY_SECONDS] = apply
        tools = _state.instruments
        if tools.live:  # a deque append: a record pays for every call
            waiting = tools.durations
            waiting.append((self._kind, compute + apply, apply))
            if len(waiting) >= tools.LATER_LIMIT:
                tools.catch_up()

    def end(self, error: BaseException | None = None) -> None:
        """End the pass's span (recording ``error`` when it failed)."""
        if self._folded is not None:  # the record ends its span (and records its error)
            if error is not None:
                self._folded[ERROR_TYPE] = type(error).__name__
            self.span.set_attributes(self._folded)
            return
        if self._tracer is None:
            return
        if error is not None:
            self.span.record_exception(error)
            self.span.set_attribute(ERROR_TYPE, type(error).__name__)
            self.span.set_status(_api_trace.Status(_api_trace.StatusCode.ERROR))
        self.span.end()
