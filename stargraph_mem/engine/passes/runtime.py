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
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

import clips
from clips._clips import ffi, lib

from stargraph_mem.compiler.clips_env import QUIET_ROUTER, load_constructs, new_environment
from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.compiler.program import NORMAL_KEY, OUT, normal_slot, slot_name
from stargraph_mem.compiler.sweep_sql import is_sweep
from stargraph_mem.embedding import Embedder, Matrix, identity
from stargraph_mem.engine.passes.aggregates import HistoryFacts, HistoryInput
from stargraph_mem.engine.passes.aggregates import compute as compute_history
from stargraph_mem.engine.passes.collect import Collector, Plan
from stargraph_mem.engine.passes.fact_builder import FactBuilder
from stargraph_mem.engine.passes.fact_list import FactList, as_archived, fact_order
from stargraph_mem.engine.passes.near import (
    NearIndex,
    VectorCache,
    statement,
)
from stargraph_mem.engine.passes.near_episodes import EarlierEpisodes, EpisodeNeighbours
from stargraph_mem.engine.passes.near_pass import NEAR_KEPT, NearPass, needs_embedder
from stargraph_mem.engine.passes.outputs import (
    UNMATCHED,
    PassInput,
    PassOutput,
    RejectedEpisode,
    Stamp,
    in_time_order,
)
from stargraph_mem.engine.passes.slot_values import (
    FALSE,
    NIL,
    TRUE,
    BadValue,
    Foreseer,
    builtin_value,
    fact_extras,
    foreseer,
    key_of,
    normal_text,
    normal_value,
    normalise,
)
from stargraph_mem.errors import EmbedderError, EngineError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.ir.checks import (
    pattern_of,
)
from stargraph_mem.ir.models import (
    EPISODE_BUILTINS,
)
from stargraph_mem.ir.reference import raw_value as raw_history
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES
from stargraph_mem.model.time import EPOCH as EPOCH  # re-export
from stargraph_mem.model.time import from_us, to_us, to_utc
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.scope import Partition

DELTAS_FILE_BYTES = 1 << 22
"""Once the deltas file holds this much, the run that wrote it closes it (the next run
opens it again, empty)."""
DEFAULT_CHUNK = 256
"""Episodes asserted per agenda run: small chunks keep CLIPS join memories small."""
from_micros = from_us
"""Former name of :func:`stargraph_mem.model.time.from_us` (UTC µs → datetime)."""


ERROR_ROUTER: Final = b"python-error-router"
"""The router clipspy adds to every environment to turn CLIPS errors into CLIPSError."""


def _dispose(
    builders: dict[str, FactBuilder], calls: dict[str, _Call], *keep_alive: object
) -> None:
    """Dispose of ``builders`` and ``calls`` (``keep_alive``: what must outlive them)."""
    for held in (builders, calls):
        for builder in held.values():
            builder.dispose()
        held.clear()


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
        self._fact_extras = fact_extras(compiled)
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
        self._fact_builders: dict[str, FactBuilder] = {}
        self._calls: dict[str, _Call] = {}
        """Function calls a pass makes, by name (made once, like the fact builders)."""
        # the builders go before the environment does (CLIPS reports them as leaked)
        weakref.finalize(self, _dispose, self._fact_builders, self._calls, self.env)
        self.plans: dict[tuple[str, Stamp | None], Plan] = {}
        self._vectors: dict[str, VectorCache] = {}
        """Per embedder identity, the vectors of the texts ``near`` ranked."""
        self._foreseers: dict[int, Foreseer | None] = {}
        """Per rule index, how to foresee the statement of the fact it makes (see
        :meth:`_foreseen`); ``None``: it cannot be foreseen."""
        self._near_kept: OrderedDict[str, tuple[list[EngineFact], NearIndex]] = OrderedDict()
        """Per partition key, the facts a pass left and the ``near`` index of exactly those:
        the next pass over that very list starts from it (a streaming record ranks against
        the partition's facts without rebuilding the index)."""
        """How each rule's deltas are built (per rule, and stamp: see :class:`Plan`)."""

    @property
    def sha256(self) -> str:
        return self.compiled.sha256

    # --- input ------------------------------------------------------------------------

    def _episode_slots(self, record: EpisodeRecord) -> list[tuple[bytes, Any]]:
        metadata = record.metadata
        slots = [
            (
                slot,
                builtin_value(record, name) if builtin else normalise(metadata.get(name), ftype),
            )
            for slot, name, ftype, builtin in self._slots
        ]
        for slot, name, builtin in self._normal_slots:
            value = getattr(record, name) if builtin else metadata.get(name)
            slots.append((slot, normal_text(value) if type(value) is str else NIL))
        return slots

    def _assert_fact(
        self, fb: FactBuilder, fact: EngineFact, anchor: int = 0, status: str | None = None
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
        self, fb: FactBuilder, n: int, record: EpisodeRecord, ok: int, out: PassOutput
    ) -> None:
        try:
            slots = self._episode_slots(record)
        except BadValue as exc:
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
        :meth:`Plan.too_large`). A pack whose fact patterns test ``near`` ranks facts with
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

    def _builders(self) -> dict[str, FactBuilder]:
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
            self._fact_builders.update((name, FactBuilder(self.env, name)) for name in names)
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
        builders: dict[str, FactBuilder],
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
            near = NearPass(
                self, cache, builders, fact_list, lazy=lazy, index=index, episodes=episodes
            )
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
        collector = Collector(self, job.partition, now, episodes, fact_list, out, stamp)
        collector.archived = {f.id: as_archived(f) for f in job.archived}
        collector.history = hist
        collector.keep_matched = matched
        collector.fact_bytes = fact_bytes
        collector.near = near
        collector.episode_near = episode_near
        if near is not None:
            near.made_ids = collector.temp
        collector.collect(lines)
        out.facts_after = collector.facts_after()
        if near is not None:
            near.forget_ahead()
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
        episode's text fields alone (see :func:`foreseer`): a pass ranks every fact it
        makes for the episodes after it, so their texts are embedded with the episodes, in
        one batch, not one at a time as each is made. A guess only: a rule that does not
        fire wasted a row of the batch; a text CLIPS builds otherwise is embedded when
        made, as before. A vector depends on its text alone, so results are the same."""
        foreseers = self._foreseers
        out: list[str] = []
        for record, set_id in zip(episodes, ok_sets, strict=True):
            for idx in groups.get(set_id, ()):
                if idx not in foreseers:
                    foreseers[idx] = foreseer(self.rules[idx], self.builtins)
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
        collector: Collector,
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
                except BadValue:  # the episode enters no rule
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
                return sorted(found.values(), key=fact_order)  # the list's own order
            getters = [(key_of(fields), seen) for fields, seen in wanted]
            return [f for f in facts if any(of(f) in seen for of, seen in getters)]

        return tied

    def _field_value(self, record: EpisodeRecord, name: str) -> Any:
        """An episode field's value as its CLIPS slot holds it (a string field's value
        is a ``str``, or the symbol ``nil`` when it is missing)."""
        if name in self.builtins:
            return builtin_value(record, name)
        return normalise(record.metadata.get(name), self.fields[name])

    @staticmethod
    def _assert_history(builders: dict[str, FactBuilder], n: int, hist: HistoryFacts) -> None:
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
                    value = normalise(raw_history(record, name), types[name])
                except BadValue:
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
