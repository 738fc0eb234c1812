"""Pack tests: named cases of episodes (and seeded facts) with the deltas or facts expected.

A test file (``rules/tests/<pack>.yaml``) is loaded like a rule pack, so every problem
reads ``file:line:col: path: message``. Each case runs in a fresh database (a temporary
SQLite file, or with ``postgres=URL`` a fresh schema of that PostgreSQL database, dropped
after the case; the results do not depend on the backend):
seed the facts, store the episodes, run one consolidation of the pack at the case's
``now``, and compare. A case with ``passes`` seeds once, then per pass stores that pass's
episodes and runs one consolidation at the pass's ``now``; a pass may carry its own
expectations, the case's are checked after the last pass. Expected items name facts and
episodes by their ids in the test file, never by content hashes; a fact made in a pass
is named after the episode it came from. A mismatch is shown as a unified diff of
expected against actual lines, headed by the pass it belongs to.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from stargraph_mem.authoring.coverage import Coverage, coverage_of
from stargraph_mem.authoring.trace import (
    DeltaTrace,
    pass_traces,
    plain,
    touched_facts,
    trace_lines,
    triple_text,
)
from stargraph_mem.compiler.pack import CompiledPack
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.outputs import RejectedEpisode
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.errors import IRError, StoreConfigError, StoreError
from stargraph_mem.ir.loader import parse_yaml, read_document, validate_document
from stargraph_mem.ir.models import Duration
from stargraph_mem.ir.source_map import PathKey, SourceMap
from stargraph_mem.model.base import Identifier, ScopePart
from stargraph_mem.model.deltas import (
    AddDelta,
    DeltaKind,
    FactDelta,
    FactPayload,
    MemoryDelta,
    NoopDelta,
    kind_takes,
)
from stargraph_mem.model.episodes import Episode, Intent
from stargraph_mem.model.facts import Fact
from stargraph_mem.model.layers import (
    DEFAULT_LAYER,
    DEFAULT_MEMORY_TYPE,
    Layer,
    MemoryType,
    stored_trust,
)
from stargraph_mem.stores.url import redact

WHAT = "pack test file"
SEED_RULE = "seed"
"""``rule_id`` (and pack hash) of the facts a case seeds before its pass."""


def _three(value: tuple[str, ...]) -> tuple[str, ...]:
    if len(value) != 3:
        raise ValueError("a triple is [subject, predicate, object]")
    return value


Triple = Annotated[
    tuple[str, ...],
    AfterValidator(_three),
    Field(json_schema_extra={"minItems": 3, "maxItems": 3}),
]
"""``[subject, predicate, object]``."""
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
TIME_EXAMPLE = "2026-03-01T09:00:00+00:00"


def _shown(value: Any) -> str:
    return f"the number {value}" if isinstance(value, int | float) else repr(value)


def _no_number(value: Any, info: ValidationInfo) -> Any:
    """A number is not a time here (pydantic would read ``5`` as seconds since 1970)."""
    if (isinstance(value, int | float) and not isinstance(value, bool)) or (
        isinstance(value, str) and _NUMBER.fullmatch(value)
    ):
        raise ValueError(
            f"'{info.field_name}' is a time: write an ISO-8601 time with an offset "
            f"({TIME_EXAMPLE}), not {_shown(value)}"
        )
    return value


def _no_number_when(value: Any, info: ValidationInfo) -> Any:
    """As :func:`_no_number`, for a field that also takes a duration before ``now``."""
    try:
        return _no_number(value, info)
    except ValueError:
        raise ValueError(
            f"'{info.field_name}' is a time: write an ISO-8601 time with an offset "
            f"({TIME_EXAMPLE}) or a duration before now (7d, {{days: 40}}), not {_shown(value)}"
        ) from None


Time = Annotated[AwareDatetime, BeforeValidator(_no_number)]
"""An ISO-8601 time with offset (never a number: ``5`` is not 1970-01-01T00:00:05Z)."""
When = Annotated[
    AwareDatetime | Duration, Field(union_mode="left_to_right"), BeforeValidator(_no_number_when)
]
"""An ISO-8601 time with offset, or a duration such as ``{days: 40}`` (or ``40d``) before
``now``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TestEpisode(_Model):
    """An episode of a case; ``triple`` sets metadata subject/predicate/object."""

    id: Identifier
    content: str | None = None
    session: ScopePart = "s1"
    at: When | None = None
    source_node: str | None = None
    triple: Triple | None = None
    intent: Intent | None = None
    replaces: list[str] | None = None
    meta: dict[str, JsonValue] = Field(default_factory=dict)


class SeedFact(_Model):
    """A fact current before the pass. ``confidence`` defaults to the pack's; ``rule``, the
    ``rule_id`` of the rule that made it, to :data:`SEED_RULE`."""

    id: Identifier
    triple: Triple
    rule: Identifier = SEED_RULE
    confidence: float | None = Field(default=None, ge=0, le=1)
    valid_from: When | None = None
    reinforced_at: When | None = None
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    pinned: bool = False
    accessed: list[When] = Field(default_factory=list, max_length=1000)
    """One recorded read at each of these times."""
    layer: Layer | None = None
    memory_type: MemoryType | None = None
    trust: float | None = Field(default=None, ge=0, le=1)
    """Specification 004's layer, memory type and source trust (default: episodic, fact,
    1.0)."""


class ExpectedDelta(_Model):
    """A delta in human form; fields left out are not compared."""

    kind: DeltaKind
    rule: str
    triple: Triple | None = None
    replaces: list[str] | None = None
    reinforces: list[str] | None = None
    sources: list[str] | None = None
    confidence: float | None = None
    reason: str | None = None
    status: str | None = None
    """The status a delete gives (``deleted``, ``expired``, ``archived``, ``invalidated``,
    ``merged``, ``challenged``)."""
    merged_into: str | None = None
    """A merge's target: a seeded fact's id or the episode id that made it."""
    bindings: dict[str, JsonValue] | None = None
    payload: dict[str, JsonValue] | None = None
    """The payload of the fact an add or update makes (every key: numbers to 1e-9)."""


class ExpectedFact(_Model):
    """A current fact after the pass; ``id`` is a seeded fact's id or an episode's id."""

    triple: Triple
    id: str | None = None
    rule: str | None = None
    confidence: float | None = None
    layer: Layer | None = None
    memory_type: MemoryType | None = None


class ExpectedRejection(_Model):
    """An episode the pass rejected."""

    episode: str | None = None
    rule: str | None = None
    reason: str | None = None


class Expect(_Model):
    deltas: list[ExpectedDelta] | None = None
    facts: list[ExpectedFact] | None = None
    rejected: list[ExpectedRejection] | None = None

    @model_validator(mode="after")
    def _something(self) -> Expect:
        if self.deltas is None and self.facts is None and self.rejected is None:
            raise ValueError("expect needs at least one of 'deltas', 'facts', 'rejected'")
        return self


class Pass(_Model):
    """One consolidation of a multi-pass case: its episodes are stored, then the pack runs
    at ``now``; ``expect`` (optional) is checked against this pass alone."""

    now: Time
    episodes: list[TestEpisode] = Field(default_factory=list)
    expect: Expect | None = None


class Case(_Model):
    """Seeded facts and episodes of one partition, one pass at ``now``, expectations; or
    seeded facts and ``passes``, each storing its episodes and running at its own time.

    ``expect`` is required without ``passes``; with them it is checked after the last pass
    (deltas and rejections of every pass, the facts at the end) and may be left out when a
    pass has an ``expect``."""

    name: str = Field(min_length=1)
    now: Time | None = None
    user: ScopePart = "user"
    agent: ScopePart = "agent"
    facts: list[SeedFact] = Field(default_factory=list)
    episodes: list[TestEpisode] = Field(default_factory=list)
    passes: list[Pass] | None = Field(default=None, min_length=1)
    expect: Expect | None = None
    match: Literal["exact", "subset"] = "exact"


class CoverageSpec(_Model):
    min: float = Field(default=1.0, ge=0, le=1)


class PackTests(_Model):
    """A test file: the pack it tests, its coverage threshold, its cases."""

    pack: str
    now: Time | None = None
    coverage: CoverageSpec = CoverageSpec()
    cases: list[Case] = Field(min_length=1)


# --- loading ------------------------------------------------------------------------------


@dataclass
class TestFile:
    """A loaded test file and its source positions."""

    path: str
    tests: PackTests
    source: SourceMap

    def error(self, path: PathKey, message: str) -> IRError:
        return IRError(self.source.issue(path, message))


def load_tests_text(text: str, file: str = "<string>") -> TestFile:
    """Parse and validate a test file; raise the first :class:`IRError`."""
    source = parse_yaml(text, file, what=WHAT)
    loaded = TestFile(file, validate_document(PackTests, source), source)
    _check(loaded)
    return loaded


def load_tests(path: str | Path) -> TestFile:
    """Read ``path`` (UTF-8) and load it as a test file."""
    return load_tests_text(read_document(path, WHAT), str(path))


def _check(loaded: TestFile) -> None:
    """Case names unique, each case in one form with its times in order, ids unique
    within a case."""
    names: dict[str, int] = {}
    for i, case in enumerate(loaded.tests.cases):
        if case.name in names:
            raise loaded.error(
                ("cases", i, "name"), f"duplicate case name (first at cases[{names[case.name]}])"
            )
        names[case.name] = i
        _check_form(loaded, i)
        _check_times(loaded, i)
        seen: set[str] = set()
        items: list[tuple[PathKey, str]] = [
            (("cases", i, "facts", j), f.id) for j, f in enumerate(case.facts)
        ]
        for step in steps(loaded, i):
            items += [((*step.path, "episodes", j), e.id) for j, e in enumerate(step.episodes)]
        for where, item_id in items:
            if item_id in seen:
                raise loaded.error((*where, "id"), f"duplicate id '{item_id}'")
            seen.add(item_id)


def _check_form(loaded: TestFile, index: int) -> None:
    """A single-pass case has an ``expect`` and a pass time; a case with ``passes`` keeps
    its episodes and times on them, in order, and expects something somewhere."""
    case = loaded.tests.cases[index]
    here: PathKey = ("cases", index)
    if case.passes is None:
        if case.expect is None:
            raise loaded.error(here, "missing required field 'expect'")
        if case.now is None and loaded.tests.now is None:
            raise loaded.error(here, "no pass time: set 'now' on the case or the file")
        return
    for key in ("now", "episodes"):
        if key in case.model_fields_set:
            raise loaded.error(
                (*here, key), f"a case with passes sets '{key}' on each pass, not on the case"
            )
    if case.expect is None and all(p.expect is None for p in case.passes):
        raise loaded.error(here, "nothing expected: set 'expect' on the case or on a pass")
    for k, (before, after) in enumerate(itertools.pairwise(case.passes), start=1):
        if after.now < before.now:
            raise loaded.error(
                (*here, "passes", k, "now"),
                f"before the previous pass's time ({before.now.isoformat()})",
            )


@dataclass(frozen=True)
class Step:
    """One consolidation of a case: the time it runs at, the episodes stored before it,
    and what this pass alone must do (``None`` for a single-pass case, whose ``expect``
    covers the whole case)."""

    now: datetime
    episodes: list[TestEpisode]
    path: PathKey
    """Where the pass is written (the case itself for a single-pass case)."""
    now_path: PathKey
    expect: Expect | None = None
    label: str | None = None
    """``passes[k]`` in a multi-pass case."""


def steps(loaded: TestFile, index: int) -> list[Step]:
    """The passes case ``index`` runs, in order (its form and pass time checked)."""
    case = loaded.tests.cases[index]
    here: PathKey = ("cases", index)
    if case.passes is None:
        now = case.now or loaded.tests.now
        assert now is not None  # checked at load
        now_path: PathKey = (*here, "now") if case.now else ("now",)
        return [Step(now, case.episodes, here, now_path)]
    out = []
    for k, written in enumerate(case.passes):
        path: PathKey = (*here, "passes", k)
        label = f"passes[{k}]"
        out.append(Step(written.now, written.episodes, path, (*path, "now"), written.expect, label))
    return out


def _check_times(loaded: TestFile, index: int) -> None:
    """Every time a case derives from a pass time must be a date (not before year 1):
    seeded facts count back from the first pass's time, episodes from their own pass's."""
    case = loaded.tests.cases[index]
    plan = steps(loaded, index)
    first, day = plan[0], timedelta(days=1)
    times: list[tuple[PathKey, AwareDatetime | Duration | None, Step, timedelta]] = []
    for j, fact in enumerate(case.facts):
        path: PathKey = ("cases", index, "facts", j)
        times.append(((*path, "valid_from"), fact.valid_from, first, day))
        times.append(((*path, "reinforced_at"), fact.reinforced_at, first, day))
        for k, read in enumerate(fact.accessed):
            times.append(((*path, "accessed", k), read, first, day))
    for step in plan:
        count = len(step.episodes)
        for j, ep in enumerate(step.episodes):
            at: PathKey = (*step.path, "episodes", j, "at")
            times.append((at, ep.at, step, timedelta(minutes=count - j)))
    for path, value, step, before in times:
        try:
            _at(value, step.now, step.now - before)
        except OverflowError:
            where = path if isinstance(value, Duration) else step.now_path
            raise loaded.error(where, "this time falls before year 1") from None


def default_tests_path(pack_path: str | Path) -> Path:
    """``rules/x.yaml`` → ``rules/tests/x.yaml``."""
    p = Path(pack_path)
    return p.parent / "tests" / p.name


# --- running one case ---------------------------------------------------------------------


def _at(value: AwareDatetime | Duration | None, now: datetime, default: datetime) -> datetime:
    if value is None:
        return default
    if isinstance(value, Duration):
        return now - timedelta(microseconds=value.total_microseconds())
    return value


@dataclass
class PassRun:
    """What one pass of a case did: its deltas and rejections, the facts current after it."""

    now: datetime
    deltas: list[MemoryDelta]
    facts: list[Fact]
    rejected: list[RejectedEpisode]
    reports: list[PassReport]
    traces: list[DeltaTrace] = field(default_factory=list)
    label: str | None = None
    """``passes[k]`` in a multi-pass case."""


@dataclass
class CaseRun:
    """What a case's passes produced, with real ids mapped back to the test file's ids."""

    passes: list[PassRun]
    names: dict[str, str]

    @property
    def deltas(self) -> list[MemoryDelta]:
        return [d for p in self.passes for d in p.deltas]

    @property
    def facts(self) -> list[Fact]:
        """The facts current after the last pass."""
        return self.passes[-1].facts

    @property
    def rejected(self) -> list[RejectedEpisode]:
        return [r for p in self.passes for r in p.rejected]

    @property
    def reports(self) -> list[PassReport]:
        return [r for p in self.passes for r in p.reports]

    @property
    def traces(self) -> list[DeltaTrace]:
        return [t for p in self.passes for t in p.traces]

    def name(self, fact_id: str) -> str:
        return self.names.get(fact_id, fact_id)


def _seed_deltas(case: Case, pack: CompiledPack, now: datetime) -> list[MemoryDelta]:
    """An add per seeded fact at its ``valid_from``, a reinforcing noop for ``reinforced_at``."""
    out: list[MemoryDelta] = []
    for fact in case.facts:
        born = _at(fact.valid_from, now, now - timedelta(days=1))
        common: dict[str, Any] = {
            "user": case.user,
            "agent": case.agent,
            "source_episode_ids": [fact.id],
            "rule_id": fact.rule,
            "confidence": pack.pack.defaults.confidence
            if fact.confidence is None
            else fact.confidence,
        }
        s, p, o = fact.triple
        add = AddDelta(
            fact=FactPayload(subject=s, predicate=p, object=o, payload=fact.payload),
            promotion_ts=born,
            layer=None if fact.layer == DEFAULT_LAYER else fact.layer,
            memory_type=None if fact.memory_type == DEFAULT_MEMORY_TYPE else fact.memory_type,
            trust=None if fact.trust is None else stored_trust(fact.trust),
            **common,
        )
        out.append(add)
        if fact.reinforced_at is not None:
            at = _at(fact.reinforced_at, now, born)
            out.append(NoopDelta(reinforces=[add.new_fact_id], promotion_ts=at, **common))
    return out


async def _seed_lifecycle(
    mem: Consolidator, case: Case, known: dict[str, str], now: datetime
) -> None:
    """Pins and recorded reads of the seeded facts."""
    for fact in case.facts:
        if fact.pinned:
            await mem.pin(known[fact.id], reason="seeded")
        for read in fact.accessed:
            await mem.record_access([known[fact.id]], at=_at(read, now, now))


def _episodes(loaded: TestFile, index: int, step: Step, known: dict[str, str]) -> list[Episode]:
    """A pass's episodes; without ``at`` they are a minute apart, ending a minute before the
    pass's time. ``replaces`` names facts by their ids in the file (``known``)."""
    case = loaded.tests.cases[index]
    out: list[Episode] = []
    count = len(step.episodes)
    for j, ep in enumerate(step.episodes):
        meta: dict[str, JsonValue] = dict(ep.meta)
        if ep.triple is not None:
            meta.update(zip(("subject", "predicate", "object"), ep.triple, strict=True))
        if ep.intent is not None:
            meta["intent"] = ep.intent
        if ep.replaces is not None:
            meta["replaces"] = [known.get(r, r) for r in ep.replaces]
        try:
            out.append(
                Episode(
                    id=ep.id,
                    content=" ".join(ep.triple or ()) if ep.content is None else ep.content,
                    timestamp=_at(ep.at, step.now, step.now - timedelta(minutes=count - j)),
                    source_node=ep.source_node,
                    user=case.user,
                    session=ep.session,
                    agent=case.agent,
                    metadata=meta,
                )
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            message = str(err["msg"]).removeprefix("Value error, ")
            raise loaded.error((*step.path, "episodes", j), f"{where}: {message}") from exc
    return out


CASE_SCHEMA_PREFIX = "stargraph_test_"
"""The start of the name of each case's PostgreSQL schema (the rest is random)."""


def check_postgres_url(url: str) -> str:
    """``url`` if it names a PostgreSQL database for the cases' schemas: a
    ``postgresql://`` (or ``postgres://``) URL without a ``schema`` parameter, since every
    case makes a fresh schema of its own; anything else raises :class:`StoreConfigError`."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise StoreConfigError(
            f"pack tests on PostgreSQL need a postgresql:// URL, not {redact(url)!r}",
            key="postgres",
            value=redact(url),
        )
    if any(key == "schema" for key, _ in parse_qsl(parts.query, keep_blank_values=True)):
        raise StoreConfigError(
            f"{redact(url)}: leave out schema=: each case runs in a fresh schema of its own "
            f"({CASE_SCHEMA_PREFIX}…), dropped after the case",
            key="postgres",
            value=redact(url),
        )
    return url


def case_schema_url(url: str) -> str:
    """``url`` (checked by :func:`check_postgres_url`) with a fresh, unused schema."""
    parts = urlsplit(check_postgres_url(url))
    query = [*parse_qsl(parts.query, keep_blank_values=True)]
    query.append(("schema", f"{CASE_SCHEMA_PREFIX}{uuid.uuid4().hex[:16]}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


async def _drop_schema(url: str) -> None:
    """Drop the schema of ``url`` (made by :func:`case_schema_url`) and all it holds; a
    failure raises :class:`StoreError` naming the schema left behind."""
    import psycopg  # the postgres extra: needed only here, with postgres=URL

    from stargraph_mem.stores.postgres.database import CONNECT_TIMEOUT_S, split_url

    conninfo, schema = split_url(url)
    assert schema.startswith(CASE_SCHEMA_PREFIX), schema
    try:
        conn = await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )
        async with conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(
            f"cannot drop the pack test schema {schema!r} at {redact(conninfo)}: {reason}",
            schema=schema,
        ) from exc


@asynccontextmanager
async def case_location(postgres: str | None = None) -> AsyncIterator[str]:
    """Where one case's memory lives: a file in a temporary directory (removed after), or
    with ``postgres`` a fresh schema of that database (dropped after; when the case
    failed, its error is the one raised, not the drop's)."""
    if postgres is None:
        with tempfile.TemporaryDirectory(prefix="stargraph-test-") as tmp:
            yield str(Path(tmp) / "case.db")
        return
    url = case_schema_url(postgres)
    try:
        yield url
    except BaseException:
        with suppress(Exception):
            await _drop_schema(url)
        raise
    await _drop_schema(url)


async def run_case(
    pack: CompiledPack,
    loaded: TestFile,
    index: int,
    *,
    trace: bool = False,
    postgres: str | None = None,
) -> CaseRun:
    """Run case ``index`` of ``loaded`` in a fresh database (a temporary SQLite file, or a
    fresh schema of the PostgreSQL database ``postgres`` names, dropped after): seed its
    facts once, then per pass store the pass's episodes and consolidate at the pass's time."""
    case = loaded.tests.cases[index]
    plan = steps(loaded, index)
    seeds = _seed_deltas(case, pack, plan[0].now)
    known = {
        f.id: d.new_fact_id
        for f, d in zip(case.facts, (d for d in seeds if isinstance(d, AddDelta)), strict=True)
    }
    for step in plan:  # every pass's episodes are checked before the first pass runs
        _episodes(loaded, index, step, known)
    names = {real: name for name, real in known.items()}
    passes: list[PassRun] = []
    async with case_location(postgres) as location, Consolidator(location, [pack]) as mem:
        if seeds:
            await mem.fact_store.apply_deltas(seeds, pack_hash=SEED_RULE)
            await _seed_lifecycle(mem, case, known, plan[0].now)
        for step in plan:
            await mem.memory.put_many(_episodes(loaded, index, step, known))
            done = await mem.consolidate(user=case.user, agent=case.agent, now=step.now)
            reports = done.passes
            facts = await mem.facts(user=case.user, agent=case.agent)
            traces = [t for r in reports for t in await pass_traces(mem, r)] if trace else []
            deltas = [d for r in reports for d in r.deltas]
            for d in deltas:
                if isinstance(d, FactDelta):
                    names.setdefault(d.new_fact_id, d.source_episode_ids[0])
                    known.setdefault(d.source_episode_ids[0], d.new_fact_id)
            rejected = [x for r in reports for x in r.rejected]
            passes.append(PassRun(step.now, deltas, facts, rejected, reports, traces, step.label))
    return CaseRun(passes, names)


# --- comparing ----------------------------------------------------------------------------

View = dict[str, Any]
DELTA_FIELDS = (
    "kind",
    "rule",
    "triple",
    "replaces",
    "reinforces",
    "sources",
    "confidence",
    "reason",
    "bindings",
    "status",
    "payload",
)
FACT_FIELDS = ("triple", "id", "rule", "confidence", "layer", "memory_type")
REJECTION_FIELDS = ("episode", "rule", "reason")


def delta_view(delta: MemoryDelta, run: CaseRun) -> View:
    view: View = {"kind": delta.kind, "rule": delta.rule_id}
    if isinstance(delta, FactDelta):
        view["triple"] = delta.fact.triple
        view["payload"] = dict(delta.fact.payload)
    for fid, role in touched_facts(delta):
        view.setdefault(role, []).append(run.name(fid))
    if kind_takes(delta.kind, "reinforces"):
        view.setdefault("reinforces", [])
    view.update(
        sources=list(delta.source_episode_ids),
        confidence=delta.confidence,
        reason=delta.reason,
        bindings=dict(delta.bindings),
    )
    if kind_takes(delta.kind, "status"):
        view["status"] = delta.close_status
    into = getattr(delta, "merged_into", None)
    if into is not None:
        view["merged_into"] = run.name(into)
    return view


def fact_view(fact: Fact, run: CaseRun) -> View:
    return {
        "triple": (fact.subject, fact.predicate, fact.object),
        "id": run.name(fact.id),
        "rule": fact.rule_id,
        "confidence": fact.confidence,
        "layer": fact.layer,
        "memory_type": fact.memory_type,
    }


def rejection_view(rejected: RejectedEpisode) -> View:
    return {"episode": rejected.episode_id, "rule": rejected.rule_id, "reason": rejected.reason}


def _given(expected: BaseModel) -> View:
    out = expected.model_dump(exclude_none=True)
    if "triple" in out:
        out["triple"] = tuple(out["triple"])
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float | int) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    return bool(a == b)


def _matches(expected: View, actual: View) -> bool:
    return all(k in actual and _same(v, actual[k]) for k, v in expected.items())


BARE = frozenset({"kind", "rule", "triple"})
"""Fields printed without ``key=`` (when they lead a delta line, or the triple)."""


def _text(key: str, value: Any, order: Sequence[str]) -> str:
    if key == "triple":
        return triple_text(value)
    if key in BARE and order[0] == "kind":
        return str(value)
    if isinstance(value, float):
        return f"{key}={value:g}"
    if isinstance(value, dict):
        return f"{key}={{" + ", ".join(f"{k}: {plain(v)}" for k, v in sorted(value.items())) + "}"
    return f"{key}={plain(value)}"


def render_view(view: View, order: Sequence[str], keys: Sequence[str]) -> str:
    """One line of the fields in ``keys`` (kind and rule bare, the triple in parentheses)."""
    return " ".join(_text(k, view[k], order) for k in order if k in keys and k in view)


@dataclass
class Mismatch:
    """One section of a case that did not match: the items compared (the fields each
    expected item gives), which were missing or unexpected, and a unified diff."""

    section: str
    match: str
    diff: list[str]
    expected: list[View] = field(default_factory=list)
    actual: list[View] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    """Indexes of expected items not found, in order, among the actual ones."""
    unexpected: list[int] = field(default_factory=list)
    """Indexes of actual items no expected item matched (``exact`` only)."""
    pass_index: int | None = None
    """The pass whose own ``expect`` this is (``None``: the case's ``expect``)."""

    @property
    def title(self) -> str:
        """``deltas``, or ``passes[1].deltas`` for a pass's own expectation."""
        if self.pass_index is None:
            return self.section
        return f"passes[{self.pass_index}].{self.section}"

    def document(self) -> dict[str, Any]:
        """The mismatch as JSON-ready data."""
        return {
            "section": self.section,
            "pass": self.pass_index,
            "match": self.match,
            "expected": self.expected,
            "actual": self.actual,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "diff": self.diff,
        }


def compare(
    section: str,
    expected: Sequence[View],
    actual: Sequence[View],
    *,
    match: str,
    order: Sequence[str],
    default_keys: Callable[[View], Sequence[str]],
) -> Mismatch | None:
    """Expected items must appear in order among the actual ones (``subset``), or be
    exactly the actual ones (``exact``); compare only the fields each expected item gives."""
    paired: dict[int, int] = {}
    start = 0
    for i, exp in enumerate(expected):
        for j in range(start, len(actual)):
            if _matches(exp, actual[j]):
                paired[j], start = i, j + 1
                break
    ok = len(paired) == len(expected) and (match == "subset" or len(actual) == len(expected))
    if ok:
        return None
    shared = list(dict.fromkeys(k for exp in expected for k in exp))
    exp_lines = [render_view(e, order, list(e)) for e in expected]
    act_lines = []
    compared: list[View] = []
    for j, act in enumerate(actual):
        keys = list(expected[paired[j]]) if j in paired else (shared or default_keys(act))
        act_lines.append(render_view(act, order, keys))
        compared.append({k: act[k] for k in order if k in keys and k in act})
    context = max(len(exp_lines), len(act_lines))
    diff = list(
        difflib.unified_diff(exp_lines, act_lines, "expected", "actual", n=context, lineterm="")
    )
    if not diff:  # same text, different values below the printed precision
        diff = ["--- expected", "+++ actual", *(f"-{x}" for x in exp_lines)]
        diff += [f"+{x}" for x in act_lines]
    found = set(paired.values())
    missing = [i for i in range(len(expected)) if i not in found]
    unexpected = [j for j in range(len(actual)) if j not in paired] if match == "exact" else []
    return Mismatch(section, match, diff, list(expected), compared, missing, unexpected)


def _delta_keys(view: View) -> Sequence[str]:
    return [k for k in ("kind", "rule", "triple", "replaces", "reinforces") if view.get(k)]


def _check_expect(
    exp: Expect,
    match: str,
    run: CaseRun,
    deltas: Sequence[MemoryDelta],
    facts: Sequence[Fact],
    rejected: Sequence[RejectedEpisode],
) -> list[Mismatch]:
    """Each section ``exp`` gives compared with the deltas, facts and rejections given."""
    out: list[Mismatch | None] = []
    if exp.deltas is not None:
        out.append(
            compare(
                "deltas",
                [_given(d) for d in exp.deltas],
                [delta_view(d, run) for d in deltas],
                match=match,
                order=DELTA_FIELDS,
                default_keys=_delta_keys,
            )
        )
    if exp.facts is not None:
        actual = sorted((fact_view(f, run) for f in facts), key=lambda v: (v["triple"], v["id"]))
        out.append(
            compare(
                "facts",
                sorted((_given(f) for f in exp.facts), key=lambda v: v["triple"]),
                actual,
                match=match,
                order=FACT_FIELDS,
                default_keys=lambda v: ("triple", "id", "rule"),
            )
        )
    if exp.rejected is not None:
        out.append(
            compare(
                "rejected",
                [_given(r) for r in exp.rejected],
                [rejection_view(r) for r in rejected],
                match=match,
                order=REJECTION_FIELDS,
                default_keys=lambda v: REJECTION_FIELDS,
            )
        )
    return [m for m in out if m is not None]


def check_case(case: Case, run: CaseRun) -> list[Mismatch]:
    """Every expected section of ``case`` compared with what its passes did: first each
    pass's own ``expect`` (that pass's deltas and rejections, the facts after it), then the
    case's (every pass's deltas and rejections, the facts after the last pass)."""
    out: list[Mismatch] = []
    for k, step in enumerate(case.passes or ()):
        if step.expect is not None:
            done = run.passes[k]
            found = _check_expect(
                step.expect, case.match, run, done.deltas, done.facts, done.rejected
            )
            out += [replace(m, pass_index=k) for m in found]
    if case.expect is not None:
        out += _check_expect(case.expect, case.match, run, run.deltas, run.facts, run.rejected)
    return out


# --- running files ------------------------------------------------------------------------


@dataclass
class CaseResult:
    name: str
    mismatches: list[Mismatch]
    run: CaseRun

    @property
    def passed(self) -> bool:
        return not self.mismatches


@dataclass
class FileResult:
    """The cases of one test file that ran, and how many ``-k`` left out."""

    path: str
    minimum: float
    cases: list[CaseResult]
    deselected: int = 0

    @property
    def failed(self) -> int:
        return sum(1 for c in self.cases if not c.passed)

    @property
    def passed(self) -> int:
        return len(self.cases) - self.failed


@dataclass
class TestRun:
    """Every file's results and the pack's coverage over all of them."""

    pack: CompiledPack
    files: list[FileResult]
    coverage: Coverage

    @property
    def minimum(self) -> float:
        return max(f.minimum for f in self.files)

    @property
    def failed(self) -> int:
        return sum(f.failed for f in self.files)

    @property
    def selected(self) -> int:
        return sum(len(f.cases) for f in self.files)

    @property
    def deselected(self) -> int:
        return sum(f.deselected for f in self.files)

    @property
    def coverage_checked(self) -> bool:
        """The coverage minimum applies to full runs only: a ``-k`` selection is not meant
        to fire every rule."""
        return self.deselected == 0

    @property
    def coverage_ok(self) -> bool:
        return not self.coverage_checked or self.coverage.meets(self.minimum)

    def document(self, *, coverage: bool = False, trace: bool = False) -> dict[str, Any]:
        """The results as JSON-ready data: per file its cases (name, passed, mismatches),
        the totals, and the coverage when asked for."""
        doc: dict[str, Any] = {
            "pack": self.pack.name,
            "passed": self.failed == 0 and (not coverage or self.coverage_ok),
            "totals": _totals(self.selected - self.failed, self.failed, self.deselected),
            "files": [_file_document(f, trace=trace) for f in self.files],
        }
        if coverage:
            doc["coverage"] = _coverage_document(self)
        return doc


def selects(keyword: str | None, name: str) -> bool:
    """Whether ``-k keyword`` selects a case: a case-insensitive substring of its name."""
    return keyword is None or keyword.casefold() in name.casefold()


def load_for(pack: CompiledPack, path: str | Path) -> TestFile:
    """Load a test file and check that it tests ``pack``."""
    loaded = load_tests(path)
    if loaded.tests.pack != pack.name:
        raise loaded.error(
            ("pack",), f"these tests are for pack '{loaded.tests.pack}', not '{pack.name}'"
        )
    return loaded


async def run_file(
    pack: CompiledPack,
    path: str | Path,
    *,
    trace: bool = False,
    keyword: str | None = None,
    postgres: str | None = None,
) -> FileResult:
    """Load a test file for ``pack`` and run its cases (those ``keyword`` selects) in order,
    each in a fresh database (see :func:`run_case` for ``postgres``)."""
    if postgres is not None:
        check_postgres_url(postgres)
    loaded = load_for(pack, path)
    return await _run_loaded(pack, loaded, trace=trace, keyword=keyword, postgres=postgres)


async def _run_loaded(
    pack: CompiledPack,
    loaded: TestFile,
    *,
    trace: bool,
    keyword: str | None,
    postgres: str | None,
) -> FileResult:
    results: list[CaseResult] = []
    for i, case in enumerate(loaded.tests.cases):
        if selects(keyword, case.name):
            run = await run_case(pack, loaded, i, trace=trace, postgres=postgres)
            results.append(CaseResult(case.name, check_case(case, run), run))
    left_out = len(loaded.tests.cases) - len(results)
    return FileResult(loaded.path, loaded.tests.coverage.min, results, left_out)


async def run_tests(
    pack: CompiledPack,
    paths: Sequence[str | Path],
    *,
    trace: bool = False,
    keyword: str | None = None,
    postgres: str | None = None,
) -> TestRun:
    """Run test files for one pack (every file is loaded and checked before any case runs);
    coverage counts every case's pass. ``keyword`` selects cases as ``pytest -k`` does.
    Each case runs in a fresh temporary SQLite file, or with ``postgres`` (a
    ``postgresql://`` URL without ``schema=``) in a fresh schema of that database, dropped
    after the case."""
    if postgres is not None:
        check_postgres_url(postgres)
    loaded = [load_for(pack, p) for p in paths]
    files = [
        await _run_loaded(pack, f, trace=trace, keyword=keyword, postgres=postgres) for f in loaded
    ]
    fired = [r.fired for f in files for c in f.cases for r in c.run.reports]
    return TestRun(pack, files, coverage_of(pack.pack, fired))


def _case_document(result: CaseResult, *, trace: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": result.name,
        "passed": result.passed,
        "mismatches": [m.document() for m in result.mismatches],
        "rejected": [rejection_view(r) for r in result.run.rejected],
    }
    if trace:
        doc["trace"] = run_trace_lines(result.run)
    return doc


def _file_document(result: FileResult, *, trace: bool) -> dict[str, Any]:
    return {
        "path": result.path,
        "totals": _totals(result.passed, result.failed, result.deselected),
        "cases": [_case_document(c, trace=trace) for c in result.cases],
    }


def _totals(passed: int, failed: int, deselected: int) -> dict[str, int]:
    return {"passed": passed, "failed": failed, "deselected": deselected}


def _coverage_document(run: TestRun) -> dict[str, Any]:
    cov = run.coverage
    return {
        "rules": [
            {"rule": r.rule_id, "activations": r.activations, "status": r.status} for r in cov.rules
        ],
        "fired": cov.fired,
        "counted": cov.counted,
        "ratio": cov.ratio,
        "minimum": run.minimum if run.coverage_checked else None,
        "passed": run.coverage_ok,
    }


# --- output -------------------------------------------------------------------------------


def case_lines(result: CaseResult, *, trace: bool = False) -> list[str]:
    """``PASS  name`` or ``FAIL  name`` with a diff per mismatching section."""
    out = [f"{'PASS' if result.passed else 'FAIL'}  {result.name}"]
    for m in result.mismatches:
        out.append(f"  {m.title} ({m.match}):")
        out += [f"    {line}" for line in m.diff]
    if not result.passed and not any(m.section == "rejected" for m in result.mismatches):
        for done in result.run.passes:
            where = f" in {done.label}" if done.label else ""
            for r in done.rejected:
                who = f"{r.episode_id or '-'} ({r.rule_id}){where}"
                out.append(f"  note: rejected {who}: {r.reason}")
    if trace:
        out += run_trace_lines(result.run, indent="  ")
    return out


def run_trace_lines(run: CaseRun, indent: str = "") -> list[str]:
    """Every delta's trace; in a multi-pass case under a ``passes[k] at <time>:`` line."""
    out: list[str] = []
    for done in run.passes:
        inner = indent
        if done.label is not None:
            out.append(f"{indent}{done.label} at {done.now.isoformat()}:")
            inner += "  "
        for t in done.traces:
            out += trace_lines(t, indent=inner)
    return out


def file_summary(result: FileResult, pack: str) -> str:
    """``default: 5 passed, 1 failed[, 2 deselected] (path)``."""
    counts = f"{result.passed} passed, {result.failed} failed"
    if result.deselected:
        counts += f", {result.deselected} deselected"
    return f"{pack}: {counts} ({result.path})"
