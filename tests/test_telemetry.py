"""Metrics, traces and worker logs: a known run measured with the OpenTelemetry SDK's
in-memory reader and exporter on both backends, no user content in any attribute, the
package working without OpenTelemetry importable, and ``run --metrics-port`` serving
Prometheus' text format."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import NewLocation
from e2e_helpers import SEED_PACK, episode, spo
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from stargraph_mem import telemetry
from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.operations import Backlog, JsonFormatter, log_tick, tick_fields
from stargraph_mem.engine.passes import observe
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.engine.schedule.scheduler import ConsolidationReport, Due
from stargraph_mem.stores.scope import Partition

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
T40 = T0 + timedelta(days=40)
SEED = "seed"
EXPIRE = "expire_speculative"

Key = tuple[str, frozenset[tuple[str, Any]]]


@dataclass
class Otel:
    """The SDK's in-memory reader and exporter, fed by the package's instruments."""

    reader: InMemoryMetricReader
    exporter: InMemorySpanExporter
    tracer: TracerProvider

    def points(self) -> dict[Key, Any]:
        """Metric name and attributes → a sum's value, a histogram's count, a gauge's value."""
        out: dict[Key, Any] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count  # type: ignore[union-attr]
                        key = (metric.name, frozenset((point.attributes or {}).items()))
                        out[key] = value
        return out

    def units(self) -> dict[str, str]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            m.name: m.unit or ""
            for r in data.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        }

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def otel() -> Iterator[Otel]:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(MeterProvider(metric_readers=[reader]), tracer)
    yield Otel(reader, exporter, tracer)
    telemetry.configure()


def at(name: str, **attributes: Any) -> Key:
    return (name, frozenset(attributes.items()))


def attrs(pack: str, **more: Any) -> dict[str, Any]:
    return {"stargraph_mem.pack": pack, **{f"stargraph_mem.{k}": v for k, v in more.items()}}


class Clock:
    def __init__(self, when: datetime) -> None:
        self.when = when

    def __call__(self) -> datetime:
        return self.when


def packs() -> list[CompiledPack]:
    return [compile_text(SEED_PACK), compile_file(RULES / "expire_speculative.yaml")]


async def known_run(location: str) -> list[ConsolidationReport]:
    """Three triples and one episode no rule matches recorded at T0 (each consolidated at
    once by the streaming pack), a search, then the tick at T40: the nightly sweep deletes
    the three unconfirmed guesses of the two users."""
    clock = Clock(T0)
    reports: list[ConsolidationReport] = []
    async with Consolidator(location, packs(), clock=clock) as mem:
        reports.append(await mem.record(episode("a1", at=T0, **spo("alice", "likes", "opera"))))
        reports.append(
            await mem.record(episode("b1", at=T0, user="bob", **spo("bob", "likes", "jazz")))
        )
        reports.append(
            await mem.record(episode("b2", at=T0, user="bob", **spo("bob", "likes", "tea")))
        )
        reports.append(await mem.record(episode("c1", at=T0, user="bob", note="no triple")))
        assert len(await mem.search("opera", user="alice")) == 1
        clock.when = T40
        reports.append(await mem.tick(T40))
    return reports


async def test_a_known_run_measures_passes_deltas_rejections_and_sweeps(
    new_location: NewLocation, otel: Otel
) -> None:
    reports = await known_run(new_location())
    found = otel.points()
    passes = "stargraph_mem.passes"
    applied = {"pass.outcome": "applied"}
    assert found[at(passes, **attrs(SEED, **{"pass.kind": "episodes"}, **applied))] == 4
    tick = reports[-1]
    swept = [p for p in tick.passes if p.sweep]
    episodic = [p for p in tick.passes if not p.sweep]
    assert len(swept) == 2 and all(p.pack == EXPIRE for p in swept)
    assert found[at(passes, **attrs(EXPIRE, **{"pass.kind": "sweep"}, **applied))] == 2
    if episodic:  # the expiry pack's episode rule ran over the partitions at its cron time
        expected = len(episodic)
        assert found[at(passes, **attrs(EXPIRE, **{"pass.kind": "episodes"}, **applied))] == (
            expected
        )
    assert found[at("stargraph_mem.episodes.consumed", **attrs(SEED))] == 4
    assert found[at("stargraph_mem.deltas", **attrs(SEED, **{"delta.kind": "add"}))] == 3
    assert found[at("stargraph_mem.deltas", **attrs(EXPIRE, **{"delta.kind": "delete"}))] == 3
    assert tick.counts["delete"] == 3
    reason = {"rejection.reason": "unmatched"}
    assert found[at("stargraph_mem.rejections", **attrs(SEED, **reason))] == 1
    rule = {"stargraph_mem.rule": "expire_unreinforced"}
    assert found[at("stargraph_mem.sweep.candidates", **attrs(EXPIRE), **rule)] == 2
    kind = attrs(SEED, **{"pass.kind": "episodes"})
    assert found[at("stargraph_mem.pass.duration", **kind)] == 4
    assert found[at("stargraph_mem.pass.apply.duration", **kind)] == 4
    strategy = {"stargraph_mem.recall.strategy": "full_text"}
    assert found[at("stargraph_mem.recall.duration", **strategy)] == 1
    units = otel.units()
    assert units["stargraph_mem.pass.duration"] == "s"
    assert units["stargraph_mem.recall.duration"] == "s"
    assert units["stargraph_mem.passes"] == "{pass}"
    assert units["stargraph_mem.deltas"] == "{delta}"


async def test_a_known_run_traces_each_pass_with_read_run_and_apply(
    new_location: NewLocation, otel: Otel
) -> None:
    """A record's pass is described on the record's span (one span per record); every
    other pass is a span of its own with read, CLIPS run and apply as children."""
    await known_run(new_location())
    spans = otel.spans()
    records = [s for s in spans if s.name == "stargraph_mem.record"]
    assert len(records) == 4
    for record in records:
        assert record.attributes is not None
        assert record.attributes["stargraph_mem.pack"] == SEED
        assert record.attributes["stargraph_mem.rule.count"] == 1
        assert record.attributes["stargraph_mem.partition.count"] == 1
        assert record.attributes["stargraph_mem.episode.count"] == 1
        for phase in ("read", "clips_run", "apply"):
            seconds = record.attributes[f"stargraph_mem.pass.{phase}.duration"]
            assert isinstance(seconds, float) and 0 <= seconds < 60
        assert record.context is not None
        children = [s for s in spans if s.parent and s.parent.span_id == record.context.span_id]
        assert children == []
    passes = [s for s in spans if s.name == "stargraph_mem.pass"]
    for span in passes:
        assert span.context is not None
        children_names = sorted(
            s.name for s in spans if s.parent and s.parent.span_id == span.context.span_id
        )
        assert children_names == [
            "stargraph_mem.pass.apply",
            "stargraph_mem.pass.clips_run",
            "stargraph_mem.pass.read",
        ]
    (tick,) = [s for s in spans if s.name == "stargraph_mem.tick"]
    sweeps = [
        p
        for p in passes
        if p.attributes is not None and p.attributes["stargraph_mem.pass.kind"] == "sweep"
    ]
    assert len(sweeps) == 1
    (sweep,) = sweeps
    assert sweep.attributes is not None
    assert sweep.attributes["stargraph_mem.partition.count"] == 2
    assert sweep.context.trace_id == tick.context.trace_id
    (recall,) = [s for s in spans if s.name == "stargraph_mem.recall"]
    assert recall.attributes is not None
    assert recall.attributes["stargraph_mem.recall.strategy"] == "full_text"
    assert recall.attributes["stargraph_mem.recall.hits"] == 1


async def test_detailed_records_give_a_record_s_pass_its_own_span_tree(
    new_location: NewLocation, otel: Otel
) -> None:
    telemetry.configure(None, otel.tracer, detailed_records=True)
    async with Consolidator(new_location(), [compile_text(SEED_PACK)]) as mem:
        await mem.record(episode("a1", at=T0, **spo("alice", "likes", "opera")))
    spans = otel.spans()
    (record,) = [s for s in spans if s.name == "stargraph_mem.record"]
    assert record.attributes is not None and "stargraph_mem.pack" not in record.attributes
    (span,) = [s for s in spans if s.name == "stargraph_mem.pass"]
    assert span.parent is not None and record.context is not None
    assert span.parent.span_id == record.context.span_id
    assert span.context is not None
    children = sorted(
        s.name for s in spans if s.parent and s.parent.span_id == span.context.span_id
    )
    assert children == [
        "stargraph_mem.pass.apply",
        "stargraph_mem.pass.clips_run",
        "stargraph_mem.pass.read",
    ]


async def test_record_many_keeps_its_batch_size_and_traces_each_pass(
    new_location: NewLocation, otel: Otel
) -> None:
    async with Consolidator(new_location(), [compile_text(SEED_PACK)]) as mem:
        await mem.record_many(
            [
                episode("a1", at=T0, **spo("alice", "likes", "opera")),
                episode("b1", at=T0, user="bob", **spo("bob", "likes", "jazz")),
            ]
        )
    spans = otel.spans()
    (record,) = [s for s in spans if s.name == "stargraph_mem.record"]
    assert record.attributes is not None
    assert record.attributes["stargraph_mem.episode.count"] == 2
    assert "stargraph_mem.pack" not in record.attributes
    passes = [s for s in spans if s.name == "stargraph_mem.pass"]
    assert len(passes) == 2
    assert record.context is not None
    assert all(p.parent and p.parent.span_id == record.context.span_id for p in passes)


def test_a_record_span_is_current_in_its_block_and_records_the_error_it_ends_with(
    otel: Otel,
) -> None:
    """As the API's own context manager does: current inside, an exception leaving the
    block recorded with an error status, the caller's context back after it."""
    with pytest.raises(ValueError), telemetry.record_span() as span:
        assert trace.get_current_span() is span
        raise ValueError("boom")
    assert trace.get_current_span() is trace.INVALID_SPAN
    (ended,) = otel.spans()
    assert ended.name == "stargraph_mem.record"
    assert ended.status.status_code is trace.StatusCode.ERROR
    assert [event.name for event in ended.events] == ["exception"]


async def test_spans_continue_the_callers_trace(new_location: NewLocation, otel: Otel) -> None:
    """A request's span (an agent graph's node, an MCP call) is the parent of the memory's."""
    tracer = otel.tracer.get_tracer("caller")
    async with Consolidator(new_location(), [compile_text(SEED_PACK)], clock=Clock(T0)) as mem:
        with tracer.start_as_current_span("agent.request") as request:
            await mem.record(episode("a1", at=T0, **spo("alice", "likes", "opera")))
            await mem.search("opera")
    mine = {s.name: s for s in otel.spans()}
    context = request.get_span_context()
    for name in ("stargraph_mem.record", "stargraph_mem.recall"):
        span = mine[name]
        assert span.parent is not None and span.parent.span_id == context.span_id
        assert span.context.trace_id == context.trace_id


MARK = "zq7secret"
"""Stamped into every user-given value of the run below."""


async def test_no_metric_attribute_holds_user_content(
    new_location: NewLocation, otel: Otel
) -> None:
    clock = Clock(T0)
    async with Consolidator(new_location(), packs(), clock=clock) as mem:
        for n in range(3):
            user, session, agent = f"{MARK}-user{n}", f"{MARK}-s", f"{MARK}-a"
            triple = spo(f"{MARK}-subj", "likes", f"{MARK}-obj{n}")
            said = episode(
                f"{MARK}-{n}",
                at=T0,
                content=MARK,
                user=user,
                session=session,
                agent=agent,
                **triple,
            )
            await mem.record(said)
            other = episode(
                f"{MARK}-x{n}", at=T0, user=user, session=session, agent=agent, note=MARK
            )
            await mem.record(other)
        await mem.search(MARK)
        clock.when = T40
        await mem.tick(T40)
        await Backlog().measure(mem, T40, force=True)
    found = otel.points()
    assert found
    keys = {k for _, attributes in found for k, _ in attributes}
    assert keys <= telemetry.ATTRIBUTE_KEYS
    values = [str(v) for _, attributes in found for _, v in attributes]
    assert not [v for v in values if MARK in v]
    for span in otel.spans():  # nor any span attribute
        assert not [v for v in (span.attributes or {}).values() if MARK in str(v)]


async def test_backlog_gauges_count_pending_episodes_and_the_oldest_age(
    new_location: NewLocation, otel: Otel
) -> None:
    nightly = compile_file(RULES / "dedup_against_facts.yaml")
    async with Consolidator(new_location(), [nightly], clock=Clock(T0)) as mem:
        for n, user in enumerate(["alice", "bob", "bob"]):
            when = T0 + timedelta(minutes=n)
            await mem.record(episode(f"e{n}", at=when, user=user, **spo(user, "likes", "tea")))
        assert await Backlog().measure(mem, T0 + timedelta(hours=1), force=True)
    found = otel.points()
    pack = attrs("dedup_against_facts")
    assert found[at("stargraph_mem.backlog.episodes", **pack)] == 3
    assert found[at("stargraph_mem.backlog.oldest_age", **pack)] == 3600.0


async def test_a_lease_held_by_a_silent_worker_is_counted_as_taken_over(
    new_location: NewLocation, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    nightly = compile_file(RULES / "dedup_against_facts.yaml")
    night = datetime(2026, 11, 2, 3, 30, tzinfo=UTC)
    async with Consolidator(new_location(), [nightly], holder="here/1/a") as mem:
        await mem.record(episode("e1", at=T0, **spo("alice", "likes", "tea")))
        gone = "elsewhere/1/b"  # a worker of another host: alive until its lease expires
        alice = [Partition("alice", "rag")]
        assert await mem.fact_store.claim_partitions(alice, gone, 600.0)
        held = await mem.tick(night)
        assert [d.rule_id for d in held.held] and not held.passes
        # it went silent: its lease runs out (its own claim renewed for no time at all)
        assert await mem.fact_store.claim_partitions(alice, gone, 0.0)
        with caplog.at_level(logging.WARNING, logger="stargraph_mem.worker"):
            taken = await mem.tick(night)
        assert [p.applied for p in taken.passes] == [True]
    found = otel.points()
    assert found[at("stargraph_mem.lease.takeovers", **attrs("dedup_against_facts"))] == 1
    assert "took over the lease" in caplog.text


async def test_conflicts_and_recomputed_passes_are_counted(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    report = ConsolidationReport(now=T0)
    report.conflicts = [Due("p", "r", Partition("u", "a")), Due("p", "s", Partition("u", "a"))]
    observe.report(report)
    with caplog.at_level(logging.WARNING, logger="stargraph_mem.worker"):
        observe.stale_retry("p", Partition("u", "a"), 1)
    found = otel.points()
    retried = "stargraph_mem.conflicts.retried"
    assert found[at(retried, **attrs("p", **{"conflict.kind": "scheduler"}))] == 2
    assert found[at(retried, **attrs("p", **{"conflict.kind": "stale"}))] == 1
    assert "computing it again" in caplog.text


async def test_the_tick_log_line_is_one_json_object(new_location: NewLocation) -> None:
    clock = Clock(T0)
    async with Consolidator(new_location(), packs(), clock=clock) as mem:
        await mem.record(episode("a1", at=T0, **spo("alice", "likes", "opera")))
        clock.when = T40
        report = await mem.tick(T40)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    worker = logging.getLogger("stargraph_mem.worker")
    worker.addHandler(handler)
    worker.setLevel(logging.INFO)
    try:
        log_tick(report)
    finally:
        worker.removeHandler(handler)
        worker.setLevel(logging.NOTSET)
    (line,) = stream.getvalue().splitlines()
    document = json.loads(line)
    assert document["event"] == "tick" and document["level"] == "info"
    assert document["logger"] == "stargraph_mem.worker"
    fields = tick_fields(report)
    assert {k: document[k] for k in fields} == fields
    assert (fields["passes"], fields["episodes"], fields["delete"]) == (2, 1, 1)


def test_without_opentelemetry_everything_works(tmp_path: Path) -> None:
    """With the ``opentelemetry`` package not importable, instruments and spans are no-ops
    and a record, a tick and a search work as before."""
    code = textwrap.dedent(
        f"""
        import asyncio, json, sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from e2e_helpers import SEED_PACK, episode, spo
        from stargraph_mem import telemetry
        from stargraph_mem.compiler.pack import compile_text
        from stargraph_mem.engine.api import Consolidator

        async def main():
            async with Consolidator(sys.argv[1], [compile_text(SEED_PACK)]) as mem:
                done = await mem.record(episode("a1", **spo("alice", "likes", "tea")))
                await mem.tick()
                hits = await mem.search("tea")
            return done.counts["add"], len(hits)

        added, hits = asyncio.run(main())
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m])
        print(json.dumps([telemetry.available(), telemetry.enabled(), added, hits, loaded]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, False, 1, 1, []]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _scrape(url: str, proc: subprocess.Popen[str], wanted: str) -> str:
    """The metrics text once it holds ``wanted`` (the worker's first tick applied a pass)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text: str = response.read().decode()
            if wanted in text:
                return text
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{url} never served {wanted}")


def test_run_metrics_port_serves_prometheus_text(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    scope = ["--user", "alice", "--session", "s1", "--agent", "rag"]
    meta = ["--meta", "subject=alice", "--meta", "predicate=likes", "--meta", "object=tea"]
    stamp = ["--timestamp", "2026-11-01T09:00:00+00:00"]
    put = CliRunner().invoke(app, ["put", "--db", str(db), *scope, *stamp, *meta, "tea"])
    assert put.exit_code == 0, put.output
    port = _free_port()
    pack = str(RULES / "dedup_against_facts.yaml")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from stargraph_mem.cli import main; main()", "run", "--db",
         str(db), "--pack", pack, "--interval", "0.05", "--metrics-port", str(port),
         "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        text = _scrape(f"http://127.0.0.1:{port}/metrics", proc, "stargraph_mem_passes")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = families["stargraph_mem_passes"].samples
    assert sample.name == "stargraph_mem_passes_total" and sample.value == 1
    assert {k: v for k, v in sample.labels.items() if not k.startswith("otel_")} == {
        "stargraph_mem_pack": "dedup_against_facts",
        "stargraph_mem_pass_kind": "episodes",
        "stargraph_mem_pass_outcome": "applied",
    }
    assert "stargraph_mem_pass_duration_seconds" in families
    ticks = [json.loads(line) for line in err.splitlines()]
    assert ticks and all(t["event"] == "tick" for t in ticks)
    assert ticks[0]["passes"] == 1 and ticks[0]["add"] == 1
    assert out.splitlines()[-1] == "stopped"


def test_global_providers_set_later_are_followed(tmp_path: Path) -> None:
    """An application that sets the SDK's providers globally, after the package was
    imported and had measured nothing, gets the measurements (the globals are looked at
    again every second)."""
    code = textwrap.dedent(
        f"""
        import asyncio, json, sys, time
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from e2e_helpers import SEED_PACK, episode, spo
        from stargraph_mem import telemetry
        from stargraph_mem.compiler.pack import compile_text
        from stargraph_mem.engine.api import Consolidator

        async def main():
            async with Consolidator(sys.argv[1], [compile_text(SEED_PACK)]) as mem:
                await mem.record(episode("a1", **spo("alice", "likes", "tea")))
                before = telemetry.enabled()
                from opentelemetry import metrics, trace
                from opentelemetry.sdk.metrics import MeterProvider
                from opentelemetry.sdk.metrics.export import InMemoryMetricReader
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import SimpleSpanProcessor
                from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                    InMemorySpanExporter,
                )
                reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
                metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
                tracer = TracerProvider()
                tracer.add_span_processor(SimpleSpanProcessor(exporter))
                trace.set_tracer_provider(tracer)
                time.sleep(telemetry.GLOBAL_CHECK_SECONDS + 0.1)
                await mem.record(episode("a2", **spo("alice", "likes", "jazz")))
                names = sorted(
                    m.name
                    for r in reader.get_metrics_data().resource_metrics
                    for s in r.scope_metrics
                    for m in s.metrics
                )
                spans = sorted({{s.name for s in exporter.get_finished_spans()}})
                record = [s for s in exporter.get_finished_spans() if s.name.endswith("record")]
                spans.append(record[0].attributes["stargraph_mem.pack"])
                return before, telemetry.enabled(), "stargraph_mem.passes" in names, spans

        print(json.dumps(asyncio.run(main())))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    before, after, counted, spans = json.loads(done.stdout.splitlines()[-1])
    assert (before, after, counted) == (False, True, True)
    assert spans == ["stargraph_mem.record", "seed"]  # the record's pass is on its span


def test_durations_wait_in_the_process_until_the_sdk_collects(otel: Otel) -> None:
    tools = telemetry.instruments()
    kind = {"stargraph_mem.pack": "p", "stargraph_mem.pass.kind": "episodes"}
    for seconds in (0.001, 0.002, 0.5):
        tools.pass_duration.record(seconds, kind)
    data = otel.reader.get_metrics_data()
    assert data is not None
    (metric,) = [
        m
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "stargraph_mem.pass.duration"
    ]
    (point,) = metric.data.data_points
    assert point.count == 3  # type: ignore[union-attr]
    assert abs(point.sum - 0.503) < 1e-9  # type: ignore[union-attr]
    names = {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert "stargraph_mem.telemetry.flush" not in names  # it observes nothing


def test_a_spread_hands_its_measurements_over_when_too_many_wait() -> None:
    got: list[float] = []

    class Sink:
        def record(self, amount: float, attributes: Any = None) -> None:
            got.append(amount)

    spread = telemetry.Spread(Sink())
    for n in range(telemetry.Spread.LIMIT - 1):
        spread.record(float(n))
    assert got == []
    spread.record(-1.0)
    assert len(got) == telemetry.Spread.LIMIT and got[-1] == -1.0


async def test_a_record_s_counts_wait_until_the_sdk_collects(
    new_location: NewLocation, otel: Otel
) -> None:
    """A streaming record's report is counted when the SDK collects (a list append on the
    record's path), with the totals an immediate count gives; an SDK no longer listening
    counts nothing of what it was not given."""
    tools = telemetry.instruments()
    clock = Clock(T0)
    async with Consolidator(new_location(), packs(), clock=clock) as mem:
        await mem.record(episode("a1", at=T0, **spo("alice", "likes", "opera")))
        await mem.record(episode("a2", at=T0, **spo("alice", "likes", "jazz")))
        assert len(tools.waiting) == 2  # nothing counted yet
        points = otel.points()
        assert not tools.waiting
        assert points[at("stargraph_mem.episodes.consumed", **attrs(SEED))] == 2
        consumed = at(
            "stargraph_mem.passes",
            **attrs(SEED, **{"pass.kind": "episodes", "pass.outcome": "applied"}),
        )
        assert points[consumed] == 2
        await mem.record(episode("a3", at=T0, **spo("alice", "likes", "tea")))
        assert otel.points()[consumed] == 3


def test_put_off_counts_are_done_at_once_when_too_many_wait() -> None:
    tools = telemetry.Instruments(live=True)
    done: list[int] = []
    for n in range(telemetry.Instruments.LATER_LIMIT - 1):
        tools.later(lambda _tools, k: done.append(k), n)
    assert done == []
    tools.later(lambda _tools, k: done.append(k), -1)
    assert done == [*range(telemetry.Instruments.LATER_LIMIT - 1), -1]
    assert not tools.waiting
    idle = telemetry.Instruments()  # no SDK: nothing is kept
    idle.later(lambda _tools, k: done.append(k), 7)
    assert not idle.waiting and done[-1] == -1


def test_a_big_report_is_counted_at_once(otel: Otel) -> None:
    """A report of more than a few passes (a nightly run's: it may hold many deltas) is
    counted now, not kept until the SDK collects."""
    tools = telemetry.instruments()

    def of(passes: int) -> ConsolidationReport:
        done = ConsolidationReport(now=T0)
        done.passes.extend(
            PassReport("p", "h", Partition(f"u{n}", "a"), T0, ["r"], episodes=1, applied=True)
            for n in range(passes)
        )
        return done

    consumed = at("stargraph_mem.episodes.consumed", **attrs("p"))
    observe.report(of(observe.SMALL_REPORT))
    assert len(tools.waiting) == 1
    observe.report(of(observe.SMALL_REPORT + 1))
    assert len(tools.waiting) == 1  # counted at once
    assert otel.points()[consumed] == 2 * observe.SMALL_REPORT + 1
    assert not tools.waiting


def test_counts_made_on_several_threads_while_the_sdk_collects_are_never_lost() -> None:
    """Passes count on the event loop's thread and put counting off for the collection,
    which runs on the SDK's thread: every count reaches the totals, however they meet."""
    tools = telemetry.Instruments(passes=telemetry.Tally(), live=True)
    per_thread, producers = 3_000, 3

    def count(made: telemetry.Instruments, n: int) -> None:
        made.passes.add(n, {telemetry.PACK: "p"})

    def produce() -> None:
        for _ in range(per_thread):
            tools.later(count, 1)  # counted when the collection next runs
            tools.passes.add(1, {telemetry.PACK: "p"})  # counted at once

    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            tools.catch_up()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can
    try:
        collector = threading.Thread(target=collect)
        collector.start()
        threads = [threading.Thread(target=produce) for _ in range(producers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
        collector.join()
    finally:
        sys.setswitchinterval(interval)
    tools.catch_up()
    assert isinstance(tools.passes, telemetry.Tally)
    assert sum(tools.passes.totals.values()) == 2 * per_thread * producers
