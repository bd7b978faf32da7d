"""structure: an output tree described in JSON (manifest) and rebuilt from the engine's leaves."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import pytest
from torch.utils import _pytree as pytree

from fxdeploy.artifact import structure

TREES: list[Any] = [
    (1, 2, 3), [1, (2, 3), {"a": 4, "b": [5, 6]}], (), [], {"x": ()}, 7, ([],), {"a": 1}, ((1,),),
    [[1, 2], [3]], {"boxes": [1, 2], "n": (3,)}, ((), 1, []),
]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_rebuild_inverts_flatten(tree: Any) -> None:
    leaves, spec = pytree.tree_flatten(tree)
    description = structure.describe(spec)
    built = structure.builder(description)
    for _ in range(2):  # the builder is reused on every call
        got = built(leaves)
        assert got == tree and type(got) is type(tree)
    renamed = [f"leaf{i}" for i in range(len(leaves))]
    assert pytree.tree_leaves(built(renamed)) == renamed  # leaves land in flatten order


def test_a_flat_tuple_is_rebuilt_fresh_each_call() -> None:
    built = structure.builder({"kind": "tuple", "children": [{"kind": "leaf"}] * 2})
    leaves = [1, 2]
    assert built(leaves) == (1, 2)
    result = built([3, 4])
    assert result == (3, 4) and built(leaves) == (1, 2)


Pair = namedtuple("Pair", "boxes counts")


def test_a_namedtuple_is_stored_as_a_tuple() -> None:
    """A loaded artifact constructs no type named in a file: a namedtuple comes back a tuple, not a list."""
    tree = Pair(1, [2, 3])
    leaves, spec = pytree.tree_flatten(tree)
    description = structure.describe(spec)
    assert description["kind"] == "tuple"
    got = structure.builder(description)(leaves)
    assert type(got) is tuple and got == (1, [2, 3])
