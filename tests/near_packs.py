"""Rule packs the similarity tests share (their texts, so a test can vary them)."""

from __future__ import annotations


def merge_or_add(pack: str, min_cosine: float) -> str:
    """A nightly pack: an episode updates the fact nearest in meaning (``near``, top 1,
    cosine at least ``min_cosine``, the cosine as the new confidence), or else adds its
    content as a new fact (subject and object the content, predicate ``said``)."""
    near = f"near: {{top_k: 1, min_cosine: {min_cosine}, cosine: cos}}"
    return f"""\
ir_version: 1
pack: {pack}
version: "1"
defaults:
  cadence: {{cron: "0 3 * * *"}}
rules:
  - id: merge
    priority: 10
    when:
      - episode: {{content: {{bind: c}}}}
      - fact: {{as: twin, predicate: said, {near}}}
    emit:
      kind: update
      replaces: [twin]
      subject: "{{c}}"
      predicate: said
      object: "{{c}}"
      confidence: {{from: cos}}
      sources: [twin]
  - id: add
    when:
      - episode: {{content: {{bind: c}}}}
      - not: {{predicate: said, near: {{top_k: 1, min_cosine: {min_cosine}}}}}
    emit: {{kind: add, subject: "{{c}}", predicate: said, object: "{{c}}"}}
"""
