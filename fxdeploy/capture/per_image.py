"""Models that loop over the batch in Python: capture one image, run a batch image by image.

torch.export cannot hold a Python loop over a dynamic batch (``for i in range(x.shape[0])``,
``model(list(images.unbind(0)))``): it specializes the batch to the example's size. Detection
libraries write their postprocessing that way (torchvision, Ultralytics). When every tensor input
has the same dynamic dim 0 and capture specializes it, fxdeploy captures one image (the batch
static at 1, the inputs' other dynamic dims, such as height and width, kept dynamic), and the
deployed model runs each image of a call through the engine, then joins the per-image results
into what eager returns for the whole batch. Where the engine takes a batch, the
per-image graph is vectorized first (``fxdeploy.capture.vectorize``): one engine call gives every
image's results, which join the same way.

How results join is data in the manifest (``join``), found by running the model eagerly on one
image and on two: a list that doubles is a list over images (concatenated), a tensor whose dim 0
doubles is batched (concatenated on dim 0), anything else must be the same for every image: equal
in value for one image and for two different ones, or the capture is refused naming that output
(a value computed from the whole batch).
``fxdeploy.artifact.structure.join_images`` applies the plan on the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import structure
from fxdeploy.artifact.dims import INT_MAX, finite_or
from fxdeploy.errors import CaptureError


@dataclass(frozen=True)
class BatchDim:
    """The dynamic batch a per-image capture stands for: dim 0 of every tensor input.
    ``rest``: the inputs' other dynamic dims (RT-DETR's height and width), which one image keeps."""

    name: str
    min: int
    max: int
    rest: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.name, "min": self.min, "max": self.max}


def batch_dim(export_shapes: Any, flat_inputs: list[torch.Tensor]) -> BatchDim | None:
    """The dim named on dim 0 of every tensor input (and nowhere else), or None."""
    if export_shapes is None:
        return None
    is_mapping = isinstance(export_shapes, Mapping)
    specs = list(export_shapes.values() if is_mapping else export_shapes)
    if len(specs) != len(flat_inputs) or not flat_inputs:
        return None
    firsts = set()
    for spec in specs:
        if not isinstance(spec, Mapping) or 0 not in spec or spec[0] is None:
            return None
        firsts.add(spec[0])
    if len(firsts) != 1:
        return None
    dim = firsts.pop()
    if not hasattr(dim, "__name__") or hasattr(dim, "root"):
        return None  # a derived dim (2 * batch) is no plain batch
    rests = [{d: s for d, s in spec.items() if d != 0 and s is not None} or None for spec in specs]
    if any(_names(s, dim.__name__) for rest in rests for s in (rest or {}).values()):
        return None  # the batch's size is also another dim's
    rest = None
    if any(r is not None for r in rests):
        rest = dict(zip(export_shapes, rests, strict=True)) if is_mapping else type(export_shapes)(rests)
    low, high = finite_or(getattr(dim, "min", 1), 1), finite_or(getattr(dim, "max", INT_MAX), INT_MAX)
    return BatchDim(dim.__name__, low, high, rest)


def _names(spec: Any, name: str) -> bool:
    """True when the dim ``spec`` is ``name`` or derived from it."""
    return getattr(getattr(spec, "root", spec), "__name__", None) == name


def specialized(exc: BaseException, name: str) -> bool:
    """True when torch.export refused because the model's code fixed the batch dim ``name``."""
    text = str(exc)
    return f"You marked {name} as dynamic but your code specialized it" in text


def take_images(tree: Any, start: int, stop: int) -> Any:
    """The same inputs with every tensor cut to images [start, stop) on dim 0."""
    return pytree.tree_map(lambda x: x[start:stop] if isinstance(x, torch.Tensor) else x, tree)


def join_plan(one: Any, two: Any, where: str = "output", second: Any = None) -> dict[str, Any]:
    """How per-image results join, from eager's results on one image, on two, and on the second of
    the two alone (``second``; None: not run)."""
    if isinstance(one, torch.Tensor) and isinstance(two, torch.Tensor):
        doubled = two.dim() == one.dim() and two.shape[0] == 2 * one.shape[0] and two.shape[1:] == one.shape[1:]
        if one.dim() and doubled:
            if isinstance(second, torch.Tensor) and second.shape != one.shape:
                raise JoinError(
                    f"{where}: each image alone gives its own shape (the first {tuple(one.shape)}, the second "
                    f"{tuple(second.shape)}), the two together {tuple(two.shape)}: the model pads or cuts its "
                    "images to one size across the batch (pad_sequence, a batch-wide max), which no per-image run "
                    "can give. Return the images' results as a list, or make the batch dim static"
                )
            return {"kind": "cat"}
        if one.shape == two.shape and torch.equal(one, two):
            return {"kind": "same"}
        if one.shape == two.shape:
            raise JoinError(
                f"{where}: a tensor of the same shape for one image and for two ({tuple(one.shape)}) but other "
                "values: it is computed from the whole batch, so no per-image run can give it. Return it per "
                "image (a list over the images, or a tensor whose dim 0 is the batch), or make the batch dim static"
            )
    elif isinstance(one, (list, tuple)) and isinstance(two, (list, tuple)) and type(one) is type(two):
        if len(two) == 2 * len(one) and len(one) > 0:
            return {"kind": "concat"}
        if len(two) == len(one):
            pairs = enumerate(zip(one, two, strict=True))
            seconds = second if isinstance(second, (list, tuple)) and len(second) == len(one) else [None] * len(one)
            return {"kind": "items", "items": [join_plan(a, b, f"{where}[{i}]", c)
                                               for (i, (a, b)), c in zip(pairs, seconds, strict=True)]}
    elif isinstance(one, Mapping) and isinstance(two, Mapping) and list(one) == list(two):
        items = [join_plan(one[k], two[k], f"{where}[{k!r}]", second.get(k) if isinstance(second, Mapping) else None)
                 for k in one]
        return {"kind": "items", "keys": [str(k) for k in one], "items": items}
    elif not isinstance(one, (torch.Tensor, list, tuple, Mapping)) and one == two:
        return {"kind": "same"}
    raise JoinError(
        f"{where}: the model's result for two images is not the result for one image repeated "
        f"(one image: {_brief(one)}, two: {_brief(two)}), so fxdeploy cannot run the batch image by "
        "image. Make the batch dim static, or return per-image lists or batched tensors"
    )


class JoinError(CaptureError):
    """A per-image model's output that no per-image run can give (it depends on the whole batch)."""


def _brief(value: Any) -> str:
    value = structure.dataclasses_to_dicts(value)
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, Mapping):
        return f"dict with keys {list(value)}"
    return repr(value)[:40]
