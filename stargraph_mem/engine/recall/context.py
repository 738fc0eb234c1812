"""Context assembly: recalled facts, entity profiles, temporal context and evidence as one
markdown block that never exceeds a token budget.

The block reads::

    ## Memory

    ### Facts
    - alice works_at Acme (since 2024-05-01) [sources: ep-1, ep-7]

    ### Entity profiles
    - **alice** (also: Alice Smith)
      - works_at Acme

    ### Temporal context
    - 2024-05-01 09:30Z moved to Berlin [episode ep-3, before ep-7]

    ### Evidence
    - 2024-05-02 10:00Z I started at Acme today [episode ep-7]

**Budget.** Tokens are counted by a :class:`TokenCounter` over the text itself; the
default, :func:`approx_tokens`, is ``ceil(UTF-8 bytes / 4)``: about a token per four
characters of English, more for text whose characters take more bytes. After the title,
each section gets its share of the budget (facts 40 %, entity profiles 25 %, temporal
context 25 %, evidence 10 %) and keeps the longest prefix of its lines (they come best
first) that fits; the first line that does not fit is shortened with "…" when at least
:data:`MIN_SHORTENED_CHARS` characters of it fit, and the section stops there. What
sections leave unused then flows, in the order facts → entity profiles → temporal context
→ evidence, to sections that had more lines than room. A final check counts the whole
block, and while it is over budget (a counter need not add up over joined text) drops
lines from the last section backwards. The block is therefore never over budget.

A fact line cites its source episodes (up to :data:`MAX_CITED`, then ``+N more``); its
statement is shortened before its citation is. Sections with no lines are left out, and
when nothing is left at all the block is the empty string ``""`` (never ``None``), so
``if block:`` tells whether there is anything to prepend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final, Literal, Protocol

import orjson

from stargraph_mem.errors import RecallError
from stargraph_mem.model.base import FrozenModel
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import Fact

__all__ = [
    "FLOW_ORDER",
    "MAX_CITED",
    "MIN_SHORTENED_CHARS",
    "SECTION_SHARES",
    "SECTION_TITLES",
    "TITLE",
    "ContextLine",
    "SectionName",
    "TokenCounter",
    "approx_tokens",
    "assemble_context",
    "episode_line",
    "fact_line",
    "fact_statement",
    "one_line",
]


class TokenCounter(Protocol):
    """Counts the tokens of a text: ``counter(text) -> int`` (0 for ``""``). Any tokenizer
    fits, e.g. ``lambda text: len(encoding.encode(text))``."""

    def __call__(self, text: str, /) -> int: ...


def approx_tokens(text: str) -> int:
    """The default counter: ``ceil(len(text.encode("utf-8")) / 4)``. Deterministic, needs
    no model, close to real tokenizers for English and cautious for other scripts."""
    return -(-len(text.encode("utf-8")) // 4)


SectionName = Literal["facts", "profiles", "temporal", "evidence"]
FLOW_ORDER: Final[tuple[SectionName, ...]] = ("facts", "profiles", "temporal", "evidence")
"""The order sections appear in, and the order unused budget flows in."""
SECTION_SHARES: Final[Mapping[SectionName, float]] = {
    "facts": 0.40,
    "profiles": 0.25,
    "temporal": 0.25,
    "evidence": 0.10,
}
SECTION_TITLES: Final[Mapping[SectionName, str]] = {
    "facts": "### Facts",
    "profiles": "### Entity profiles",
    "temporal": "### Temporal context",
    "evidence": "### Evidence",
}
TITLE: Final = "## Memory"
MIN_SHORTENED_CHARS: Final = 12
"""A line is shortened only when at least this many characters of its body still fit."""
MAX_CITED: Final = 8
"""A fact line names at most this many source episodes, then ``+N more``."""
ELLIPSIS: Final = "…"


class ContextLine(FrozenModel):
    """One list item: ``body`` may be shortened to fit, ``suffix`` (a citation) never is;
    ``indent`` nests it under the line before (profile details)."""

    body: str
    suffix: str = ""
    indent: int = 0

    def render(self, body: str | None = None) -> str:
        return f"{'  ' * self.indent}- {self.body if body is None else body}{self.suffix}"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


def _stamp(moment: datetime) -> str:
    utc = moment.astimezone(UTC)
    if (utc.hour, utc.minute, utc.second, utc.microsecond) == (0, 0, 0, 0):
        return utc.strftime("%Y-%m-%d")
    return utc.strftime("%Y-%m-%d %H:%MZ")


def _cite(label: str, ids: Sequence[str]) -> str:
    if not ids:
        return " [no source episodes]"
    shown = ", ".join(ids[:MAX_CITED])
    more = f", +{len(ids) - MAX_CITED} more" if len(ids) > MAX_CITED else ""
    return f" [{label}: {shown}{more}]"


def fact_statement(fact: Fact) -> str:
    """A fact as text: ``subject predicate object``, or its payload as compact JSON."""
    if fact.has_triple:
        return one_line(f"{fact.subject} {fact.predicate} {fact.object}")
    return one_line(orjson.dumps(fact.payload, option=orjson.OPT_SORT_KEYS).decode())


def fact_line(fact: Fact, sources: Sequence[str]) -> ContextLine:
    """``statement (since day[, status]) [sources: ep-1, ep-2]``."""
    status = "" if fact.status == "current" else f", {fact.status}"
    body = f"{fact_statement(fact)} (since {_stamp(fact.valid_from)}{status})"
    return ContextLine(body=body, suffix=_cite("sources", sources))


def episode_line(episode: Episode, *, note: str = "") -> ContextLine:
    """``time content [episode id]`` (``note`` goes after the id, e.g. ``before ep-3``)."""
    extra = f", {note}" if note else ""
    return ContextLine(
        body=f"{_stamp(episode.timestamp)} {one_line(episode.content)}",
        suffix=f" [episode {episode.id}{extra}]",
    )


# --- assembly ----------------------------------------------------------------------------


def _section_text(name: SectionName, lines: Sequence[str]) -> str:
    """A section as it is appended to the block: the blank line before it included, so
    the costs of the sections and the title add up to the block's (for additive counters)."""
    return "\n".join((f"\n\n{SECTION_TITLES[name]}", *lines)) if lines else ""


def _block(parts: Mapping[SectionName, list[str]]) -> str:
    texts = [_section_text(name, parts[name]) for name in FLOW_ORDER if parts.get(name)]
    return "".join((TITLE, *texts)) if texts else ""


def _shorten(
    name: SectionName, kept: list[str], line: ContextLine, allowance: int, counter: TokenCounter
) -> str | None:
    """The longest shortening of ``line``'s body that fits after ``kept``, or ``None``."""
    body = line.body
    low, high, best = MIN_SHORTENED_CHARS, len(body) - 1, None
    while low <= high:
        middle = (low + high) // 2
        candidate = line.render(body[:middle].rstrip() + ELLIPSIS)
        if counter(_section_text(name, [*kept, candidate])) <= allowance:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def _fill(
    name: SectionName, lines: Sequence[ContextLine], allowance: int, counter: TokenCounter
) -> tuple[list[str], bool]:
    """The longest prefix of ``lines`` (its last line maybe shortened) that fits in
    ``allowance`` tokens, and whether every line fitted whole."""
    kept: list[str] = []
    for line in lines:
        rendered = line.render()
        if counter(_section_text(name, [*kept, rendered])) <= allowance:
            kept.append(rendered)
            continue
        shortened = _shorten(name, kept, line, allowance, counter)
        if shortened is not None:
            kept.append(shortened)
        return kept, False
    return kept, True


def _cost(name: SectionName, kept: list[str], counter: TokenCounter) -> int:
    return counter(_section_text(name, kept)) if kept else 0


def assemble_context(
    sections: Mapping[SectionName, Sequence[ContextLine]],
    *,
    budget_tokens: int,
    counter: TokenCounter | None = None,
) -> str:
    """The markdown block of ``sections`` (lines best first) within ``budget_tokens``
    (an integer ≥ 1), counted by ``counter`` (default :func:`approx_tokens`); ``""`` when
    no line fits or there are none. See the module's description for the rules."""
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 1:
        raise RecallError(
            f"budget_tokens: expected an integer ≥ 1, got {budget_tokens!r}",
            parameter="budget_tokens",
            value=budget_tokens,
        )
    unknown = sorted(set(sections) - set(FLOW_ORDER))
    if unknown:
        raise RecallError(
            f"sections: unknown sections {unknown}; sections are {list(FLOW_ORDER)}",
            parameter="sections",
            value=unknown,
        )
    count: TokenCounter = approx_tokens if counter is None else counter
    wanted = [name for name in FLOW_ORDER if sections.get(name)]
    if not wanted:
        return ""
    room = budget_tokens - count(TITLE)
    if room <= 0:
        return ""
    parts: dict[SectionName, list[str]] = {}
    complete: dict[SectionName, bool] = {}
    for name in wanted:
        allowance = math.floor(room * SECTION_SHARES[name])
        parts[name], complete[name] = _fill(name, sections[name], allowance, count)
    pool = room - sum(_cost(name, parts[name], count) for name in wanted)
    for name in wanted:
        if complete[name] or pool <= 0:
            continue
        before = _cost(name, parts[name], count)
        parts[name], complete[name] = _fill(name, sections[name], before + pool, count)
        pool -= _cost(name, parts[name], count) - before
    text = _block(parts)
    trim = [name for name in reversed(FLOW_ORDER) if parts.get(name)]
    while text and count(text) > budget_tokens:
        name = next(name for name in trim if parts[name])
        parts[name].pop()
        text = _block(parts)
    return text
