"""What a query asks for (its intent) and how much recall it deserves (its complexity).

Intents route the graph strategy: ``why`` follows lineage and supersession (what made a
fact), ``when`` the temporal chain, ``who`` and ``what`` the entities the query names, and
``general`` no graph strategy at all (full-text and vectors only).

Two classifiers share one protocol. :class:`KeywordIntentClassifier` reads English cue
words with word-boundary regexes; :class:`EmbeddingIntentClassifier` compares the query's
vector with built-in exemplar questions and falls back to the keyword classifier when no
exemplar is similar enough. :func:`classifier_for` picks one for an embedder: the built-in
hashing embedder's vectors reflect spelling, not meaning, so it gets the keyword classifier.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, get_args

import numpy as np
import numpy.typing as npt

from stargraph_mem.embedding import Embedder, Matrix, identity, top_k
from stargraph_mem.errors import RecallError
from stargraph_mem.model.base import FrozenModel

__all__ = [
    "COMPLEXITY_PARAMS",
    "EXEMPLARS",
    "GRAPH_STRATEGY",
    "HASHING_EMBEDDER_NAME",
    "INTENTS",
    "Complexity",
    "ComplexityParams",
    "EmbeddingIntentClassifier",
    "GraphStrategy",
    "Intent",
    "IntentClassifier",
    "IntentCue",
    "IntentDecision",
    "KeywordIntentClassifier",
    "classifier_for",
    "classify_complexity",
    "params_for",
]

Intent = Literal["why", "when", "who", "what", "general"]
INTENTS: Final[tuple[Intent, ...]] = get_args(Intent)
"""The intents in precedence order (the keyword classifier's tie-break)."""

GraphStrategy = Literal["lineage", "temporal", "entity"]
GRAPH_STRATEGY: Final[Mapping[Intent, GraphStrategy | None]] = {
    "why": "lineage",
    "when": "temporal",
    "who": "entity",
    "what": "entity",
    "general": None,
}
"""The graph strategy each intent routes to (``None``: full-text and vectors only)."""

HASHING_EMBEDDER_NAME: Final = "stargraph-hash"
"""The built-in embedder's name: :func:`classifier_for` gives it the keyword classifier."""


class IntentClassifier(Protocol):
    """Anything that names a query's intent."""

    def classify(self, query: str) -> Intent:
        """The intent of ``query`` (``general`` when nothing points elsewhere)."""
        ...


@dataclass(frozen=True, slots=True)
class IntentCue:
    """One cue the keyword classifier found: where it starts, what it reads, its intent."""

    start: int
    text: str
    intent: Intent


class IntentDecision(FrozenModel):
    """An intent and how it was decided: by an exemplar's ``similarity`` (``method``
    ``embedding``) or by cue words (``keyword``; ``similarity`` then holds the best
    exemplar's score that fell below the threshold, if an embedder was asked)."""

    intent: Intent
    method: Literal["embedding", "keyword"]
    similarity: float | None = None
    exemplar: str | None = None
    embedder: str | None = None


# --- keyword classifier ------------------------------------------------------------------

_CUES: Final[tuple[tuple[Intent, str], ...]] = (
    (
        "why",
        r"why|how come|for what reason|what (?:was|is|were) the reasons?|reasons? (?:for|why)"
        r"|what (?:caused|causes|led to|leads to|made|makes|triggered|prompted|motivated)"
        r"|caused? (?:of|by)|because of what|explain why|due to what",
    ),
    (
        "when",
        r"when|since when|what (?:time|date|day|year|month|week)|which (?:day|date|year|month)"
        r"|how long ago|at what point|how recently|yesterday|today|tonight|this morning"
        r"|last (?:week|month|year|night|time)|(?:a|one|two|three|few) (?:days?|weeks?|months?)"
        r" ago|earlier|recently|timeline|in what order|before or after",
    ),
    (
        "who",
        r"who|whom|whose|who's|which (?:person|people|colleague|friend|team)"
        r"|what (?:person|people)|name of the person",
    ),
    (
        "what",
        r"what|what's|which|tell me about|describe|details (?:of|about|on)"
        r"|information (?:on|about)|anything about|know about",
    ),
)
_PATTERNS: Final = tuple(
    (intent, re.compile(rf"\b(?:{body})\b", re.IGNORECASE)) for intent, body in _CUES
)
_RANK: Final = {intent: index for index, intent in enumerate(INTENTS)}


class KeywordIntentClassifier:
    """English cue words, matched on word boundaries, case-insensitively.

    Precedence: the cue that starts **earliest** in the query wins (the question's head:
    "who told me why …" is a ``who`` question); cues starting at the same place are
    ordered ``why`` > ``when`` > ``who`` > ``what``, so "what caused …" is ``why``, "what
    time …" ``when`` and "which person …" ``who``. No cue: ``general``.
    """

    def cues(self, query: str) -> list[IntentCue]:
        """Every cue in ``query``, in the order the precedence rule reads them."""
        found = [
            IntentCue(start=match.start(), text=match.group(0), intent=intent)
            for intent, pattern in _PATTERNS
            for match in pattern.finditer(query)
        ]
        found.sort(key=lambda cue: (cue.start, _RANK[cue.intent], -len(cue.text)))
        kept: list[IntentCue] = []
        for cue in found:  # "what" inside "what caused" is part of the why cue, not its own
            if not any(
                k.start <= cue.start and cue.start + len(cue.text) <= k.start + len(k.text)
                for k in kept
            ):
                kept.append(cue)
        return kept

    def classify(self, query: str) -> Intent:
        cues = self.cues(query)
        return cues[0].intent if cues else "general"

    def decide(self, query: str) -> IntentDecision:
        """:meth:`classify` with its method named (``keyword``)."""
        return IntentDecision(intent=self.classify(query), method="keyword")


# --- embedding classifier ----------------------------------------------------------------

EXEMPLARS: Final[Mapping[Intent, tuple[str, ...]]] = {
    "why": (
        "Why did we switch to the new database?",
        "Why was the meeting moved?",
        "What was the reason for cancelling the trip?",
        "What caused the outage on Friday?",
        "How come the invoice was paid twice?",
        "Why does she prefer tea over coffee?",
        "What led to the decision to hire a contractor?",
        "Explain why the build keeps failing.",
        "For what reason did he leave the project?",
        "Why did I stop using that library?",
        "What made them change the release date?",
        "Why is this fact believed?",
        "Почему перенесли встречу?",
        "По какой причине отменили поездку?",
        "Что привело к сбою сервера?",
        "Зачем мы сменили базу данных?",
    ),
    "when": (
        "When did I last talk to the landlord?",
        "When is the dentist appointment?",
        "What date did we sign the contract?",
        "How long ago did the package ship?",
        "When did the team adopt the new process?",
        "What time does the standup start?",
        "Which day did she arrive in Berlin?",
        "What happened last week?",
        "When was the password last changed?",
        "In what order did these events happen?",
        "What did we discuss yesterday?",
        "Since when has he been working remotely?",
        "Когда я последний раз звонил маме?",
        "Какого числа подписали договор?",
        "Что было на прошлой неделе?",
        "Во сколько начинается встреча?",
    ),
    "who": (
        "Who is my manager?",
        "Who recommended this restaurant?",
        "Who did I meet at the conference?",
        "Whose laptop was broken?",
        "Who is responsible for the billing service?",
        "Which colleague speaks Japanese?",
        "Who sent me the contract?",
        "Who is Maria?",
        "Which person asked about the refund?",
        "Who was at the dinner on Saturday?",
        "To whom did I lend the book?",
        "Who owns the staging server?",
        "Кто мой руководитель?",
        "Кто посоветовал этот ресторан?",
        "С кем я встречался на конференции?",
        "Чей ноутбук сломался?",
    ),
    "what": (
        "What is my favourite programming language?",
        "What does the billing service do?",
        "Tell me about the Acme project.",
        "What are my dietary restrictions?",
        "Which editor do I use?",
        "What is the Wi-Fi password at the office?",
        "Describe the deployment setup.",
        "What do I know about the new apartment?",
        "What car does my brother drive?",
        "Which plan am I subscribed to?",
        "What is the name of my cat?",
        "What are the details of the insurance policy?",
        "Что такое проект Acme?",
        "Расскажи про новую квартиру.",
        "Какой у меня любимый язык программирования?",
        "Какая машина у брата?",
    ),
    "general": (
        "Remind me of anything relevant.",
        "Summarize what you remember.",
        "Anything I should keep in mind?",
        "Show me my notes.",
        "Help me plan the week.",
        "Let's continue where we left off.",
        "Give me an overview of recent memories.",
        "Any updates?",
        "Write a short reply to the email.",
        "Draft a plan for tomorrow.",
        "Is there something I forgot?",
        "Go on.",
        "Напомни что-нибудь важное.",
        "Что ты помнишь?",
        "Продолжим с того места, где остановились.",
        "Есть новости?",
    ),
}
"""Exemplar questions per intent (English, a few Russian): the embedding classifier picks
the intent of the exemplar most similar to the query."""


_MATRICES: dict[tuple[str, tuple[str, ...]], Matrix] = {}
_MATRICES_KEPT: Final = 8


def _exemplar_matrix(embedder: Embedder, key: str, texts: tuple[str, ...]) -> Matrix:
    """The exemplars' vectors, embedded once per embedder identity (an identity promises
    the same vectors for the same texts), so a classifier per recall costs no embedding."""
    found = _MATRICES.get((key, texts))
    if found is not None:
        return found
    matrix = (
        np.asarray(embedder.embed(list(texts)), dtype=np.float32)
        if texts
        else np.zeros((0, embedder.dimension), dtype=np.float32)
    )
    if matrix.shape != (len(texts), embedder.dimension):
        raise RecallError(
            f"embedder {key} returned shape {matrix.shape} for {len(texts)} exemplars "
            f"(expected {(len(texts), embedder.dimension)})",
            parameter="embedder",
            value=key,
        )
    if len(_MATRICES) >= _MATRICES_KEPT:
        _MATRICES.pop(next(iter(_MATRICES)), None)
    matrix.setflags(write=False)
    _MATRICES[(key, texts)] = matrix
    return matrix


class EmbeddingIntentClassifier:
    """Cosine of the query against exemplar questions embedded once, at construction.

    The most similar exemplar names the intent when its (rounded) cosine reaches
    ``threshold``; ties go to the earlier intent in :data:`INTENTS`, then the earlier
    exemplar. Below the threshold the keyword classifier decides.
    """

    def __init__(
        self,
        embedder: Embedder,
        threshold: float = 0.45,
        *,
        exemplars: Mapping[Intent, Sequence[str]] | None = None,
        fallback: KeywordIntentClassifier | None = None,
    ) -> None:
        if isinstance(threshold, bool) or not (
            isinstance(threshold, int | float) and math.isfinite(threshold)
        ):
            raise RecallError(
                f"threshold: expected a finite number in [-1, 1], got {threshold!r}",
                parameter="threshold",
                value=threshold,
            )
        if not -1.0 <= threshold <= 1.0:
            raise RecallError(
                f"threshold: a cosine threshold lies in [-1, 1], got {threshold!r}",
                parameter="threshold",
                value=threshold,
            )
        table = EXEMPLARS if exemplars is None else exemplars
        unknown = sorted(set(table) - set(INTENTS))
        if unknown:
            raise RecallError(
                f"exemplars: unknown intents {unknown}; intents are {list(INTENTS)}",
                parameter="exemplars",
                value=unknown,
            )
        self.embedder = embedder
        self.threshold = float(threshold)
        self.fallback = fallback if fallback is not None else KeywordIntentClassifier()
        self._texts: list[str] = []
        self._ids: list[str] = []
        self._intents: dict[str, Intent] = {}
        for rank, intent in enumerate(INTENTS):
            for index, text in enumerate(table.get(intent, ())):
                key = f"{rank}:{index:06d}"
                self._ids.append(key)
                self._texts.append(text)
                self._intents[key] = intent
        self._by_id = dict(zip(self._ids, self._texts, strict=True))
        self._identity = identity(embedder)
        self._matrix = _exemplar_matrix(embedder, self._identity, tuple(self._texts))

    def decide(self, query: str, *, vector: npt.ArrayLike | None = None) -> IntentDecision:
        """The intent of ``query`` and how it was decided. ``vector`` is the query's
        embedding when the caller has it already (recall embeds the query once)."""
        row = self.embedder.embed([query])[0] if vector is None else np.asarray(vector)
        if row.shape != (self.embedder.dimension,):
            raise RecallError(
                f"vector: expected {self.embedder.dimension} floats for {self._identity}, "
                f"got shape {row.shape}",
                parameter="vector",
                value=row.shape,
            )
        best = top_k(self._matrix, self._ids, row, 1)
        if best and best[0][1] >= self.threshold:
            key, score = best[0]
            return IntentDecision(
                intent=self._intents[key],
                method="embedding",
                similarity=score,
                exemplar=self._by_id[key],
                embedder=self._identity,
            )
        return IntentDecision(
            intent=self.fallback.classify(query),
            method="keyword",
            similarity=best[0][1] if best else None,
            exemplar=self._by_id[best[0][0]] if best else None,
            embedder=self._identity,
        )

    def classify(self, query: str) -> Intent:
        return self.decide(query).intent


def classifier_for(
    embedder: Embedder | None, *, threshold: float = 0.45
) -> KeywordIntentClassifier | EmbeddingIntentClassifier:
    """The keyword classifier without an embedder or with the built-in hashing embedder
    (named :data:`HASHING_EMBEDDER_NAME`); the embedding classifier for any other."""
    if embedder is None or embedder.name == HASHING_EMBEDDER_NAME:
        return KeywordIntentClassifier()
    return EmbeddingIntentClassifier(embedder, threshold)


# --- complexity --------------------------------------------------------------------------

Complexity = Literal["simple", "complex"]


class ComplexityParams(FrozenModel):
    """What a complexity buys: hits kept, graph depth, context budget in tokens."""

    limit: int
    graph_depth: int
    budget_tokens: int


COMPLEXITY_PARAMS: Final[Mapping[Complexity, ComplexityParams]] = {
    "simple": ComplexityParams(limit=5, graph_depth=2, budget_tokens=1000),
    "complex": ComplexityParams(limit=20, graph_depth=4, budget_tokens=3000),
}

COMPLEX_WORDS: Final = 16
"""A query of more words than this is ``complex``."""

_COMPLEX_CUES: Final = re.compile(
    r"\b(?:compare|comparison|versus|vs|difference between|differences between"
    r"|relationship between|related to each other|history of|over time|timeline"
    r"|all (?:the )?(?:times|people|reasons|changes|facts)|every time|each time"
    r"|summari[sz]e|overview|list (?:all|every)|step by step)\b",
    re.IGNORECASE,
)
_WORD: Final = re.compile(r"\w+")
_QUESTION_WORD: Final = re.compile(
    r"\b(?:why|when|who|whom|whose|what|which|where|how)\b", re.IGNORECASE
)


def classify_complexity(query: str) -> Complexity:
    """``complex`` when any of these holds, else ``simple``:

    * more than :data:`COMPLEX_WORDS` words;
    * more than one question mark (several questions at once);
    * a cue for breadth: comparison ("compare", "versus", "difference between"),
      history ("history of", "over time", "timeline"), enumeration ("all the times",
      "every time", "list all") or summary ("summarize", "overview");
    * two or more different question words ("who … why", "when and where").
    """
    if len(_WORD.findall(query)) > COMPLEX_WORDS or query.count("?") > 1:
        return "complex"
    if _COMPLEX_CUES.search(query):
        return "complex"
    asked = {word.lower() for word in _QUESTION_WORD.findall(query)}
    return "complex" if len(asked) > 1 else "simple"


def params_for(complexity: Complexity) -> ComplexityParams:
    """The limit, graph depth and budget of ``complexity`` (simple: 5, 2, 1000;
    complex: 20, 4, 3000)."""
    return COMPLEXITY_PARAMS[complexity]
