"""Output structure: flat leaves in, the model's own Python structure out.

In-process, a Deployed keeps torch's TreeSpec and rebuilds exactly what the model returned
(ModelOutput, namedtuple, dataclass). An artifact stores a JSON description built from plain
containers only, so loading never imports or constructs a type named in a file.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.errors import InferenceError

_NAME_OK = re.compile(r"[^A-Za-z0-9_.]")


def leaf_names(tree: Any) -> list[str]:
    """Stable, readable names for every leaf: 'logits', 'boxes.0', 'output'."""
    flat, _ = pytree.tree_flatten_with_path(tree)
    names: list[str] = []
    for path, _leaf in flat:
        parts = [_key_text(k) for k in path]
        name = _NAME_OK.sub("_", ".".join(parts)) or "output"
        while name in names:
            name += "_"
        names.append(name)
    return names


def _key_text(key: Any) -> str:
    for attribute in ("key", "idx", "name"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def describe(spec: pytree.TreeSpec) -> dict[str, Any]:
    """JSON-safe description of a TreeSpec using only dict, list, tuple and leaves."""
    if spec.is_leaf():
        return {"kind": "leaf"}
    children = [describe(c) for c in spec.children()]
    if spec.type is tuple or (isinstance(spec.type, type) and issubclass(spec.type, tuple)) or _is_namedtuple(spec):
        return {"kind": "tuple", "children": children}
    if spec.type is list:
        return {"kind": "list", "children": children}
    keys = _keys_of(spec)
    if keys is not None:
        return {"kind": "dict", "keys": keys, "children": children}
    return {"kind": "list", "children": children}


def _is_namedtuple(spec: pytree.TreeSpec) -> bool:
    """torch's pytree files every namedtuple under ``collections.namedtuple``, its class the context."""
    return isinstance(spec.context, type) and pytree.is_namedtuple_class(spec.context)


def render(description: dict[str, Any]) -> str:
    """A short text form of ``describe``'s output, for error messages: ``{'boxes': T, 'n': T}``."""
    kind = description["kind"]
    if kind == "leaf":
        return "T"
    parts = [render(c) for c in description["children"]]
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(description["keys"], parts, strict=True)) + "}"
    if kind == "tuple":
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return "[" + ", ".join(parts) + "]"


def _keys_of(spec: pytree.TreeSpec) -> list[str] | None:
    context = spec.context
    if isinstance(context, (list, tuple)) and all(isinstance(k, str) for k in context):
        return list(context)
    if isinstance(context, (list, tuple)) and len(context) == 2:  # (keys, ...) style contexts
        first = context[0]
        if isinstance(first, (list, tuple)) and all(isinstance(k, str) for k in first):
            return list(first)
    return None


def builder(description: dict[str, Any]) -> Callable[[list[Any]], Any]:
    """The function from leaves back to ``describe``'s structure, every decision taken once: it runs
    on each call of a model.

    A tuple or list whose children are all leaves (most models' outputs) is one slice.
    """
    next_leaf = itertools.count()

    def make(node: dict[str, Any]) -> Callable[[list[Any]], Any]:
        kind, children = node["kind"], node.get("children", [])
        if kind == "leaf":
            return operator.itemgetter(next(next_leaf))
        if kind != "dict" and children and all(c["kind"] == "leaf" for c in children):
            start = next(next_leaf)
            span = slice(start, start + len(children))
            for _ in children[1:]:
                next(next_leaf)
            return (lambda leaves: tuple(leaves[span])) if kind == "tuple" else (lambda leaves: leaves[span])
        parts = [make(c) for c in children]
        if kind == "dict":
            keys = node["keys"]
            return lambda leaves: dict(zip(keys, [part(leaves) for part in parts], strict=True))
        if kind == "tuple":
            return lambda leaves: tuple([part(leaves) for part in parts])
        return lambda leaves: [part(leaves) for part in parts]

    return make(description)


def has_unregistered_dataclass(tree: Any) -> bool:
    leaves = pytree.tree_leaves(tree)
    return any(dataclasses.is_dataclass(leaf) and not isinstance(leaf, type) for leaf in leaves)


def dataclasses_to_dicts(tree: Any) -> Any:
    """Turn dataclasses that pytree does not know into dicts, so torch.export can flatten them."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return {f.name: dataclasses_to_dicts(getattr(tree, f.name)) for f in dataclasses.fields(tree)}
    if isinstance(tree, dict):
        return {k: dataclasses_to_dicts(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return type(tree)(dataclasses_to_dicts(v) for v in tree)
    return tree


def dicts_to_dataclasses(template: Any, plain: Any) -> Any:
    """Inverse of dataclasses_to_dicts, guided by the eager output's types."""
    if dataclasses.is_dataclass(template) and not isinstance(template, type):
        values = {
            f.name: dicts_to_dataclasses(getattr(template, f.name), plain[f.name])
            for f in dataclasses.fields(template)
        }
        return type(template)(**values)
    if isinstance(template, dict) and isinstance(plain, dict):
        return {k: dicts_to_dataclasses(template[k], plain[k]) for k in template}
    if isinstance(template, (list, tuple)) and not hasattr(template, "_fields"):
        return type(template)(dicts_to_dataclasses(t, p) for t, p in zip(template, plain, strict=True))
    return plain


def join_images(results: Sequence[Any], plan: dict[str, Any]) -> Any:
    """Per-image results into the whole batch's, by the plan a per-image capture recorded
    (``fxdeploy.capture.per_image.join_plan``): lists over images concatenate, batched tensors
    concatenate on dim 0, everything else is the same for every image."""
    first = results[0]
    kind = plan["kind"]
    if kind == "cat":
        shapes = {tuple(r.shape[1:]) for r in results}
        if len(shapes) > 1:
            raise InferenceError(
                f"the per-image results of an output have other shapes ({sorted(shapes)}), where the example's "
                "images gave one: the model sizes that output across the batch (pad_sequence, a batch-wide max), "
                "which no per-image run can give. Lower it with a static batch, or return the images' results as a list"
            )
        return torch.cat(list(results), 0)
    if kind == "same":
        return first
    if kind == "concat":
        joined = [item for result in results for item in result]
        return tuple(joined) if isinstance(first, tuple) else joined
    if isinstance(first, Mapping):
        keys = list(first)
        pairs = zip(keys, plan["items"], strict=True)
        return type(first)((k, join_images([r[k] for r in results], p)) for k, p in pairs)
    items = [join_images([r[i] for r in results], p) for i, p in enumerate(plan["items"])]
    return type(first)(*items) if pytree.is_namedtuple_instance(first) else type(first)(items)
