"""A pack's ``entities:`` list: validated with positions, carried in the IR, left out of the
pack hash when absent, and registered in a partition idempotently (both backends)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from e2e_helpers import DEFAULT
from packs_helpers import first_issue

from stargraph_mem.compiler.pack import compile_file, compile_text
from stargraph_mem.engine.entities import register_pack_entities
from stargraph_mem.errors import EntityError, IRError
from stargraph_mem.ir.models import EntityDecl
from stargraph_mem.stores import Partition
from stargraph_mem.stores.database import open_database

BASE = DEFAULT.read_text()
ENTITIES = """\
entities:
  - name: Berlin
    aliases: [Berlin DE, BER]
    type: place
  - {name: Zoë, aliases: [Zoe Smith], type: person}
  - name: stargraph
"""
P = Partition("alice", "rag")


def test_entities_are_carried_in_the_ir() -> None:
    pack = compile_text(BASE + ENTITIES).pack
    assert pack.entities == [
        EntityDecl(name="Berlin", aliases=["Berlin DE", "BER"], type="place"),
        EntityDecl(name="Zoë", aliases=["Zoe Smith"], type="person"),
        EntityDecl(name="stargraph", aliases=[], type="concept"),
    ]
    dumped = pack.model_dump(mode="json")
    assert dumped["entities"][0] == {
        "name": "Berlin",
        "aliases": ["Berlin DE", "BER"],
        "type": "place",
    }


def test_a_pack_without_entities_keeps_its_hash() -> None:
    plain = compile_file(DEFAULT)
    assert "entities" not in plain.pack.model_dump(mode="json", by_alias=True)
    assert compile_text(BASE + "entities: []\n").sha256 == plain.sha256
    assert compile_text(BASE + ENTITIES).sha256 != plain.sha256


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "entities:\n  - {name: Berlin, aliases: [BER], kind: place}\n",
            "rules/x.yaml:118:36: entities[0].kind: unknown field 'kind'",
        ),
        (
            "entities:\n  - {name: Berlin, type: city}\n",
            "rules/x.yaml:118:20: entities[0].type: expected 'person', 'project', "
            "'organization', 'place', 'concept' or 'tool'",
        ),
        (
            "entities:\n  - {aliases: [BER]}\n",
            "rules/x.yaml:118:5: entities[0]: missing required field 'name'",
        ),
        (
            "entities:\n  - {name: '   '}\n",
            "rules/x.yaml:118:12: entities[0].name: an entity name needs a character other "
            "than whitespace",
        ),
        (
            "entities:\n  - {name: Berlin}\n  - {name: Munich, aliases: [MUC, BERLIN]}\n",
            "rules/x.yaml:119:35: entities[1].aliases[1]: 'BERLIN' already names the entity "
            "'Berlin' (entities[0]): a name or alias names one entity",
        ),
        (
            "entities:\n  - {name: Zoë}\n  - {name: '  ZOE '}\n",
            "rules/x.yaml:119:6: entities[1].name: '  ZOE ' already names the entity 'Zoë' "
            "(entities[0]): a name or alias names one entity",
        ),
        ("entities: {name: Berlin}\n", "rules/x.yaml:117:1: entities: expected a list"),
        (
            f"entities:\n  - {{name: {'x' * 300}}}\n",
            "rules/x.yaml:118:6: entities[0].name: string should have at most 256 characters",
        ),
        (
            'entities:\n  - {name: "a\\0b"}\n',
            "the character U+0000 cannot be used in a rule pack",
        ),
    ],
)
def test_bad_entities_are_refused_with_their_place(extra: str, message: str) -> None:
    found = first_issue(BASE + extra)
    assert message in found, found
    with pytest.raises(IRError):
        compile_text(BASE + extra, "rules/x.yaml")


async def test_pack_entities_are_registered_idempotently(
    new_location: Callable[[], str],
) -> None:
    compiled = compile_text(BASE + ENTITIES)
    async with open_database(new_location()) as db:
        first = await register_pack_entities(db.entities, P, compiled)
        assert [e.canonical_name for e in first] == ["Berlin", "Zoë", "stargraph"]
        before = await db.entities.entities(P)
        again = await register_pack_entities(db.entities, P.key, compiled.pack)
        assert again == first and await db.entities.entities(P) == before
        found = await db.entities.resolve(P, "zoe smith")
        assert found is not None and found.type == "person"
        # a program's alias that clashes with the pack's is refused, naming both
        await db.entities.define(P, "Bern", aliases=["Bärn"])
        clash = compile_text(BASE + "entities:\n  - {name: Berlin, aliases: [BARN]}\n")
        with pytest.raises(
            EntityError, match="alias 'BARN' of 'Berlin' already names the entity 'Bern'"
        ):
            await register_pack_entities(db.entities, P, clash)
        kept = [e for e in await db.entities.entities(P) if e.canonical_name != "Bern"]
        assert kept == before
        berlin = await db.entities.resolve(P, "berlin")
        assert berlin is not None and berlin.aliases == ("Berlin DE", "BER")
