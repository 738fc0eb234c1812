"""Rule coverage: which rules of a pack fired, and how often, over one or more passes.

An activation is one firing of a rule in a pass (the runtime counts them in
``PassReport.fired``, including firings whose delta was rejected). Disabled rules are
listed but not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.ir.models import RulePack

EPSILON = 1e-9


@dataclass(frozen=True)
class RuleCoverage:
    """One rule's activations (how many times it fired)."""

    rule_id: str
    activations: int
    enabled: bool = True

    @property
    def status(self) -> str:
        if not self.enabled:
            return "disabled"
        return "fired" if self.activations else "never fired"


@dataclass(frozen=True)
class Coverage:
    """Per-rule activations of one pack, in declaration order."""

    pack: str
    rules: tuple[RuleCoverage, ...]

    @property
    def counted(self) -> int:
        return sum(1 for r in self.rules if r.enabled)

    @property
    def fired(self) -> int:
        return sum(1 for r in self.rules if r.enabled and r.activations)

    @property
    def ratio(self) -> float:
        """Fired share of the enabled rules (1.0 for a pack without enabled rules)."""
        return self.fired / self.counted if self.counted else 1.0

    def meets(self, minimum: float) -> bool:
        return self.ratio + EPSILON >= minimum

    def summary(self, minimum: float | None = None) -> str:
        """``coverage default: 4 of 5 rules fired (80%)[, minimum 100%]``."""
        text = f"coverage {self.pack}: {self.fired} of {self.counted} rules fired"
        text += f" ({self.ratio:.0%})"
        return text if minimum is None else f"{text}, minimum {minimum:.0%}"

    def rows(self) -> list[tuple[str, str, str]]:
        """Table rows with a header: rule, activations, status."""
        out = [("RULE", "ACTIVATIONS", "STATUS")]
        out += [(r.rule_id, str(r.activations), r.status) for r in self.rules]
        return out


def coverage_of(pack: RulePack, fired: Iterable[Mapping[str, int]]) -> Coverage:
    """Sum per-rule firing counts (one mapping per pass) over the rules of ``pack``."""
    totals: dict[str, int] = {}
    for counts in fired:
        for rule_id, n in counts.items():
            totals[rule_id] = totals.get(rule_id, 0) + n
    return Coverage(
        pack.pack,
        tuple(RuleCoverage(r.id, totals.get(r.id, 0), r.enabled) for r in pack.rules),
    )


def reports_coverage(packs: Iterable[RulePack], reports: Iterable[PassReport]) -> list[Coverage]:
    """One :class:`Coverage` per pack over the passes that ran it."""
    passes = list(reports)
    return [coverage_of(p, (r.fired for r in passes if r.pack == p.pack)) for p in packs]
