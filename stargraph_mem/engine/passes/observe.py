"""What the engine did, as metrics and warnings: recorded from the pass reports where the
Consolidator's calls return them, and from the few events no report holds (a pass
computed again, a lease taken over).

Measurements go through :mod:`stargraph_mem.telemetry` (no-ops unless an OpenTelemetry
SDK listens); their attributes are pack and rule names and values from fixed lists, never
user ids or content. Warnings go to the ``stargraph_mem.worker`` logger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Final

from stargraph_mem import telemetry
from stargraph_mem.engine.passes.outputs import RejectedEpisode
from stargraph_mem.engine.passes.report import GATED, PassReport
from stargraph_mem.stores.scope import Partition
from stargraph_mem.telemetry import (
    CONFLICT_KIND,
    DELTA_KIND,
    ERROR_TYPE,
    PACK,
    PASS_KIND,
    PASS_OUTCOME,
    QUARANTINE_REASON,
    RECALL_STRATEGY,
    REJECTION_REASON,
    RULE,
)

if TYPE_CHECKING:
    from stargraph_mem.engine.passes.report import ConsolidationReport

logger = logging.getLogger("stargraph_mem.worker")
logger.addHandler(logging.NullHandler())  # silent unless the application routes it

FULL_TEXT: Final = "full_text"
"""The recall strategy of ``search`` (words matched in the facts' text)."""
HYBRID: Final = "hybrid"
"""A whole ``recall`` (its strategies are measured as ``fts``, ``vector``, ``graph``, and
its index catch-up and reads as ``catch_up`` and ``hydrate``)."""
FAILED_PREFIX: Final = "pass failed, nothing applied: "
"""How a quarantined partition's reason starts (then the error's type name)."""


def rejection_reason(rejected: RejectedEpisode) -> str:
    """A rejection's reason as one of a fixed few words (the text itself may quote the
    episode): ``salience_gate``, ``salience_error``, ``metadata``, ``unmatched``, ``rule``."""
    if rejected.rule_id == GATED:
        return "salience_gate"
    if rejected.unmatched:
        return "unmatched"
    if rejected.reason.startswith("salience:"):
        return "salience_error"
    if rejected.reason.startswith("metadata:"):
        return "metadata"
    return "rule"


def error_type(failed: str) -> str:
    """The error's type name in a quarantined partition's reason (``other`` if none)."""
    if not failed.startswith(FAILED_PREFIX):
        return "other"
    name = failed[len(FAILED_PREFIX) :].split(":", 1)[0]
    return name if name.isidentifier() else "other"


def outcome(report: PassReport) -> str:
    """``applied``, ``failed`` (the partition was quarantined) or ``dry_run``."""
    if report.failed is not None:
        return "failed"
    return "applied" if report.applied else "dry_run"


@lru_cache(maxsize=4096)
def attributes(pack: str, *pairs: str) -> Mapping[str, str]:
    """``{PACK: pack}`` and the (key, value) ``pairs`` after it, made once per distinct
    set (a streaming record measures the same few each time; never to be changed)."""
    return {PACK: pack, **dict(zip(pairs[::2], pairs[1::2], strict=True))}


def passes(tools: telemetry.Instruments, reports: Sequence[PassReport]) -> None:
    """Count passes, episodes, deltas, rejections and quarantines of ``reports`` into
    ``tools`` (their durations are recorded where their spans end: see
    ``PassSpan.timed``)."""
    for report in reports:
        pack = report.pack
        kind = "sweep" if report.sweep else "episodes"
        tools.passes.add(1, attributes(pack, PASS_KIND, kind, PASS_OUTCOME, outcome(report)))
        if report.failed is not None:
            reason = error_type(report.failed)
            tools.quarantines.add(
                1, attributes(pack, QUARANTINE_REASON, "pass_failed", ERROR_TYPE, reason)
            )
            continue
        if not report.applied:
            continue
        if report.quarantined:
            undecodable = attributes(pack, QUARANTINE_REASON, "row_undecodable")
            tools.quarantines.add(len(report.quarantined), undecodable)
        tools.episodes.add(report.episodes, attributes(pack))
        for kind_of, count in report.delta_counts.items():
            if count:
                tools.deltas.add(count, attributes(pack, DELTA_KIND, kind_of))
        for rejected in report.rejected:
            reason = rejection_reason(rejected)
            tools.rejections.add(1, attributes(pack, REJECTION_REASON, reason))
        if report.gated_out:
            gated = attributes(pack, REJECTION_REASON, "salience_gate")
            tools.rejections.add(len(report.gated_out), gated)


SMALL_REPORT: Final = 4
"""Reports of at most these many passes are counted when the SDK next collects (they hold
little); a bigger one (a nightly run's) is counted at once."""


def report(done: ConsolidationReport) -> None:
    """Record what one call of the Consolidator did (when an SDK listens). A small report
    (a streaming record's) is counted when the SDK next collects, so the record pays for
    a deque append instead of the counting (the totals an SDK reads are the same)."""
    tools = telemetry.live_instruments()
    if tools is None:
        return
    if len(done.passes) > SMALL_REPORT:
        _count(tools, done)
        return
    waiting = tools.waiting  # Instruments.later, inline: a record pays for every call
    waiting.append((_count, done))
    if len(waiting) >= tools.LATER_LIMIT:
        tools.catch_up()


def _count(tools: telemetry.Instruments, done: ConsolidationReport) -> None:
    passes(tools, done.passes)
    for due in done.conflicts:
        tools.conflicts.add(1, {PACK: due.pack, CONFLICT_KIND: "scheduler"})


def stale_retry(pack: str, partition: Partition, attempt: int) -> None:
    """A pass is computed again: another writer changed its partition meanwhile."""
    telemetry.instruments().conflicts.add(1, {PACK: pack, CONFLICT_KIND: "stale"})
    logger.warning(
        "pack %s: partition user=%r agent=%r changed under the pass: computing it again (retry %d)",
        pack,
        partition.user,
        partition.agent,
        attempt,
    )


def takeover(pack: str, partition: Partition) -> None:
    """This worker leased a partition another worker held without applying a pass."""
    telemetry.instruments().takeovers.add(1, {PACK: pack})
    logger.warning(
        "pack %s: took over the lease of partition user=%r agent=%r (its holder applied "
        "nothing while it held it)",
        pack,
        partition.user,
        partition.agent,
    )


def sweep_candidates(pack: str, rule_id: str, partitions: int) -> None:
    """A sweep's fire found ``partitions`` partitions with candidate facts."""
    if partitions:
        telemetry.instruments().sweep_candidates.add(partitions, {PACK: pack, RULE: rule_id})


def recall(seconds: float, strategy: str = FULL_TEXT) -> None:
    """One recall of ``strategy`` took ``seconds``."""
    telemetry.instruments().recall_duration.record(seconds, {RECALL_STRATEGY: strategy})
