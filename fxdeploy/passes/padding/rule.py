"""A padding rule: a ``check`` that says why a node does not match (None when it does) and a
``replace`` that rewrites the matched node into its padded form, at the node's place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fxdeploy.passes.padding.rows import PaddedRows

Node = torch.fx.Node


class CompactionError(ValueError):
    """A data-dependent selection whose padded form would not equal eager; the message says where."""


@dataclass(frozen=True)
class Rule:
    name: str
    check: Callable[[Node, PaddedRows], str | None]
    """None when the rule applies to the node, else why it does not."""
    replace: Callable[[torch.fx.GraphModule, Node, PaddedRows], None]
    """Rewrite the node; raises ``CompactionError`` where the padded form cannot equal eager."""


def replace_node(node: Node, new: Node) -> None:
    """Swap ``new`` in for ``node``, keeping the old fake value until the pass refreshes shapes."""
    new.meta["val"] = node.meta["val"]
    node.replace_all_uses_with(new)
    node.graph.erase_node(node)


def arg(node: Node, index: int, name: str, default: object) -> object:
    """A positional-or-keyword argument of an aten call."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)
