"""An artifact's input signature: the names, dtypes and shapes its manifest accepts, its named
dims' ranges and torch.export's guards. ``Signature.feeds`` turns a call's values into checked,
engine-ready tensors or raises an InputError that names the input, the expected and the actual.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fxdeploy.artifact import dims, guards
from fxdeploy.artifact.manifest import DTYPE_NAMES, Manifest
from fxdeploy.errors import InputError

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


class Signature:
    """What a call must give: ``inputs`` as (name, dtype, shape), a shape entry an int or a dim's
    name (``h``, ``32*h``); ``dims`` the root dims' ranges; ``per_image`` for an artifact whose
    engine takes one image of a batch (its guards then read a batch of 1)."""

    def __init__(self, manifest: Manifest) -> None:
        self.inputs = [(i["name"], DTYPES[i["dtype"]], i["shape"]) for i in manifest["inputs"]]
        self.names = [name for name, _, _ in self.inputs]
        self.dims = dict(manifest["dims"])
        self.guards = list(manifest.get("guards", []))
        self.per_image = manifest.get("per_image")
        if self.per_image is not None:  # the engine takes one image; a call takes a batch of them
            batch = self.per_image["dim"]
            self.inputs = [(name, dtype, [batch, *shape[1:]]) for name, dtype, shape in self.inputs]
            self.dims[batch] = {"min": self.per_image["min"], "max": self.per_image["max"]}
        self.accepted: tuple[torch.Size, ...] | None = None
        """The input shapes of the last call that passed every check: the same shapes again need no
        dim arithmetic, only the per-call facts (type, dtype, device, layout, grad, contiguity)."""

    def restrict(self, dims_: dict[str, dict[str, int]], guards_: list[str]) -> None:
        """Narrow the accepted ranges of ``dims_`` and replace the guards."""
        self.dims.update(dims_)
        self.guards = list(guards_)
        self.accepted = None

    def describe(self) -> str:
        return ", ".join(f"{n}: {_dt(d)}{_fmt(s)}" for n, d, s in self.inputs)

    def feeds(self, values: list[Any]) -> dict[str, torch.Tensor]:
        accepted = self.accepted
        if accepted is not None:
            feeds = _ready(self.inputs, accepted, values)
            if feeds is not None:
                return feeds
        seen: dict[str, tuple[int, str]] = {}
        feeds = {}
        for (name, dtype, shape), value in zip(self.inputs, values, strict=True):
            feeds[name] = self._check(name, dtype, shape, value, seen)
        self._check_guards(feeds)
        self.accepted = tuple(v.shape for v in feeds.values())
        return feeds

    def _check(
        self, name: str, dtype: torch.dtype, shape: list[int | str], value: Any,
        seen: dict[str, tuple[int, str]],
    ) -> torch.Tensor:
        if isinstance(value, np.ndarray):
            value = _from_numpy(name, dtype, value)
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input {name!r}: expected a tensor, got {type(value).__name__}")
        if value.layout != torch.strided or value.is_meta:
            kind = "meta" if value.is_meta else str(value.layout).removeprefix("torch.")
            raise InputError(f"input {name!r}: expected a dense tensor with data, got a {kind} tensor")
        if value.dtype != dtype:
            raise InputError(f"input {name!r}: expected dtype {_dt(dtype)}, got {_dt(value.dtype)}")
        if value.dim() != len(shape):
            raise InputError(
                f"input {name!r}: expected rank {len(shape)} (shape {_fmt(shape)}), "
                f"got rank {value.dim()} (shape {tuple(value.shape)})"
            )
        for axis, (want, got) in enumerate(zip(shape, value.shape, strict=True)):
            if isinstance(want, int):
                if want != got:
                    raise InputError(
                        f"input {name!r}: dim {axis} must be {want} (shape {_fmt(shape)}), got {got}"
                    )
                continue
            self._check_dim(name, axis, want, int(got), seen)
        if value.device.type != "cpu":
            value = value.cpu()
        if value.requires_grad:
            value = value.detach()
        return value if value.is_contiguous() else value.contiguous()

    def _check_guards(self, feeds: dict[str, torch.Tensor]) -> None:
        """torch.export's guards on the input sizes (fxdeploy.artifact.guards); a per-image
        artifact's graph saw one image, so its guards read a batch of 1."""
        if not self.guards:
            return
        one = self.per_image is not None
        shapes = {name: ((1, *v.shape[1:]) if one else tuple(v.shape)) for name, v in feeds.items()}
        broken = guards.violated(self.guards, shapes)
        if broken is not None:
            given = ", ".join(f"{name} {list(v.shape)}" for name, v in feeds.items())
            raise InputError(
                f"inputs {given}: the artifact holds only where {broken} (a guard torch.export made where the "
                "model's code branches on its input sizes, recorded in the manifest as 'guards'); give inputs "
                "for which it is true, or lower again with an example of these sizes"
            )

    def _check_dim(
        self, name: str, axis: int, dim: str, got: int, seen: dict[str, tuple[int, str]]
    ) -> None:
        """``dim`` is a root dim (``h``) or one derived from it (``32*h``); the root is checked."""
        root, value = dim, got
        if not dim.isidentifier():
            root = dims.parse(dim)[1]
            value = dims.root_value(dim, got)
            if value is None:
                raise InputError(f"input {name!r}: dim {axis} must be {dim} for an integer {root}, got {got}")
        label = dim if root == dim else f"{dim}, so {root} = {value}"
        bounds = self.dims.get(root)
        if bounds is not None and not bounds["min"] <= value <= bounds["max"]:
            span = f"[{bounds['min']}, {bounds['max']}]"
            raise InputError(
                f"input {name!r}: dim {axis} ({dim}) must be in {span}, got {got}" if root == dim
                else f"input {name!r}: dim {axis} ({dim}) is {got}, so {root} = {value}; {root} must be in {span}"
            )
        if root in seen and seen[root][0] != value:
            raise InputError(
                f"input {name!r}: dim {axis} ({label}) is {got}, but input {seen[root][1]!r} has "
                f"{root} = {seen[root][0]}; they must be equal"
            )
        seen[root] = (value, name)


def _ready(
    inputs: list[tuple[str, torch.dtype, list[int | str]]], shapes: tuple[torch.Size, ...], values: list[Any]
) -> dict[str, torch.Tensor] | None:
    """The feeds when every value is a dense CPU tensor the engine can take as it is, with the
    expected dtype and an accepted shape; otherwise None, and ``_check`` decides (and explains)."""
    feeds = {}
    for (name, dtype, _), shape, value in zip(inputs, shapes, values, strict=True):
        if not (
            type(value) is torch.Tensor and value.dtype is dtype and value.shape == shape
            and value.is_cpu and value.layout is torch.strided
            and not value.requires_grad and value.is_contiguous()
        ):
            return None
        feeds[name] = value
    return feeds


def _from_numpy(name: str, dtype: torch.dtype, array: np.ndarray) -> torch.Tensor:
    """torch shares only native-endian numeric arrays: others are the caller's dtype error.

    A copy is made where torch could not share the buffer as it is (non-contiguous, read-only);
    np.ascontiguousarray is avoided because it turns a 0-d array into a 1-d one.
    """
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = array.copy(order="C")
    try:
        return torch.from_numpy(array)
    except (TypeError, ValueError):
        raise InputError(
            f"input {name!r}: expected dtype {_dt(dtype)}, got a numpy array of dtype "
            f"{array.dtype.str!r}, which torch cannot read"
        ) from None


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fmt(shape: list[int | str]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"
