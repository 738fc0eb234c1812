"""The CLIPS runtime: a compiled pack loaded once, run over one partition's episodes per pass.

A pass asserts the pass time, a cursor, the partition's current facts and the episodes
(in timestamp order, insertion seq breaking ties, in chunks), runs the agenda, and turns
the lines the rules printed into validated :data:`MemoryDelta` objects. Only fields that
rules test enter CLIPS.
"""

from __future__ import annotations

import tempfile
import threading
import weakref
from bisect import bisect_left, insort
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, TextIO, cast

import clips
from clips._clips import ffi, lib
from pydantic import ValidationError

from stargraph_mem.compiler.clips_env import QUIET_ROUTER, load_constructs, new_environment
from stargraph_mem.compiler.generator import (
    NORMAL_KEY,
    OUT,
    NearRelation,
    RuleProgram,
    SurpriseRelation,
    normal_slot,
    payload_slot,
    slot_name,
    uses_reinforce,
)
from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.compiler.sweep_sql import is_sweep
from stargraph_mem.embedding import Embedder, Matrix, identity
from stargraph_mem.engine.passes.aggregates import HistoryFacts, HistoryInput
from stargraph_mem.engine.passes.aggregates import compute as compute_history
from stargraph_mem.engine.passes.clips_logs import FactLogs
from stargraph_mem.engine.passes.confidence import confidence_of, payload_number
from stargraph_mem.engine.passes.layered import GONE, Gone, Layered
from stargraph_mem.engine.passes.near import (
    NearIndex,
    NearKey,
    VectorCache,
    clips_ranks,
    clusters,
    statement,
    surprise,
)
from stargraph_mem.engine.passes.near_episodes import EarlierEpisodes, EpisodeNeighbours
from stargraph_mem.errors import EmbedderError, EngineError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.ir.checks import (
    PAYLOAD_PREFIX,
    VarInfo,
    is_arithmetic,
    parse_template,
    pattern_of,
)
from stargraph_mem.ir.models import (
    EPISODE_BUILTINS,
    FieldType,
    ListVar,
)
from stargraph_mem.ir.reference import (
    ILL_TYPED,
    MISSING,
    normal_form_of,
    read_value,
)
from stargraph_mem.ir.reference import raw_value as raw_history
from stargraph_mem.model import lifecycle
from stargraph_mem.model.deltas import (
    DELTA_BY_KIND,
    DELTA_KINDS,
    DeltaBase,
    FactDelta,
    MemoryDelta,
    kind_creates,
)
from stargraph_mem.model.layers import (
    DEFAULT_LAYER,
    DEFAULT_MEMORY_TYPE,
    LAYERS,
    MEMORY_TYPES,
    episode_trust,
    least_trust,
    stored_trust,
)
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES, KEY_BYTES, utf8_size
from stargraph_mem.model.text import content_normal_form
from stargraph_mem.model.time import EPOCH as EPOCH  # re-export
from stargraph_mem.model.time import from_us, to_us, to_utc
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.repositories.aggregates import AggregateWrite
from stargraph_mem.stores.scope import Partition

NIL = clips.Symbol("nil")
TRUE = clips.Symbol("TRUE")
FALSE = clips.Symbol("FALSE")
DELTAS_FILE_BYTES = 1 << 22
"""Once the deltas file holds this much, the run that wrote it closes it (the next run
opens it again, empty)."""
DEFAULT_CHUNK = 256
"""Episodes asserted per agenda run: small chunks keep CLIPS join memories small."""
from_micros = from_us
"""Former name of :func:`stargraph_mem.model.time.from_us` (UTC µs → datetime)."""


UNMATCHED: Final = "no-rule-matched"
"""The rule id of a rejection for an episode that several rules saw and none matched (rule
ids cannot contain hyphens, so it names no rule)."""


@dataclass(frozen=True, slots=True)
class RejectedEpisode:
    """An episode (or the delta a rule made from it) that could not be used, and why."""

    episode_id: str | None
    rule_id: str | None
    reason: str
    unmatched: bool = False
    """True when no rule used the episode (see ``PackRuntime._account``), False when a
    rule or the episode's own data refused it."""


ERROR_ROUTER: Final = b"python-error-router"
"""The router clipspy adds to every environment to turn CLIPS errors into CLIPSError."""


@dataclass
class PassOutput:
    """What one pass produced, before it is applied."""

    deltas: list[MemoryDelta] = field(default_factory=list)
    rejected: list[RejectedEpisode] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)
    episodes: int = 0
    matched: list[dict[str, list[str]]] = field(default_factory=list)
    """With ``run_pass(matched=True)``: per delta (same order), what each pattern of its
    rule matched: ``episode`` → the anchor episode, fact aliases → fact ids, ``earlier``
    and ``count`` aliases → episode ids."""
    facts_after: list[EngineFact] | None = field(default_factory=list)
    """The partition's current facts once these deltas are applied, in the order the fact
    store lists them (``valid_from``, then id): the next pass's input without a read.
    ``None`` when rules read access statistics, which reads change outside passes."""
    aggregates: AggregateWrite | None = None
    """What the pass changes in the partition's durable aggregates (``over: history``)."""
    kept: list[str] = field(default_factory=list)
    """Ids of consumed episodes no delta cites yet that a durable aggregate (``over:
    history``) holds as evidence for later passes."""


class _BadValue(Exception):
    pass


def _normalise(value: Any, ftype: FieldType) -> Any:
    """An episode metadata value as the CLIPS slot stores it for the declared type.

    What a value means is :func:`stargraph_mem.ir.reference.read_value`'s reading;
    this only renders it for CLIPS (lists space-joined, booleans as symbols)."""
    read = read_value(ftype, value)
    if read is MISSING:
        return "" if ftype == "list" else NIL
    if read is ILL_TYPED:
        raise _BadValue(_ill_typed(ftype, value))
    if ftype == "boolean":
        return TRUE if read else FALSE
    if ftype == "list":
        return " ".join(read)
    return read


def _ill_typed(ftype: FieldType, value: Any) -> str:
    if ftype == "timestamp" and isinstance(value, str):
        return f"not an ISO-8601 timestamp with offset: {value!r}"
    if ftype == "list" and isinstance(value, list):
        return "list items must be non-empty strings without spaces or NUL characters"
    if ftype == "string" and isinstance(value, str):
        return "strings used by rules cannot contain NUL characters"
    if ftype == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return f"integer {value} is outside the signed 64-bit range"
    return f"expected {ftype}, got {type(value).__name__}"


def _builtin(record: EpisodeRecord, name: str) -> Any:
    if name == "timestamp":
        return to_us(record.timestamp)
    if name == "last_access":  # a never-read episode's last access is its timestamp
        return to_us(record.last_accessed or record.timestamp)
    value = getattr(record, name)
    return NIL if value is None else value


@lru_cache(maxsize=4096)
def _template(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(parse_template(text))


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _dispose(
    builders: dict[str, _FactBuilder], calls: dict[str, _Call], *keep_alive: object
) -> None:
    """Dispose of ``builders`` and ``calls`` (``keep_alive``: what must outlive them)."""
    for held in (builders, calls):
        for builder in held.values():
            builder.dispose()
        held.clear()


class _FactBuilder:
    """Asserts facts of one deftemplate through CLIPS's FactBuilder C API directly.

    Skips clipspy's per-slot value conversion (``Template.assert_fact`` costs about twice
    as much); slot values are Python ``str``/``int``/``float`` or ``clips.Symbol``.
    """

    def __init__(self, env: clips.Environment, template: str) -> None:
        self._envp = env._env
        self._template = template
        self._fb = lib.CreateFactBuilder(self._envp, template.encode())
        if self._fb == ffi.NULL:
            raise EngineError(f"no deftemplate {template!r} in the loaded program")
        self._value = ffi.new("CLIPSValue *")

    def put(self, slot: bytes, value: Any) -> None:
        envp, cell = self._envp, self._value
        kind = type(value)
        if kind is str:
            cell.lexemeValue = lib.CreateString(envp, value.encode())
        elif kind is int:
            cell.integerValue = lib.CreateInteger(envp, value)
        elif kind is float:
            cell.floatValue = lib.CreateFloat(envp, value)
        elif kind is clips.Symbol:
            cell.lexemeValue = lib.CreateSymbol(envp, value.encode())
        else:
            lib.FBAbort(self._fb)
            raise EngineError(f"{self._template}.{slot.decode()}: cannot assert {kind.__name__}")
        if lib.FBPutSlot(self._fb, slot, cell) != 0:
            lib.FBAbort(self._fb)
            raise EngineError(f"{self._template}.{slot.decode()}: CLIPS refused {value!r}")

    def assert_fact(self) -> None:
        if lib.FBAssert(self._fb) == ffi.NULL and lib.FBError(self._envp) != 0:
            raise EngineError(f"CLIPS could not assert a {self._template} fact")

    def dispose(self) -> None:
        lib.FBDispose(self._fb)


class _Call:
    """One CLIPS function call with fixed symbol arguments, through a function call
    builder made once (clipspy's ``call`` converts every argument and the result on each
    call); returns whether the function returned TRUE."""

    def __init__(self, env: clips.Environment, function: str, *symbols: str) -> None:
        self._envp = env._env
        self._function = function.encode()
        self._fcb = lib.CreateFunctionCallBuilder(self._envp, len(symbols))
        cell = ffi.new("CLIPSValue *")
        for symbol in symbols:
            cell.lexemeValue = lib.CreateSymbol(self._envp, symbol.encode())
            lib.FCBAppend(self._fcb, cell)
        self._result = ffi.new("CLIPSValue *")

    def __call__(self) -> bool:
        if lib.FCBCall(self._fcb, self._function, self._result) != lib.FCBE_NO_ERROR:
            return False
        return bool(self._result.lexemeValue == lib.TrueSymbol(self._envp))

    def dispose(self) -> None:
        lib.FCBDispose(self._fcb)


_BUILT: Final = ("sm-pass", "sm-cursor", "sm-elig", "sm-fact", "sm-episode", "sm-end")
"""The deftemplates a pass asserts facts of."""


class PackRuntime:
    """A compiled pack loaded into one CLIPS environment, reused across passes."""

    def __init__(self, compiled: CompiledPack) -> None:
        self.compiled = compiled
        built = compiled.take_environment()
        if built is None:
            built = new_environment()
            load_constructs(built, compiled.clips)
        self.env = built
        self.rules = compiled.by_index()
        self.sweeps = frozenset(i for i, r in self.rules.items() if is_sweep(r.program.info.rule))
        """Indexes of the rules without an episode pattern: they fire once the episodes are
        done, and only in passes that run them (see :meth:`_ends`)."""
        self.fields = compiled.episode_fields
        self.builtins = set(EPISODE_BUILTINS)
        self._slots = [
            (slot_name(name).encode(), name, ftype, name in self.builtins)
            for name, ftype in self.fields.items()
        ]
        self._normal_slots = [
            (normal_slot(name).encode(), name, name in self.builtins)
            for name in compiled.normal_episode_fields
        ]
        """The episode fields whose content normal form a ``normal_eq`` join reads."""
        self._fact_extras = _fact_extras(compiled)
        self.volatile = bool(VOLATILE & set(compiled.fact_slots)) or _episode_rules_read_pins(
            compiled
        )
        """Rules read access statistics, which reads change between passes without a new
        facts version: the facts a pass leaves then feed the next pass of the same run
        only, never a later run (see ``PassRunner.remember``)."""
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="stargraph-")
        self._out = Path(self._dir) / "deltas.out"
        self._reader: TextIO | None = None
        self._clean = False
        """Whether the environment holds no facts (reset since its last pass)."""
        self._fact_builders: dict[str, _FactBuilder] = {}
        self._calls: dict[str, _Call] = {}
        """Function calls a pass makes, by name (made once, like the fact builders)."""
        # the builders go before the environment does (CLIPS reports them as leaked)
        weakref.finalize(self, _dispose, self._fact_builders, self._calls, self.env)
        self.plans: dict[tuple[str, Stamp | None], _Plan] = {}
        self._vectors: dict[str, VectorCache] = {}
        """Per embedder identity, the vectors of the texts ``near`` ranked."""
        self._foreseers: dict[int, Foreseer | None] = {}
        """Per rule index, how to foresee the statement of the fact it makes (see
        :meth:`_foreseen`); ``None``: it cannot be foreseen."""
        self._near_kept: OrderedDict[str, tuple[list[EngineFact], NearIndex]] = OrderedDict()
        """Per partition key, the facts a pass left and the ``near`` index of exactly those:
        the next pass over that very list starts from it (a streaming record ranks against
        the partition's facts without rebuilding the index)."""
        """How each rule's deltas are built (per rule, and stamp: see :class:`_Plan`)."""

    @property
    def sha256(self) -> str:
        return self.compiled.sha256

    # --- input ------------------------------------------------------------------------

    def _episode_slots(self, record: EpisodeRecord) -> list[tuple[bytes, Any]]:
        metadata = record.metadata
        slots = [
            (
                slot,
                _builtin(record, name) if builtin else _normalise(metadata.get(name), ftype),
            )
            for slot, name, ftype, builtin in self._slots
        ]
        for slot, name, builtin in self._normal_slots:
            value = getattr(record, name) if builtin else metadata.get(name)
            slots.append((slot, normal_text(value) if type(value) is str else NIL))
        return slots

    def _assert_fact(
        self, fb: _FactBuilder, fact: EngineFact, anchor: int = 0, status: str | None = None
    ) -> None:
        """One fact as an ``sm-fact``; the lifecycle and payload slots only when the
        program declares them (a pack that reads none pays nothing for them)."""
        for slot, read in self._fact_extras:
            fb.put(slot, read(fact))
        if status is not None:
            fb.put(b"f_status", status)
        if anchor:
            fb.put(b"anchor", anchor)
        fb.put(b"f_id", fact.id)
        fb.put(b"f_subject", fact.subject)
        fb.put(b"f_predicate", fact.predicate)
        fb.put(b"f_object", fact.object)
        fb.put(b"f_confidence", float(fact.confidence))
        fb.put(b"f_valid_from", fact.valid_from_us)
        fb.put(b"f_reinforced_at", fact.reinforced_at_us)
        fb.put(b"f_rule_id", fact.rule_id)
        fb.put(b"f_observed_at", fact.observed_us or fact.valid_from_us)
        fb.assert_fact()

    def _assert_episode(
        self, fb: _FactBuilder, n: int, record: EpisodeRecord, ok: int, out: PassOutput
    ) -> None:
        try:
            slots = self._episode_slots(record)
        except _BadValue as exc:
            out.rejected.append(RejectedEpisode(record.id, None, f"metadata: {exc}"))
            slots, ok = [], 0
        fb.put(b"n", n)
        fb.put(b"ok", ok)
        for slot, value in slots:
            fb.put(slot, value)
        fb.assert_fact()

    def _unrouted(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` with the environment's Python routers (clipspy's error router and
        the quiet one) switched off, for a run or a flush: CLIPS asks every router of a
        higher priority than its file router about each write a rule makes, and a Python
        router answers by a callback, several per delta line. Neither has anything to
        capture then (a run raises no CLIPSError); a rule's runtime error goes to stderr."""
        envp = self.env._env
        lib.DeactivateRouter(envp, ERROR_ROUTER)
        lib.DeactivateRouter(envp, QUIET_ROUTER)
        try:
            return fn(*args)
        finally:
            lib.ActivateRouter(envp, QUIET_ROUTER)
            lib.ActivateRouter(envp, ERROR_ROUTER)

    def _output(self, function: str, *args: Any) -> None:
        """Open or close the deltas file, called directly (parsing a command asks every
        router about every character); a failure raises, so a stale file is never read."""
        if self.env.call(function, *args) != TRUE:
            raise EngineError(
                f"pack '{self.compiled.name}': {function} of the deltas file failed",
                pack=self.compiled.name,
            )

    def _run(self, budget: int) -> None:
        fired: int = self._unrouted(lib.Run, self.env._env, budget)
        if fired >= budget and next(iter(self.env.activations()), None) is not None:
            raise EngineError(
                f"pack '{self.compiled.name}' fired more than {budget} rules in one step; "
                "a rule probably re-triggers itself",
                pack=self.compiled.name,
            )

    # --- pass -------------------------------------------------------------------------

    def run_pass(
        self,
        *,
        partition: Partition,
        now: datetime,
        episodes: Sequence[EpisodeRecord],
        facts: Iterable[EngineFact] = (),
        eligible: Mapping[int, Iterable[int]] | None = None,
        chunk: int = DEFAULT_CHUNK,
        stamp: Stamp | None = None,
        matched: bool = False,
        history: HistoryInput | None = None,
        archived: Sequence[EngineFact] = (),
        fact_bytes: int = DEFAULT_FACT_BYTES,
        embedder: Embedder | None = None,
        earlier: EarlierEpisodes | None = None,
    ) -> PassOutput:
        """Run every compiled rule once over ``episodes`` and collect deltas.

        The episodes are taken in timestamp order, insertion ``seq`` breaking ties, whatever
        order they are given in (see :func:`in_time_order`): ``earlier`` and counts follow
        the time the episodes describe, not the order they were stored in.

        ``eligible`` maps a rule index to the seqs it may see (after its watermark, select
        and salience gate); ``None`` means every rule sees every episode. A delta whose
        rendered text would exceed ``fact_bytes`` rejects its episode (see
        :meth:`_Plan.too_large`). A pack whose fact patterns test ``near`` ranks facts with
        ``embedder`` (see :mod:`~stargraph_mem.engine.passes.near`).
        """
        given = facts if isinstance(facts, FactList) else list(facts)
        job = PassInput(partition, episodes, given, eligible, history, archived, earlier)
        return self.run_passes(
            [job],
            now=now,
            chunk=chunk,
            stamp=stamp,
            matched=matched,
            fact_bytes=fact_bytes,
            embedder=embedder,
        )[0]

    def run_passes(
        self,
        jobs: Sequence[PassInput],
        *,
        now: datetime,
        chunk: int = DEFAULT_CHUNK,
        stamp: Stamp | None = None,
        matched: bool = False,
        fact_bytes: int = DEFAULT_FACT_BYTES,
        embedder: Embedder | None = None,
    ) -> list[PassOutput]:
        """:meth:`run_pass` over each job in turn, the environment reset before each (a
        job's rules see its own episodes and facts only). Every job's deltas go through one
        open file, so many small partitions cost one file open, not one each."""
        cache = self.vectors(embedder)
        with self._lock:  # CLIPS environments are not thread-safe; one pass at a time
            reader = self._deltas_file()
            builders = self._builders()
            done = False
            try:
                with gc_paused():  # every job's deltas and facts are short-lived objects
                    outputs = [
                        self._one(
                            job, now, chunk, stamp, matched, reader, builders, fact_bytes, cache
                        )
                        for job in jobs
                    ]
                done = True
                return outputs
            finally:
                # a failed run's unread lines must not reach the next one; a long file
                # starts again empty
                if not done or reader.tell() > DELTAS_FILE_BYTES:
                    self._close_deltas_file()
                self.env.reset()
                self._clean = True

    def vectors(self, embedder: Embedder | None) -> VectorCache | None:
        """The vectors ``near`` ranks facts with (``None`` for a pack without ``near``);
        an ``EngineError`` naming the rule when the pack needs an embedder and has none."""
        if not self.compiled.similarity:
            return None
        if embedder is None:
            raise EmbedderError(needs_embedder(self.compiled), pack=self.compiled.name)
        key = identity(embedder)
        cache = self._vectors.get(key)
        if cache is None:  # one identity, one vector per text: any instance of it will do
            cache = self._vectors[key] = VectorCache(embedder)
        return cache

    def unembedded(
        self, key: str, facts: Sequence[EngineFact], embedder: Embedder | None
    ) -> list[EngineFact]:
        """The facts among ``facts`` (of partition ``key``) whose statement a pass would
        embed: none for a pack without ``near``, or when the partition's index is kept for
        exactly these facts (a streaming record's next pass)."""
        cache = self.vectors(embedder)
        kept = self._near_kept.get(key)
        if cache is None or (kept is not None and kept[0] is facts and kept[1].cache is cache):
            return []
        rows = cache.rows
        return [f for f in facts if statement(f.subject, f.predicate, f.object) not in rows]

    def seed_vectors(
        self, embedder: Embedder, facts: Sequence[EngineFact], vectors: Matrix
    ) -> None:
        """Stored vectors of the statements of ``facts`` (one row each, of ``embedder``'s
        identity), taken so a pass need not embed them again."""
        cache = self.vectors(embedder)
        if cache is not None:
            texts = [statement(f.subject, f.predicate, f.object) for f in facts]
            cache.seed(texts, vectors)

    def statement_vectors(
        self, embedder: Embedder, facts: Sequence[EngineFact]
    ) -> list[tuple[str, Matrix]]:
        """``(id, vector)`` of the facts among ``facts`` whose statement this runtime holds
        a vector of under ``embedder``'s identity (those a pass just ranked)."""
        cache = self._vectors.get(identity(embedder))
        if cache is None:
            return []
        rows = cache.rows
        out = []
        for fact in facts:
            row = rows.get(statement(fact.subject, fact.predicate, fact.object))
            if row is not None:
                out.append((fact.id, row))
        return out

    def _builders(self) -> dict[str, _FactBuilder]:
        """One fact builder per deftemplate a pass asserts, made once (each asserts any
        number of facts); disposed of by :meth:`close`, or before the environment goes."""
        if not self._fact_builders:
            names = [*_BUILT, *(rel.template for rel in self.compiled.history)]
            if self.compiled.near or self.compiled.surprise:  # beside the logs a pass follows
                names.append("sm-near")
            if self.compiled.episode_near:
                names.append("sm-near-ep")
            if self.compiled.surprise:
                names.append("sm-surprise")
            self._fact_builders.update((name, _FactBuilder(self.env, name)) for name in names)
        return self._fact_builders

    def _deltas_file(self) -> TextIO:
        """The file rules print deltas to, opened for CLIPS and for reading once and kept
        open between runs (opening and closing cost more than a small pass)."""
        if self._reader is None:
            self._output("open", self._out.as_posix(), clips.Symbol(OUT), "w")
            try:
                self._reader = self._out.open(encoding="utf-8", newline="")
            except BaseException:
                self._output("close", clips.Symbol(OUT))
                raise
        return self._reader

    def _flush(self) -> None:
        """Flush the deltas file, the Python routers off (a flush asks every router whether
        the file is its own); a failure raises, so a partial file is never read."""
        flush = self._calls.get("flush")
        if flush is None:
            flush = self._calls["flush"] = _Call(self.env, "flush", OUT)
        done: bool = self._unrouted(flush)
        if not done:
            raise EngineError(
                f"pack '{self.compiled.name}': flush of the deltas file failed",
                pack=self.compiled.name,
            )

    def _close_deltas_file(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
            self._output("close", clips.Symbol(OUT))

    def _one(
        self,
        job: PassInput,
        now: datetime,
        chunk: int,
        stamp: Stamp | None,
        matched: bool,
        reader: TextIO,
        builders: dict[str, _FactBuilder],
        fact_bytes: int = DEFAULT_FACT_BYTES,
        cache: VectorCache | None = None,
    ) -> PassOutput:
        """One job's pass; its deltas are what the file gained since the previous job."""
        episodes, fact_list = in_time_order(job.episodes), job.facts
        out = PassOutput(episodes=len(episodes))
        ok_sets, groups = self._eligibility(episodes, job.eligible)
        hist: HistoryFacts | None = None
        anchors: dict[str, int] = {}
        if self.compiled.history:
            hist = compute_history(
                self.compiled.history,
                self.compiled.name,
                job.partition,
                to_us(to_utc(now)),
                episodes,
                job.history,
            )
            out.aggregates = hist.write
            anchors = {record.id: seed for seed, record in hist.seeds.items()}
        if not self._clean:  # a run's first job finds the environment as the last run left it
            self.env.reset()
        self._clean = False
        fb = builders["sm-pass"]
        fb.put(b"now", to_us(to_utc(now)))
        fb.assert_fact()
        fb = builders["sm-cursor"]
        fb.put(b"n", 1)
        fb.assert_fact()
        fb = builders["sm-elig"]
        for set_id, members in groups.items():
            for idx in members:
                fb.put(b"set", set_id)
                fb.put(b"r", clips.Symbol(self.rules[idx].program.symbol))
                fb.assert_fact()
        lazy = cache is not None and self.compiled.near_only and not self._ends(job.eligible)
        if self.compiled.matches_facts and not lazy:
            tied = None if self._ends(job.eligible) else self._tied_to(episodes)
            for fact in fact_list if tied is None else tied(fact_list):
                first = fact.source_episode_ids[0] if fact.source_episode_ids else ""
                self._assert_fact(builders["sm-fact"], fact, anchors.get(first, 0))
            if self.compiled.needs_archived:
                for fact in job.archived if tied is None else tied(job.archived):
                    self._assert_fact(builders["sm-fact"], fact, status="archived")
        budget = 50 * (chunk + len(fact_list)) + 10_000
        episode_fb = builders["sm-episode"]
        near = None
        episode_near = None
        if cache is not None and self.compiled.episode_near:
            episode_near = EpisodeNeighbours(
                self.compiled.episode_near, cache, job.earlier, episodes
            )
        if cache is not None and (self.compiled.near or self.compiled.surprise):
            kept = self._near_kept.pop(job.partition.key, None)
            index = None
            if kept is not None and kept[0] is fact_list and kept[1].cache is cache:
                index = kept[1]
            near = _Near(self, cache, builders, fact_list, lazy=lazy, index=index)
            near.index.mark()  # it holds exactly the pass's facts: follow what changes
            # one batch, not one a time (with the facts the last pass made, if kept, and
            # those the episodes' rules would make from the episode alone)
            held = [text for text, _ in near.index.pending.values()]
            cache.of(
                [
                    *held,
                    *(record.content for record in episodes),
                    *self._foreseen(episodes, ok_sets, groups),
                ]
            )
            chunk = 1  # each episode ranks the facts the episodes before it left
        for start in range(0, len(episodes), chunk):
            for i in range(start, min(start + chunk, len(episodes))):
                if episode_near is not None:
                    eligible_rules = groups.get(ok_sets[i], ())
                    episode_near.episode(i + 1, episodes[i], eligible_rules, builders["sm-near-ep"])
                if near is not None:
                    near.episode(i + 1, episodes[i], groups.get(ok_sets[i], ()))
                    near.surprise(i + 1, episodes[i], groups.get(ok_sets[i], ()))
                self._assert_episode(episode_fb, i + 1, episodes[i], ok_sets[i], out)
                if hist is not None:
                    self._assert_history(builders, i + 1, hist)
            self._run(budget)
        if self._ends(job.eligible):
            if near is not None:
                near.sweep()
            builders["sm-end"].assert_fact()
            self._run(budget)
        elif not episodes:
            self._run(budget)
        self._flush()
        lines = reader.read().splitlines()
        collector = _Collector(self, job.partition, now, episodes, fact_list, out, stamp)
        collector.archived = {f.id: _archived(f) for f in job.archived}
        collector.history = hist
        collector.keep_matched = matched
        collector.fact_bytes = fact_bytes
        collector.near = near
        collector.episode_near = episode_near
        if near is not None:
            near.made_ids = collector.temp
        collector.collect(lines)
        out.facts_after = collector.facts_after()
        if near is not None and out.facts_after is not None:
            near.sync(later=True)  # what the last episode (or the sweep) made and closed
            self._keep_near(job.partition.key, near.index, collector, out.facts_after)
        self._account(episodes, ok_sets, groups, hist, out)
        return out

    def _foreseen(
        self,
        episodes: Sequence[EpisodeRecord],
        ok_sets: Sequence[int],
        groups: Mapping[int, tuple[int, ...]],
    ) -> list[str]:
        """The statements of the facts the rules each episode may fire would make from that
        episode's text fields alone (see :func:`_foreseer`): a pass ranks every fact it
        makes for the episodes after it, so their texts are embedded with the episodes, in
        one batch, not one at a time as each is made. A guess only: a rule that does not
        fire wasted a row of the batch; a text CLIPS builds otherwise is embedded when
        made, as before. A vector depends on its text alone, so results are the same."""
        foreseers = self._foreseers
        out: list[str] = []
        for record, set_id in zip(episodes, ok_sets, strict=True):
            for idx in groups.get(set_id, ()):
                if idx not in foreseers:
                    foreseers[idx] = _foreseer(self.rules[idx], self.builtins)
                foresee = foreseers[idx]
                if foresee is not None:
                    text = foresee(record)
                    if text is not None:
                        out.append(text)
        return out

    def _keep_near(
        self,
        key: str,
        index: NearIndex,
        collector: _Collector,
        after: list[EngineFact],
    ) -> None:
        """Keep ``index`` for the next pass over ``after`` when it holds exactly those facts
        (under their stored ids); at most :data:`NEAR_KEPT` partitions."""
        index.rename(collector.temp)
        facts = collector.facts
        if not index.holds_changed(len(after), (*facts.gone, *facts.used), facts.__contains__):
            return  # a rejected delta's closings, say: build afresh next time
        self._near_kept[key] = (after, index)
        while len(self._near_kept) > NEAR_KEPT:
            self._near_kept.popitem(last=False)

    def _account(
        self,
        episodes: Sequence[EpisodeRecord],
        ok_sets: Sequence[int],
        groups: Mapping[int, tuple[int, ...]],
        hist: HistoryFacts | None,
        out: PassOutput,
    ) -> None:
        """Every episode the pass consumes (one an episode rule could see) ends as the
        source of a delta, a rejection, or evidence a durable aggregate keeps: one no rule
        used is rejected here, with the reason, so nothing is consumed silently."""
        seen_by = {
            set_id: [self.rules[idx] for idx in members if idx not in self.sweeps]
            for set_id, members in groups.items()
        }
        if not any(seen_by.values()):
            return
        used = {eid for delta in out.deltas for eid in delta.source_episode_ids}
        used.update(r.episode_id for r in out.rejected if r.episode_id is not None)
        kept = hist.kept if hist is not None else set()
        for ordinal, record in enumerate(episodes, start=1):
            rules = seen_by.get(ok_sets[ordinal - 1])
            if not rules or record.id in used:
                continue
            if ordinal in kept:
                out.kept.append(record.id)
                continue
            out.rejected.append(
                RejectedEpisode(
                    record.id,
                    rules[0].id if len(rules) == 1 else UNMATCHED,
                    self._unmatched_reason(record, rules),
                    unmatched=True,
                )
            )

    def _unmatched_reason(self, record: EpisodeRecord, rules: Sequence[CompiledRule]) -> str:
        """Why an episode produced nothing: no rule's patterns matched it, and which of the
        fields the pack's rules read it lacks."""
        if len(rules) == 1:
            reason = f"rule '{rules[0].id}' did not match it"
        elif len(rules) == len(self.rules) - len(self.sweeps):
            reason = f"no rule of pack '{self.compiled.name}' matched it"
        else:
            reason = "none of the rules " + ", ".join(f"'{r.id}'" for r in rules) + " matched it"
        missing = [
            name
            for name in self.fields
            if name not in self.builtins and record.metadata.get(name) is None
        ]
        if missing:
            reason += "; it has no " + ", ".join(missing)
        return reason + "; nothing was derived from it"

    def _tied_to(
        self, episodes: Sequence[EpisodeRecord]
    ) -> Callable[[Sequence[EngineFact]], list[EngineFact]] | None:
        """The stored facts (of those given, in their order) that could match a fact
        pattern in a pass over ``episodes`` (see ``CompiledPack.fact_keys``); None when
        every fact must enter the pass.

        Leaving the others out changes nothing the rules decide: a fact enters the
        patterns' memories in the same relative order either way, and one that cannot
        equal an episode's fields joins with no episode. The deltas still resolve
        against every fact."""
        keys = self.compiled.fact_keys
        if keys is None:
            return None
        wanted: list[tuple[tuple[str, ...], set[Any]]] = []
        for pairs in keys:
            seen: set[Any] = set()
            normal = [fname.startswith(NORMAL_KEY) for fname, _ in pairs]
            for record in episodes:
                try:
                    values = [self._field_value(record, efield) for _, efield in pairs]
                except _BadValue:  # the episode enters no rule
                    continue
                if any(normal):
                    values = [
                        normal_value(v) if n else v for v, n in zip(values, normal, strict=True)
                    ]
                seen.add(values[0] if len(values) == 1 else tuple(values))
            wanted.append((tuple(fname for fname, _ in pairs), seen))

        def tied(facts: Sequence[EngineFact]) -> list[EngineFact]:
            if isinstance(facts, FactList):  # through its lookups: as many steps as found
                found: dict[str, EngineFact] = {}
                for fields, seen in wanted:
                    keyed = facts.keyed(fields)
                    for value in seen:
                        found.update((f.id, f) for f in keyed.get(value, ()))
                return sorted(found.values(), key=_fact_order)  # the list's own order
            getters = [(key_of(fields), seen) for fields, seen in wanted]
            return [f for f in facts if any(of(f) in seen for of, seen in getters)]

        return tied

    def _field_value(self, record: EpisodeRecord, name: str) -> Any:
        """An episode field's value as its CLIPS slot holds it (a string field's value
        is a ``str``, or the symbol ``nil`` when it is missing)."""
        if name in self.builtins:
            return _builtin(record, name)
        return _normalise(record.metadata.get(name), self.fields[name])

    @staticmethod
    def _assert_history(builders: dict[str, _FactBuilder], n: int, hist: HistoryFacts) -> None:
        """The ``sm-hist-<i>`` facts of episode ``n``."""
        for rel, count, grew, newest in hist.counts.get(n, ()):
            fb = builders[rel.template]
            fb.put(b"n", n)
            fb.put(b"count", count)
            fb.put(b"grew", TRUE if grew else FALSE)
            fb.put(b"newest", newest)
            fb.assert_fact()
        for rel, prev, record in hist.earlier.get(n, ()):
            fb = builders[rel.template]
            fb.put(b"n", n)
            fb.put(b"pn", prev)
            fb.put(b"pts", to_us(record.timestamp))
            types = rel.type_of
            for name in rel.carried:
                try:
                    value = _normalise(raw_history(record, name), types[name])
                except _BadValue:
                    value = "" if types[name] == "list" else NIL
                fb.put(slot_name(name).encode(), value)
            fb.assert_fact()

    def _ends(self, eligible: Mapping[int, Iterable[int]] | None) -> bool:
        """Whether a pass runs sweep rules (all rules when ``eligible`` is None): only then
        is the end-of-episodes fact asserted, so a pass of episode rules never sweeps."""
        return eligible is None or any(idx in self.sweeps for idx in eligible)

    def _eligibility(
        self, episodes: Sequence[EpisodeRecord], eligible: Mapping[int, Iterable[int]] | None
    ) -> tuple[list[int], dict[int, tuple[int, ...]]]:
        """Per episode, the id of its eligibility set; and each set's rule indexes."""
        if eligible is None:
            return [1] * len(episodes), {1: tuple(sorted(self.rules))}
        sets = {idx: set(seqs) for idx, seqs in sorted(eligible.items()) if idx in self.rules}
        everyone = tuple(sets)
        all_seqs = {ep.seq for ep in episodes}
        if all(members == all_seqs for members in sets.values()):
            return [1] * len(episodes), {1: everyone}
        ids: dict[tuple[int, ...], int] = {}
        out: list[int] = []
        for ep in episodes:
            members = tuple(idx for idx in everyone if ep.seq in sets[idx])
            out.append(ids.setdefault(members, len(ids) + 1))
        return out, {set_id: members for members, set_id in ids.items()}

    def close(self) -> None:
        with self._lock:
            self._close_deltas_file()
            _dispose(self._fact_builders, self._calls)
        self._out.unlink(missing_ok=True)
        Path(self._dir).rmdir()


def needs_embedder(compiled: CompiledPack) -> str:
    """The error for a pack whose patterns test ``near`` (of facts or of earlier
    episodes) or whose rules score ``surprise``, run without an embedder."""
    if compiled.near:
        rule_id, what = compiled.near[0].rule_id, "tests 'near'"
    elif compiled.surprise:
        rule_id, what = compiled.surprise[0].rule_id, "scores 'surprise'"
    else:
        rule_id, what = compiled.episode_near[0].rule_id, "tests 'near'"
    return (
        f"pack '{compiled.name}': rule '{rule_id}' {what} (similarity), which needs "
        "an embedder: open the memory with one (embedder='hash' is built in), not embedder=None"
    )


NEAR_KEPT: Final = 64
"""Partitions whose ``near`` index a runtime keeps between passes."""

NEAR_BINDINGS: Final = "#near"
"""The references' key of what ``near`` adds to a delta's bindings (see :class:`_Near`)."""


class _Near:
    """The ``near`` tests of one pass: the facts CLIPS holds, followed between episodes,
    ranked against each episode (or, for a sweep, each other) and asserted as ``sm-near``
    facts, the worst first (CLIPS fires the newest activation first: the best neighbour)."""

    def __init__(
        self,
        runtime: PackRuntime,
        cache: VectorCache,
        builders: Mapping[str, _FactBuilder],
        facts: Sequence[EngineFact],
        *,
        lazy: bool = False,
        index: NearIndex | None = None,
    ) -> None:
        env = runtime.env
        self.relations = runtime.compiled.near
        self.by_rule: dict[int, list[NearRelation]] = {}
        for rel in self.relations:
            self.by_rule.setdefault(rel.rule_index, []).append(rel)
        self.cache = cache
        self.fb = builders["sm-near"]
        self.scores: dict[NearKey, float] = {}
        self.runtime, self.fact_fb = runtime, builders["sm-fact"]
        self.lazy = lazy
        """The pack's rules see stored facts only as neighbours (``CompiledPack.near_only``):
        each is asserted into CLIPS when it first ranks among them."""
        self.stored: Mapping[str, EngineFact] | Layered[str, EngineFact] = (
            (facts.ids() if isinstance(facts, FactList) else {f.id: f for f in facts})
            if lazy
            else {}
        )
        self.admitted: set[str] = set()
        self._logs = FactLogs(env._env)
        # archived facts enter CLIPS beside these for patterns that admit them: never ranked
        if index is None:
            index = NearIndex(cache)
            index.add(
                (
                    f.id,
                    statement(f.subject, f.predicate, f.object),
                    f.observed_us or f.valid_from_us,
                )
                for f in facts
            )
        self.index = index
        self.surprising: dict[int, list[SurpriseRelation]] = {}
        for srel in runtime.compiled.surprise:
            self.surprising.setdefault(srel.rule_index, []).append(srel)
        self.surprise_fb = builders.get("sm-surprise")
        self.surprises: dict[tuple[int, int], tuple[float, list[tuple[str, float]]]] = {}
        """``(episode ordinal, relation index)`` → the score and the neighbours it averages."""
        self.made_ids: Mapping[str, str | None] = {}
        """The stored ids of the facts the pass made, by temporary id (the collector's)."""

    def surprise(self, n: int, record: EpisodeRecord, rules: Iterable[int]) -> None:
        """The surprise of episode ``n`` for the ``surprise`` patterns of ``rules`` (those
        that may see it), against the facts current at its point of the pass."""
        relations = [r for idx in rules for r in self.surprising.get(idx, ())]
        if not relations or self.surprise_fb is None:
            return
        self.sync()
        (query,) = self.cache.of([record.content])
        scored: dict[int, tuple[float, list[tuple[str, float]]]] = {}
        fb = self.surprise_fb
        for rel in relations:  # patterns asking for the same k share one score
            if rel.k not in scored:
                scored[rel.k] = surprise(self.index, query, rel.k)
            self.surprises[(n, rel.index)] = scored[rel.k]
            fb.put(b"n", n)
            fb.put(b"k", rel.index)
            fb.put(b"u", float(scored[rel.k][0]))
            fb.assert_fact()

    def sync(self, *, later: bool = False) -> None:
        """Follow the facts CLIPS made and closed since the last call (from its logs; a log
        without a fact is not called for); ``later``: the made facts' texts are embedded
        when a ranking needs them (see :meth:`NearIndex.add`)."""
        logs = self._logs
        if logs.has_made():
            self.index.add(logs.take_made(), later=later)
        elif not later:
            self.index.add(())  # the facts added later get their rows
        if logs.has_gone():
            self.index.remove(logs.take_gone())

    def episode(self, n: int, record: EpisodeRecord, rules: Iterable[int]) -> None:
        """The neighbours of episode ``n`` for the ``near`` tests of ``rules`` (those that
        may see it)."""
        relations = [r for idx in rules for r in self.by_rule.get(idx, ()) if not r.sweep]
        if not relations:
            return
        self.sync()
        (query,) = self.cache.of([record.content])
        ranked: dict[tuple[int, float | None], list[tuple[str, float]]] = {}
        for rel in relations:  # tests asking the same question share one ranking
            key = (rel.top_k, rel.min_cosine)
            if key not in ranked:
                ranked[key] = self.index.neighbours(rel, query)
            self.put(n, rel, "", ranked[key])

    def sweep(self) -> None:
        """The neighbours of every fact held when the sweep starts, for the sweeps' tests."""
        relations = [r for r in self.relations if r.sweep]
        if not relations:
            return
        self.sync()
        ids = sorted(self.index.ids)
        for rel in relations:
            if rel.at_least is not None:
                self.clusters(rel)
                continue
            for fid in ids:
                self.put(0, rel, fid, self.index.neighbours(rel, self.index.vector(fid), fid))

    def clusters(self, rel: NearRelation) -> None:
        """A clustering test's neighbours: each large enough cluster's members, as the
        neighbours of its representative (see :func:`.near.clusters`)."""
        assert rel.at_least is not None and rel.min_cosine is not None  # checked by the IR
        found = self.runtime.env.eval("(find-all-facts ((?f sm-fact)) TRUE)")
        ranks = clips_ranks(found)
        for lead, members in clusters(self.index, ranks, rel.min_cosine, rel.at_least):
            self.put(0, rel, lead, members)

    def put(self, n: int, rel: NearRelation, of: str, found: list[tuple[str, float]]) -> None:
        for fid, _ in found if self.lazy else ():
            stored = self.stored.get(fid) if fid not in self.admitted else None
            if stored is not None:
                self.admitted.add(fid)
                self.runtime._assert_fact(self.fact_fb, stored)
        fb = self.fb
        for fid, score in reversed(found):
            fb.put(b"n", n)
            fb.put(b"k", rel.index)
            fb.put(b"of", of)
            fb.put(b"id", fid)
            fb.put(b"cos", float(score))
            fb.assert_fact()
            self.scores[(n, rel.index, of, fid)] = score

    def resolve(self, rule: int, n: int, raw: Mapping[str, str], refs: dict[str, Any]) -> None:
        """Each ``near`` fact alias's cosine (``<alias>#cos``, for its variable) and the
        bindings that cite it: ``<alias>.cosine``, ``<alias>.fact``, ``<alias>.embedder``."""
        cited: dict[str, Any] = {}
        for rel in self.by_rule.get(rule, ()):
            if rel.alias == "-":
                continue
            key = (
                (0, rel.index, raw[rel.of], raw[rel.alias])
                if rel.sweep
                else (
                    n,
                    rel.index,
                    "",
                    raw[rel.alias],
                )
            )
            score = self.scores.get(key)
            if score is None:
                raise _Unresolved(f"no neighbour {raw[rel.alias]} for '{rel.alias}'")
            refs[rel.alias + "#cos"] = score
            cited[f"{rel.alias}.cosine"] = score
            cited[f"{rel.alias}.fact"] = refs[rel.alias].id
            cited[f"{rel.alias}.embedder"] = self.cache.identity
        for srel in self.surprising.get(rule, ()):
            found = self.surprises.get((n, srel.index))
            if found is None:
                raise _Unresolved(f"no surprise score for '{srel.alias}'")
            score, nearest = found
            refs[srel.alias + "#surprise"] = score
            cited[srel.alias] = score
            cited[f"{srel.alias}.k"] = srel.k
            cited[f"{srel.alias}.facts"] = [self.fact_id(fid) for fid, _ in nearest]
            cited[f"{srel.alias}.cosines"] = [cos for _, cos in nearest]
            cited[f"{srel.alias}.embedder"] = self.cache.identity
        if cited:
            refs[NEAR_BINDINGS] = cited

    def fact_id(self, fid: str) -> str:
        """A neighbour's id as stored: a fact the pass made has a temporary id in CLIPS
        until its delta is built."""
        final = self.made_ids.get(fid, fid)
        return fid if final is None else final


def _time_key(record: EpisodeRecord) -> tuple[datetime, int]:
    return record.timestamp, record.seq


def in_time_order(episodes: Sequence[EpisodeRecord]) -> Sequence[EpisodeRecord]:
    """``episodes`` in timestamp order, insertion ``seq`` breaking ties (the order every
    pass consumes its episodes in); the same sequence when it is in that order already."""
    previous: tuple[datetime, int] | None = None
    for record in episodes:
        key = (record.timestamp, record.seq)
        if previous is not None and key < previous:
            return sorted(episodes, key=_time_key)
        previous = key
    return episodes


@dataclass(frozen=True, slots=True)
class PassInput:
    """One partition's input to :meth:`PackRuntime.run_passes`."""

    partition: Partition
    episodes: Sequence[EpisodeRecord]
    facts: list[EngineFact]
    eligible: Mapping[int, Iterable[int]] | None = None
    history: HistoryInput | None = None
    """The partition's stored aggregates for ``over: history`` patterns (None: none kept,
    as in a pass over a fresh partition)."""
    archived: Sequence[EngineFact] = ()
    """The partition's archived facts, for a pack whose patterns admit them."""
    earlier: EarlierEpisodes | None = None
    """The episodes earlier passes consumed, for ``earlier`` patterns with ``near``."""


@dataclass(frozen=True)
class Stamp:
    """The specification's contract: stamp a consolidation rule's id on every delta and
    keep only the kinds it emits (the pack rule that decided is kept in the reason)."""

    rule_id: str
    kinds: tuple[str, ...] = DELTA_KINDS


class _Collector:
    """Turns printed rule lines back into deltas, resolving bindings from Python data."""

    def __init__(
        self,
        runtime: PackRuntime,
        partition: Partition,
        now: datetime,
        episodes: Sequence[EpisodeRecord],
        facts: list[EngineFact],
        out: PassOutput,
        stamp: Stamp | None = None,
    ) -> None:
        self.stamp = stamp
        self.runtime = runtime
        self.partition = partition
        self.now = now
        self.now_us = to_us(to_utc(now))
        self.episodes = episodes
        self.out = out
        self.facts = _PassFacts(facts)
        self.temp: dict[str, str | None] = {}
        self.keep_matched = False
        self.history: HistoryFacts | None = None
        self.times: dict[str, int] | None = None
        self.archived: dict[str, EngineFact] = {}
        """The partition's archived facts a pattern may match (they can be replaced)."""
        self.fact_bytes = DEFAULT_FACT_BYTES
        """The most UTF-8 bytes a delta's rendered text may hold (see :meth:`_Plan.too_large`)."""
        self.key_bytes = utf8_size(partition.key)
        """The partition key's share of an indexed key (see :data:`KEY_BYTES`)."""
        self.near: _Near | None = None
        """The pass's ``near`` neighbours (a pack whose fact patterns test ``near``)."""
        self.episode_near: EpisodeNeighbours | None = None
        """The pass's neighbour episodes (a pack with ``earlier`` patterns testing ``near``)."""

    def facts_after(self) -> list[EngineFact]:
        """Current facts after the pass's deltas (the order of ``current_facts``)."""
        return self.facts.after()

    def collect(self, lines: list[str]) -> None:
        for line in lines:
            head, *eps = line.split(" | ")
            tokens = head.split()
            rule = self.runtime.rules[int(tokens[0])]
            rid = rule.id
            self.out.fired[rid] = self.out.fired.get(rid, 0) + 1
            self.one(rule, int(tokens[1]), tokens[2:], [e.split() for e in eps])

    def one(self, rule: CompiledRule, n: int, tokens: list[str], eps: list[list[str]]) -> None:
        program = rule.program
        anchor = self.episodes[n - 1] if n > 0 else None
        refs: dict[str, Any] = {}
        raw: dict[str, str] = {}
        temp_id: str | None = None
        eps_iter = iter(eps)
        try:
            for tok, value in zip(program.tokens, tokens, strict=True):
                if tok.what == "temp_id":
                    temp_id = value
                elif tok.what == "episode_n":
                    refs[tok.alias] = self.episode(int(value))
                elif tok.what == "fact_id":
                    refs[tok.alias] = self.fact(value)
                    raw[tok.alias] = value
                elif tok.what == "near_episode":
                    if self.episode_near is None:
                        raise _Unresolved(f"no neighbour episode {value} for '{tok.alias}'")
                    refs[tok.alias] = self.episode_near.record(value)
                    raw[tok.alias] = value
                elif tok.what == "would_be":
                    refs[tok.alias + "#fact"] = self.fact(value)
                elif tok.what == "hcount":
                    assert self.history is not None
                    ids = self.history.counted(tok.rel, n)
                    refs[tok.alias] = (int(value), [_Seen(i) for i in ids])
                else:
                    refs[tok.alias] = (
                        int(value),
                        [self.episodes[int(e) - 1] for e in next(eps_iter)],
                    )
            if self.near is not None:
                self.near.resolve(rule.index, n, raw, refs)
            if self.episode_near is not None:
                self.episode_near.resolve(rule.index, n, raw, refs)
            delta = self.build(program, anchor, refs)
            if self.stamp is not None and delta.kind not in self.stamp.kinds:
                raise _Unresolved(f"rule '{self.stamp.rule_id}' does not emit {delta.kind}")
            closed = self.close_replaced(delta)
        except (KeyError, _Unresolved) as exc:
            self.reject(anchor, rule, f"unresolved reference: {exc}", temp_id)
            return
        except _TooLarge as exc:
            self.reject(anchor, rule, str(exc), temp_id)
            return
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            self.reject(anchor, rule, f"invalid delta: {where}: {first['msg']}", temp_id)
            return
        self.out.deltas.append(delta)
        if self.keep_matched:
            self.out.matched.append(_matched(anchor, refs))
        if isinstance(delta, FactDelta):
            self.make(delta, program, refs, closed, temp_id)
        if delta.reinforced_ids:
            seen = self.observed(delta, program, refs, default=0)
            for fid in delta.reinforced_ids:
                known = self.facts.get(fid)
                if known is not None:
                    at, count, observed = lifecycle.reinforced(known, self.now_us, seen)
                    self.facts[fid] = replace(
                        known, reinforced_at_us=at, reinforcement_count=count, observed_us=observed
                    )

    def make(
        self,
        delta: FactDelta,
        program: RuleProgram,
        refs: Mapping[str, Any],
        closed: Sequence[EngineFact],
        temp_id: str | None,
    ) -> None:
        """The fact ``delta`` makes, as the fact store will hold it (see
        :func:`~stargraph_mem.model.lifecycle.carry`), current for the rest of the pass."""
        fid = delta.new_fact_id
        if temp_id is not None:
            self.temp[temp_id] = fid
        own = lifecycle.Carried(self.now_us, 0, self.observed(delta, program, refs))
        made = lifecycle.carry(delta.fact_lifecycle, own, closed)
        subject, predicate, obj = delta.fact.triple
        self.facts[fid] = EngineFact(
            fid,
            subject,
            predicate,
            obj,
            delta.confidence,
            self.now_us,
            made.reinforced_at_us,
            delta.rule_id,
            tuple(delta.source_episode_ids),
            made.observed_us,
            reinforcement_count=made.reinforcement_count,
            access_count=made.access_count,
            last_access_us=made.last_access_us,
            pinned=made.pinned,
            payload=delta.fact.payload or None,
            layer=delta.layer or DEFAULT_LAYER,
            memory_type=delta.memory_type or DEFAULT_MEMORY_TYPE,
            trust=1.0 if delta.trust is None else delta.trust,
        )

    def episode(self, n: int) -> EpisodeRecord:
        """The episode of ordinal ``n``: of this pass, or (``n < 0``) of an earlier one."""
        if n > 0:
            return self.episodes[n - 1]
        if self.history is None or n not in self.history.seeds:
            raise _Unresolved(f"episode ordinal {n}")
        return self.history.seeds[n]

    def observed(
        self,
        delta: DeltaBase,
        program: RuleProgram,
        refs: Mapping[str, Any],
        default: int | None = None,
    ) -> int:
        """The time of the newest source episode of ``delta`` (as the fact store works it
        out from the stored episodes), or ``default`` (the pass time) when none is known."""
        times = self.times
        if times is None:
            times = self.times = {e.id: to_us(e.timestamp) for e in self.episodes}
            if self.history is not None:
                times.update((e.id, to_us(e.timestamp)) for e in self.history.seeds.values())
        cited = self.history.times if self.history is not None else {}
        found = [
            times[e] if e in times else cited[e]
            for e in delta.source_episode_ids
            if e in times or e in cited
        ]
        for alias in program.info.rule.emit.sources:
            if program.info.aliases.get(alias) == "fact":
                fact = refs[alias]
                found.append(fact.observed_us or fact.valid_from_us)
        return max(found, default=self.now_us if default is None else default)

    def close_replaced(self, delta: MemoryDelta) -> list[EngineFact]:
        """Replaced facts must be current facts of this partition (or archived ones, matched,
        that the delta may restore: see :func:`~stargraph_mem.model.lifecycle.refusal`),
        each named once; they stop being current for the rest of the pass. Otherwise the
        episode is rejected here instead of failing the whole pass at apply time."""
        replaces = delta.closed_ids
        if not replaces:
            return []
        if len(set(replaces)) != len(replaces):
            raise _Unresolved("replaces names the same fact twice")
        missing = [
            fid for fid in replaces if fid not in self.facts and not self.restorable(fid, delta)
        ]
        if missing:
            raise _Unresolved(
                "replaces names facts that are not current in this partition: " + ", ".join(missing)
            )
        into = delta.successor_id if not delta.creates else None
        if into is not None and into not in self.facts:
            raise _Unresolved(f"merged_into names a fact not current in this partition: {into}")
        if delta.flags:  # challenged: the facts stay current, flagged
            status = delta.close_status
            for fid in replaces:
                known = self.facts.get(fid)
                assert known is not None  # checked above
                self.facts[fid] = replace(known, status=status)
            return []
        return [
            self.facts.pop(fid) if fid in self.facts else self.archived.pop(fid) for fid in replaces
        ]

    def restorable(self, fid: str, delta: MemoryDelta) -> bool:
        """Whether ``fid`` is an archived fact of the pass that ``delta`` may name."""
        return fid in self.archived and lifecycle.refusal(lifecycle.ARCHIVED, False, delta) is None

    def reject(
        self, anchor: EpisodeRecord | None, rule: CompiledRule, reason: str, temp_id: str | None
    ) -> None:
        if temp_id is not None:
            self.temp[temp_id] = None
        self.out.rejected.append(RejectedEpisode(anchor.id if anchor else None, rule.id, reason))

    def fact(self, fid: str) -> EngineFact:
        if fid in self.temp:
            final = self.temp[fid]
            if final is None:
                raise _Unresolved(f"fact from a rejected delta ({fid})")
            fid = final
        found = self.facts.get(fid) or self.archived.get(fid)
        if found is None:
            raise _Unresolved(f"fact {fid}")
        return found

    # --- delta construction ------------------------------------------------------------

    def plan(self, program: RuleProgram) -> _Plan:
        key = (program.symbol, self.stamp)
        plan = self.runtime.plans.get(key)
        if plan is None:
            plan = self.runtime.plans[key] = _Plan(self.runtime, program, self.stamp)
        return plan

    def build(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> MemoryDelta:
        plan = self.plan(program)
        values = {name: get(refs, anchor) for name, get in plan.getters}
        problem = plan.too_large(values, self.fact_bytes, KEY_BYTES - self.key_bytes)
        if problem is not None:
            raise _TooLarge(problem)
        body: dict[str, Any] = {
            "user": self.partition.user,
            "agent": self.partition.agent,
            "source_episode_ids": self.sources(program, anchor, refs),
            "promotion_ts": self.now,
            "rule_id": plan.rule_id,
            "confidence": plan.confidence(values, refs, self.now_us),
            "reason": plan.reason_prefix + plan.reason(values),
            "bindings": {
                **{name: _json_value(values[name]) for name in plan.binding_names},
                **refs.get(NEAR_BINDINGS, {}),
            },
        }
        fields = plan.fields
        if "reinforces" in fields:
            body["reinforces"] = [refs[a].id for a in plan.emit.reinforces]
        if plan.status is not None:
            body["status"] = plan.status
        if plan.merged_into is not None:
            body["merged_into"] = refs[plan.merged_into].id
        if "lifecycle" in fields and plan.lifecycle != "new":
            body["lifecycle"] = plan.lifecycle
        if "replaces" in fields:
            body["replaces"] = self.replaces(program, refs, values)
        if plan.model.creates:
            body["fact"] = {
                "subject": plan.subject(values),
                "predicate": plan.predicate(values),
                "object": plan.object(values),
                "payload": {key: fill(values) for key, fill in plan.payload},
            }
            self.placed(body, plan, values, refs)
            trust = stored_trust(self.trust_of(program, anchor, refs))
            if trust is not None:
                body["trust"] = trust
        return plan.model.model_validate(body)

    def placed(
        self,
        body: dict[str, Any],
        plan: _Plan,
        values: Mapping[str, Any],
        refs: Mapping[str, Any],
    ) -> None:
        """The layer and memory type of the fact a delta makes: the emit's, else the pack's
        default, else the first replaced fact's; left out of ``body`` when the default."""
        replaced: EngineFact | None = None
        if plan.layer is None or plan.memory_type is None:
            for fid in body.get("replaces", ()):
                replaced = self.facts.get(fid) or self.archived.get(fid)
                if replaced is not None:
                    break
        for name, fill, names, default in (
            ("layer", plan.layer, LAYERS, DEFAULT_LAYER),
            ("memory_type", plan.memory_type, MEMORY_TYPES, DEFAULT_MEMORY_TYPE),
        ):
            if fill is not None:
                value = fill(values)
                if value not in names:
                    raise _Unresolved(f"{name} {value!r} is not one of {', '.join(names)}")
            elif replaced is not None:
                value = getattr(replaced, name)
            else:
                continue
            if value != default:
                body[name] = value

    def trust_of(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> float:
        """The least trust of a delta's sources: its episodes' (``metadata.trust`` or
        ``.source``) and its source facts'."""
        found: list[float] = [] if anchor is None else [episode_trust(anchor.metadata)]
        for alias in program.info.rule.emit.sources:
            kind = program.info.aliases[alias]
            if kind == "earlier":
                found.append(episode_trust(refs[alias].metadata))
            elif kind == "count":
                found += [
                    episode_trust(r.metadata) for r in refs[alias][1] if hasattr(r, "metadata")
                ]
            elif kind == "fact":
                found.append(refs[alias].trust)
        return least_trust(found)

    def replaces(
        self, program: RuleProgram, refs: Mapping[str, Any], values: Mapping[str, Any]
    ) -> list[str]:
        out: list[str] = []
        for ref in program.info.rule.emit.replaces:
            if isinstance(ref, ListVar):
                out.extend(values[ref.list] or [])
            elif program.info.aliases.get(ref) == "fact":
                out.append(refs[ref].id)
            else:
                out.append(refs[ref + "#fact"].id)
        return out

    def sources(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> list[str]:
        ids: list[str] = [anchor.id] if anchor is not None else []
        for alias in program.info.rule.emit.sources:
            kind = program.info.aliases[alias]
            if kind in ("episode",):
                continue
            if kind == "earlier":
                ids.append(refs[alias].id)
            elif kind == "count":
                ids.extend(r.id for r in refs[alias][1])
            else:
                ids.extend(refs[alias].source_episode_ids)
        return list(dict.fromkeys(ids)) if len(ids) > 1 else ids


Getter = Callable[[Mapping[str, Any], EpisodeRecord | None], Any]
Filler = Callable[[Mapping[str, Any]], str]


def _filler(text: str | None) -> Filler:
    """A function filling one emit template from resolved variable values."""
    parts = _template(text or "")
    if len(parts) == 1 and parts[0][0] == "text":
        constant = parts[0][1]
        return lambda values: constant
    if len(parts) == 1:
        name = parts[0][1]
        return lambda values: _text(values[name])
    names = [value for kind, value in parts if kind == "var"]
    pattern = "".join(
        value.replace("{", "{{").replace("}", "}}") if kind == "text" else "{}"
        for kind, value in parts
    )
    return lambda values: pattern.format(*[_text(values[name]) for name in names])


Sizer = Callable[[Mapping[str, Any]], int]


def _sizer(text: str | None) -> Sizer:
    """A function giving the UTF-8 size of a template once filled, without filling it
    (each distinct variable's text is measured once, however often it repeats)."""
    parts = _template(text or "")
    constant = sum(utf8_size(value) for kind, value in parts if kind == "text")
    uses = Counter(value for kind, value in parts if kind == "var")
    if not uses:
        return lambda values: constant
    return lambda values: (
        constant + sum(n * utf8_size(_text(values[name])) for name, n in uses.items())
    )


def _last_access(record: EpisodeRecord) -> datetime:
    """An episode's ``last_access``: its last access-recording read, else its timestamp."""
    return record.last_accessed or record.timestamp


class _TooLarge(Exception):
    """A delta's rendered text would exceed a size limit (the message says which)."""


@lru_cache(maxsize=256)
def key_of(fields: tuple[str, ...]) -> Callable[[EngineFact], Any]:
    """A fact's key by ``fields`` (one field: its value, else a tuple): each field's value,
    or its content normal form for a field named ``normal:<field>`` (see
    ``CompiledPack.fact_keys``)."""
    if not any(f.startswith(NORMAL_KEY) for f in fields):
        return attrgetter(*fields)
    parts = [
        _normal_of(attrgetter(f.removeprefix(NORMAL_KEY)))
        if f.startswith(NORMAL_KEY)
        else attrgetter(f)
        for f in fields
    ]
    if len(parts) == 1:
        return parts[0]
    return lambda fact: tuple(part(fact) for part in parts)


def _normal_of(get: Callable[[EngineFact], Any]) -> Callable[[EngineFact], Any]:
    """A fact field's content normal form, from its value (see :func:`normal_value`)."""
    return lambda fact: normal_value(get(fact))


normal_text = lru_cache(maxsize=1 << 16)(content_normal_form)
"""A text's content normal form (the texts of a partition's facts and episodes recur from
pass to pass)."""


def normal_value(value: Any) -> Any:
    """What ``normal_eq`` compares of a value, as CLIPS's ``sm-normal-form`` gives it
    (:func:`normal_form_of`): a text's content normal form (remembered), else the value."""
    return normal_text(value) if type(value) is str else normal_form_of(value)


Foreseer = Callable[[EpisodeRecord], str | None]
"""The statement of the fact a rule would make from one episode, or None."""


def _foreseer(rule: CompiledRule, builtins: set[str]) -> Foreseer | None:
    """How to foresee the statement of the fact ``rule`` makes from the episode it fires
    on, when its emit's subject, predicate and object use nothing but text fields of that
    episode (else None)."""
    info = rule.program.info
    emit = info.rule.emit
    if is_sweep(info.rule) or not kind_creates(emit.kind):
        return None
    templates = (emit.subject or "", emit.predicate or "", emit.object or "")
    names = {value for text in templates for kind, value in _template(text) if kind == "var"}
    variables = [info.variables[name] for name in sorted(names)]
    if any(var.kind != "episode" or var.type != "string" for var in variables):
        return None
    getters = [(var.name, _getter(var, builtins)) for var in variables]
    subject, predicate, obj = (_filler(text) for text in templates)
    no_refs: dict[str, Any] = {}

    def foresee(record: EpisodeRecord) -> str | None:
        values: dict[str, Any] = {}
        for name, get in getters:
            value = get(no_refs, record)
            if type(value) is not str:
                return None
            values[name] = value
        return statement(subject(values), predicate(values), obj(values))

    return foresee


def _getter(var: VarInfo, builtins: set[str]) -> Getter:
    """A function reading one variable's value from the pass's references."""
    alias, fname = var.alias, var.field
    if var.kind == "count":
        return lambda refs, anchor: refs[alias][0]
    if var.kind == "near":
        return lambda refs, anchor: refs[alias + "#cos"]
    if var.kind == "surprise":
        return lambda refs, anchor: refs[alias + "#surprise"]
    if var.kind == "fact" and fname.startswith(PAYLOAD_PREFIX):
        key, ftype = fname.removeprefix(PAYLOAD_PREFIX), var.type
        return lambda refs, anchor: _payload_value(refs[alias].payload, key, ftype)
    if var.kind == "fact":
        return lambda refs, anchor: getattr(refs[alias], fname)

    def record_of(refs: Mapping[str, Any], anchor: EpisodeRecord | None) -> EpisodeRecord:
        record = anchor if var.kind == "episode" else refs[alias]
        if record is None:
            raise _Unresolved(f"no episode for '{var.name}'")
        return cast(EpisodeRecord, record)

    if fname == "last_access":
        return lambda refs, anchor: _last_access(record_of(refs, anchor))
    if fname in builtins:
        return lambda refs, anchor: getattr(record_of(refs, anchor), fname)
    return lambda refs, anchor: record_of(refs, anchor).metadata.get(fname)


class _Plan:
    """What building a rule's delta needs, worked out once per rule and pass."""

    def __init__(self, runtime: PackRuntime, program: RuleProgram, stamp: Stamp | None) -> None:
        info = program.info
        emit = self.emit = info.rule.emit
        self.model: type[MemoryDelta] = DELTA_BY_KIND[emit.kind]
        self.fields = frozenset(self.model.model_fields)
        """The delta's fields: which of the emit's parts the body takes."""
        self.getters = [
            (name, _getter(var, runtime.builtins)) for name, var in info.variables.items()
        ]
        self.binding_names = sorted(info.variables)
        self.rule_id = stamp.rule_id if stamp else info.rule.id
        self.reason_prefix = f"{info.rule.id}: " if stamp else ""
        self.reason = _filler(emit.reason)
        self.subject = _filler(emit.subject)
        self.predicate = _filler(emit.predicate)
        self.object = _filler(emit.object)
        defaults = runtime.compiled.pack.defaults
        layer = emit.layer if emit.layer is not None else defaults.layer
        kind = emit.memory_type if emit.memory_type is not None else defaults.memory_type
        self.layer = None if layer is None else _filler(layer)
        self.memory_type = None if kind is None else _filler(kind)
        self.sizes = [
            (what, _sizer(text))
            for what, text in (
                ("reason", emit.reason),
                ("subject", emit.subject),
                ("predicate", emit.predicate),
                ("object", emit.object),
                *((f"payload.{key}", t) for key, t in emit.payload.items() if isinstance(t, str)),
            )
        ]
        """What :meth:`too_large` measures: each text template of the emit."""
        declared = runtime.compiled.pack.fact_payload
        self.payload = [
            (key, _payload_filler(t, declared.get(key), info)) for key, t in emit.payload.items()
        ]
        self.status = emit.status
        self.merged_into = emit.merged_into
        self.lifecycle = (
            "reinforce" if uses_reinforce(emit.confidence) else "inherit" if info.sweep else "new"
        )
        """An update's lifecycle: a confirmation (``reinforce`` arithmetic), a sweep's
        change that is no observation (``inherit``), or an observation (``new``)."""
        self.confidence = confidence_of(emit.confidence, defaults)

    def too_large(self, values: Mapping[str, Any], most: int, key_room: int) -> str | None:
        """Why the delta would be too large to build (``None``: it fits), measured before
        any text is built: its reason, subject, predicate, object and payload texts over
        ``most`` UTF-8 bytes together, or its subject and predicate over ``key_room``
        (what an indexed key leaves beside the partition key)."""
        sizes = {what: size(values) for what, size in self.sizes}
        total = sum(sizes.values())
        if total > most:
            biggest = max(sizes, key=lambda what: sizes[what])
            return (
                f"delta too large: its rendered text would be {total:,} bytes (UTF-8; "
                f"{biggest} {sizes[biggest]:,}), over the limit of {most:,} (fact_bytes)"
            )
        key = sizes["subject"] + sizes["predicate"]
        if key > key_room:
            return (
                f"delta too large: its subject and predicate would be {key:,} bytes "
                f"(UTF-8), over the {key_room:,} an indexed key leaves beside the "
                f"partition key (KEY_BYTES {KEY_BYTES:,})"
            )
        return None


def _matched(anchor: EpisodeRecord | None, refs: Mapping[str, Any]) -> dict[str, list[str]]:
    """Ids of what each pattern of a fired rule matched (for traces)."""
    out: dict[str, list[str]] = {"episode": [anchor.id]} if anchor is not None else {}
    for alias, ref in refs.items():
        if alias == NEAR_BINDINGS or alias.endswith(("#cos", "#surprise")):
            continue
        if isinstance(ref, tuple):
            out[alias] = [r.id for r in ref[1]]
        elif alias.endswith("#fact"):
            out[alias[: -len("#fact")] + " fact"] = [ref.id]
        else:
            out[alias] = [ref.id]
    return out


class _Unresolved(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Seen:
    """An episode a history count counted, known by its id only."""

    id: str


def _json_value(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


VOLATILE: Final = frozenset({"access_count", "last_access", "read_at"})
"""Fact fields that change outside consolidation passes without a new fact version (reads
record access). Pins do too, but only rules with an episode pattern that test ``pinned``
read them from a pass's facts: sweeps read their facts from the store each time."""


def _episode_rules_read_pins(compiled: CompiledPack) -> bool:
    """Whether a rule with an episode pattern tests ``pinned`` on a fact pattern."""
    for rule in compiled.pack.rules:
        kinds = [pattern_of(item) for item in rule.when]
        if any(kind == "episode" for kind, _ in kinds) and any(
            kind in ("fact", "not", "exists") and "pinned" in pattern.where
            for kind, pattern in kinds
        ):
            return True
    return False


class FactList(list[EngineFact]):
    """A partition's current facts as a pass leaves them: ordered by ``valid_from``, then
    id, each with its observation time, with the lookups the next pass needs (made on
    first use, and carried into the list the next pass leaves). Never changed once made:
    :meth:`changed` makes the next one, whose lookups share this one's (see
    :class:`~stargraph_mem.engine.passes.layered.Layered`)."""

    __slots__ = ("_ids", "_keyed")

    def __init__(self, facts: Iterable[EngineFact] = ()) -> None:
        super().__init__(facts)
        self._ids: Layered[str, EngineFact] | None = None
        self._keyed: dict[tuple[str, ...], Layered[Any, list[EngineFact]]] = {}

    def ids(self) -> Layered[str, EngineFact]:
        """The facts by id."""
        if self._ids is None:
            self._ids = Layered({f.id: f for f in self})
        return self._ids

    def keyed(self, fields: tuple[str, ...]) -> Layered[Any, list[EngineFact]]:
        """The facts by their values of ``fields`` (one field: the value), each list in
        the order of this one."""
        found = self._keyed.get(fields)
        if found is None:
            of = key_of(fields)
            index: dict[Any, list[EngineFact]] = {}
            for fact in self:
                index.setdefault(of(fact), []).append(fact)
            found = self._keyed[fields] = Layered(index)
        return found

    def changed(self, gone: Iterable[str], made: Sequence[EngineFact]) -> FactList:
        """The list without the facts of ids ``gone`` and with ``made`` (which replace
        any facts of the same ids), in order; lookups made so far come along, changed
        only where the facts changed."""
        ids = self.ids()
        removed = [ids[fid] for fid in {*gone, *(f.id for f in made)} if fid in ids]
        out = FactList(self)
        for fact in removed:
            at = bisect_left(out, _fact_order(fact), key=_fact_order)
            if at < len(out) and out[at] is fact:
                del out[at]
            else:  # not where the order puts it: find it the long way
                out.remove(fact)
        for fact in made:
            insort(out, fact, key=_fact_order)
        by_id: dict[str, EngineFact | Gone] = {fact.id: GONE for fact in removed}
        by_id.update((f.id, f) for f in made)
        out._ids = ids.changed(by_id)
        for fields, index in self._keyed.items():
            of = key_of(fields)
            lists: dict[Any, list[EngineFact]] = {}
            for fact in removed:
                key = of(fact)
                lists[key] = [f for f in lists.get(key, index.get(key, ())) if f is not fact]
            for fact in made:
                key = of(fact)
                same = list(lists.get(key, index.get(key, ())))
                insort(same, fact, key=_fact_order)
                lists[key] = same
            out._keyed[fields] = index.changed(
                {key: same if same else GONE for key, same in lists.items()}
            )
        return out


class _PassFacts:
    """The partition's current facts during a pass, by id: the stored ones as given, and
    those the pass changed or made (a pass over a few episodes touches a few of many
    facts). Facts are never changed in place: a change replaces the fact."""

    __slots__ = ("given", "gone", "stored", "used")

    def __init__(self, facts: list[EngineFact]) -> None:
        self.given = facts
        self.stored: Mapping[str, EngineFact] = (
            facts.ids() if isinstance(facts, FactList) else {f.id: f for f in facts}
        )
        self.used: dict[str, EngineFact] = {}
        """Facts changed or made in the pass (or whose observation time was filled in)."""
        self.gone: set[str] = set()
        """Stored facts the pass closed."""

    def __contains__(self, fid: str) -> bool:
        return fid in self.used or (fid in self.stored and fid not in self.gone)

    def get(self, fid: str) -> EngineFact | None:
        found = self.used.get(fid)
        if found is None and fid in self.stored and fid not in self.gone:
            found = self.stored[fid]
            if not found.observed_us:
                found = self.used[fid] = _observed(found)
        return found

    def pop(self, fid: str) -> EngineFact:
        found = self.get(fid)
        if found is None:
            raise KeyError(fid)
        self.used.pop(fid, None)
        if fid in self.stored:
            self.gone.add(fid)
        return found

    def __setitem__(self, fid: str, fact: EngineFact) -> None:
        self.used[fid] = fact

    def after(self) -> list[EngineFact]:
        """The current facts once the pass is done, ordered by ``valid_from``, then id."""
        used, gone, given = self.used, self.gone, self.given
        if isinstance(given, FactList):  # in order, observation times known
            if not used and not gone:
                return given
            return given.changed(gone, list(used.values()))
        out = [_observed(f) for f in given if f.id not in used and f.id not in gone]
        out += used.values()
        out.sort(key=_fact_order)
        return FactList(out)


def _fact_order(f: EngineFact) -> tuple[int, str]:
    return f.valid_from_us, f.id


def _archived(f: EngineFact) -> EngineFact:
    """An archived fact as a pass's patterns see it."""
    return replace(_observed(f), status=lifecycle.ARCHIVED)


def _observed(f: EngineFact) -> EngineFact:
    """``f`` with its observation time known (a stored fact that had none: its
    ``valid_from``)."""
    return f if f.observed_us else replace(f, observed_us=f.valid_from_us)


def _payload_value(payload: Mapping[str, Any] | None, key: str, ftype: FieldType) -> Any:
    """A declared payload key as a rule's variable holds it (timestamps as datetimes)."""
    read = read_value(ftype, (payload or {}).get(key))
    if read is MISSING or read is ILL_TYPED:
        return None
    return from_us(read) if ftype == "timestamp" else read


def _payload_slot(key: str, ftype: FieldType) -> Callable[[EngineFact], Any]:
    """Reads a declared payload key into its ``sm-fact`` slot (missing or of another type:
    ``nil``, which only ``missing`` and ``ne`` tests pass)."""

    def read(fact: EngineFact) -> Any:
        value = read_value(ftype, (fact.payload or {}).get(key))
        if value is MISSING or value is ILL_TYPED:
            return NIL
        if ftype == "boolean":
            return TRUE if value else FALSE
        return value

    return read


_LIFECYCLE_READERS: Final[Mapping[str, Callable[[EngineFact], Any]]] = {
    "reinforcement_count": lambda f: f.reinforcement_count,
    "access_count": lambda f: f.access_count,
    "last_access": lambda f: f.last_access_us or f.valid_from_us,
    "pinned": lambda f: TRUE if f.pinned else FALSE,
    "status": lambda f: f.status,
    "layer": lambda f: f.layer,
    "memory_type": lambda f: f.memory_type,
    "trust": lambda f: float(f.trust),
    "read_at": lambda f: f.last_access_us,
}
"""How each lifecycle slot is read from an :class:`EngineFact`."""


def _fact_extras(compiled: CompiledPack) -> list[tuple[bytes, Callable[[EngineFact], Any]]]:
    """The optional ``sm-fact`` slots the program declares, each with its reader."""
    out = [(slot_name(f).encode(), _LIFECYCLE_READERS[f]) for f in compiled.fact_slots]
    out += [
        (payload_slot(key).encode(), _payload_slot(key, ftype))
        for key, ftype in compiled.payload_slots.items()
    ]
    out += [
        (normal_slot(fname).encode(), _normal_of(attrgetter(fname)))
        for fname in compiled.normal_fact_fields
    ]
    return out


PayloadFiller = Callable[[Mapping[str, Any]], Any]


def _payload_filler(value: Any, ftype: FieldType | None, info: Any) -> PayloadFiller:
    """A payload value: a template's text, or for a declared key a value of its type (an
    operation's, for a ``number`` key: see :func:`payload_number`)."""
    if is_arithmetic(value):
        return lambda values: payload_number(value, values)
    if ftype is None or (ftype == "string" and isinstance(value, str)):
        return _filler(str(value))
    if not isinstance(value, str):
        constant = float(value) if ftype == "number" else value
        return lambda values: constant
    parts = _template(value)
    if len(parts) != 1 or parts[0][0] != "var":  # a timestamp literal
        return lambda values: value
    name = parts[0][1]
    convert = _PAYLOAD_TYPES[ftype]
    return lambda values: convert(values[name])


_PAYLOAD_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {
    "number": float,
    "integer": int,
    "boolean": bool,
    "timestamp": _text,
    "string": _text,
}
"""A declared payload key's value from a variable's value, by the key's type."""
