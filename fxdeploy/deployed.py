"""Deployed: the model, callable as before, backed by an engine. Validation lives here, untimed."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from fxdeploy import artifact
from fxdeploy.artifact import structure
from fxdeploy.artifact.manifest import Manifest
from fxdeploy.artifact.signature import Signature
from fxdeploy.errors import FxDeployError, InferenceError, InputError, first_line
from fxdeploy.runtime.executor import Executor, Stats


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _keyword_names(input_tree: Any) -> list[str]:
    """The keyword inputs' names at capture, from the manifest's ``(args, kwargs)`` input tree."""
    children = input_tree.get("children") if isinstance(input_tree, dict) else None
    if not (isinstance(children, list) and len(children) == 2 and isinstance(children[1], dict)):
        return []
    keys = children[1].get("keys") if children[1].get("kind") == "dict" else None
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


class Deployed:
    """A lowered model. ``dep(*inputs)`` returns the model's structure; ``execute`` is dict to dict."""

    def __init__(
        self,
        executor: Executor,
        manifest: Manifest,
        directory: Path,
        *,
        keepalive: Any = None,
        out_spec: pytree.TreeSpec | None = None,
        dataclass_template: Any = None,
        unpacks: list[Callable[[Any], Any]] | None = None,
        report: Any = None,
    ) -> None:
        self.executor = executor
        self.manifest = manifest
        self.report = report
        self._directory = directory
        self._keepalive = keepalive  # the TemporaryDirectory holding files until save()
        if hasattr(keepalive, "cleanup"):  # removed with this object, not by the GC's warning finalizer
            weakref.finalize(self, keepalive.cleanup)
        self._out_spec = out_spec
        self._build = structure.builder(manifest["output_tree"]) if out_spec is None else None
        self._template = dataclass_template
        self._unpacks = list(unpacks or [])
        self._signature = Signature(manifest)
        self._names = self._signature.names
        self._per_image = self._signature.per_image
        # a per-image capture vectorized: the engine takes the batch, the host joins its images
        self._batched = self._per_image is not None and self._per_image.get("engine") == "batch"
        self._captured_keywords = _keyword_names(manifest.get("input_tree"))
        self._leaves = manifest["output_leaves"]
        plain = all(leaf["kind"] == "tensor" and "trim" not in leaf for leaf in self._leaves)
        self._plain_leaves = [leaf["name"] for leaf in self._leaves] if plain else None
        self._lock = None if executor.thread_safe else threading.Lock()

    @property
    def target(self) -> str:
        return self.manifest["target"]

    @property
    def stats(self) -> Stats:
        return self.executor.stats

    @property
    def input_names(self) -> list[str]:
        return list(self._names)

    @property
    def output_names(self) -> list[str]:
        return [o["name"] for o in self.manifest["outputs"]]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and all(type(a) is torch.Tensor for a in args):
            return self.call_flat(list(args))  # the common case, without a pytree walk
        return self.call_flat(self._flatten_call(args, kwargs))

    def _flatten_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Inputs in manifest order. Keyword inputs bind by name, in whatever order they come."""
        head = pytree.tree_leaves(args, is_leaf=_is_array)
        if not kwargs:
            return head
        rest = self._names[len(head):]
        if set(kwargs) == set(rest) and all(_is_array(v) or isinstance(v, torch.Tensor) for v in kwargs.values()):
            return [*head, *(kwargs[name] for name in rest)]
        captured = self._captured_keywords
        if set(kwargs) == set(captured):  # nested keyword inputs: flatten in the captured key order
            return [*head, *pytree.tree_leaves([kwargs[k] for k in captured], is_leaf=_is_array)]
        raise InputError(
            f"keyword inputs {sorted(kwargs)} do not match the model's: after {len(head)} positional "
            f"input(s) it expects {rest}" + (f" (captured with keywords {captured})" if captured else "")
        )

    def call_flat(self, flat: list[Any], *, unpack: bool = True) -> Any:
        """Inputs in manifest order; ``unpack=False`` stops before the substitutions' unpack."""
        if len(flat) != len(self._names):
            raise InputError(
                f"expected {len(self._names)} input(s) ({', '.join(self._names)}), got {len(flat)}"
            )
        feeds = self._signature.feeds(flat)
        device = _accelerator(flat)  # outputs go back to the device the inputs came from
        if self._per_image is None:
            return self._rebuild(_on(device, self._run(feeds)), unpack=unpack)
        # the join plan describes the tensor-only results, so images join before any unpack
        outputs = _split(self._run(feeds)) if self._batched else self._run_images(_images(feeds))
        results = [self._rebuild(_on(device, out), unpack=False) for out in outputs]
        return self._unpacked(structure.join_images(results, self._per_image["join"]), unpack)

    def execute(self, feeds: dict[str, Any]) -> dict[str, torch.Tensor]:
        if not isinstance(feeds, dict):
            raise InputError(f"execute() takes a dict of input name to tensor, got {type(feeds).__name__}")
        missing = [n for n in self._names if n not in feeds]
        unknown = sorted(set(feeds) - set(self._names), key=repr)  # keys need not be str, or comparable
        if missing or unknown:
            raise InputError(
                f"execute() inputs: expected names {self._names}; missing {missing}, unknown {unknown}"
            )
        checked = self._signature.feeds([feeds[n] for n in self._names])
        device = _accelerator([feeds[n] for n in self._names])
        if self._per_image is None or self._batched:
            return _on(device, self._run(checked))
        per_image = self._run_images(_images(checked))  # each output gains a batch dim
        return _on(device, {name: torch.stack([out[name] for out in per_image]) for name in per_image[0]})

    def save(self, directory: str | Path) -> Path:
        return artifact.save(self.manifest, self._directory, directory)

    def _run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self._guarded(self.executor.execute, feeds, feeds)

    def _run_images(self, images: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """A per-image artifact's images, which the executor may run several at once."""
        return self._guarded(self.executor.execute_images, images, images[0] if images else {})

    def _guarded(self, call: Callable[[Any], Any], arg: Any, feeds: dict[str, torch.Tensor]) -> Any:
        try:
            if self._lock is None:
                return call(arg)
            with self._lock:
                return call(arg)
        except FxDeployError:
            raise
        except Exception as exc:  # noqa: BLE001 - every runtime raises its own types
            shapes = {name: tuple(value.shape) for name, value in feeds.items()}
            raise InferenceError(
                f"{self.target}: the runtime failed on inputs {shapes}, which the manifest accepts: "
                f"{first_line(exc)}. Lower again with inputs of these shapes as the example, "
                "so that lower()'s checks run them, or give dynamic_shapes a range that leaves them out"
            ) from exc

    def restrict(self, dims_: dict[str, dict[str, int]], guards_: list[str]) -> None:
        """Narrow the accepted ranges of ``dims_`` and replace the guards, in the manifest too: for
        lower(), when a range it gave back fails its check (fxdeploy.parity.lower_check)."""
        for name, bounds in dims_.items():
            self.manifest["dims"][name] = bounds
        self.manifest["guards"] = list(guards_)
        self._signature.restrict(dims_, guards_)

    def _rebuild(self, outputs: dict[str, torch.Tensor], *, unpack: bool = True) -> Any:
        if self._plain_leaves is not None:  # every leaf a plain engine output: no per-leaf decisions
            leaves: list[Any] = [outputs[name] for name in self._plain_leaves]
        else:
            leaves = self._leaf_values(outputs)
        if self._build is not None:
            result = self._build(leaves)
        else:
            result = pytree.tree_unflatten(leaves, self._out_spec)
            if self._template is not None:
                result = structure.dicts_to_dataclasses(self._template, result)
        return self._unpacked(result, unpack)

    def unpack(self, result: Any) -> Any:
        """A tensor-only result (``call_flat(..., unpack=False)``) as the model returns it: the
        substitutions' unpacks applied, where there are any."""
        return self._unpacked(result, True)

    def _unpacked(self, result: Any, unpack: bool) -> Any:
        for unpacker in self._unpacks if unpack else ():
            result = unpacker(result)
        return result

    def _leaf_values(self, outputs: dict[str, torch.Tensor]) -> list[Any]:
        leaves: list[Any] = []
        for leaf in self._leaves:
            if leaf["kind"] == "hidden":
                continue
            if "trim" in leaf:
                dim, count = leaf["trim"]["dim"], int(outputs[leaf["trim"]["count"]].reshape(-1)[0])
                leaves.append(outputs[leaf["name"]].narrow(dim, 0, count))
            elif leaf["kind"] == "constant":
                leaves.append(leaf["value"])
            elif leaf["kind"] == "scalar":
                cast = {"int": int, "float": float, "bool": bool}[leaf["type"]]
                leaves.append(cast(outputs[leaf["name"]].item()))
            else:
                leaves.append(outputs[leaf["name"]])
        return leaves

    def __repr__(self) -> str:
        inputs = self._signature.describe()
        return f"Deployed(target={self.target!r}, inputs=[{inputs}], outputs={self.output_names})"


def _split(outputs: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """A batched engine's outputs as each image's, as a per-image engine gives them."""
    count = next(iter(outputs.values())).shape[0]
    return [{name: value[i] for name, value in outputs.items()} for i in range(count)]


def _images(feeds: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """A per-image artifact's feeds, one image at a time (views; contiguous, as the batch is)."""
    count = next(iter(feeds.values())).shape[0]
    return [{name: value[i : i + 1] for name, value in feeds.items()} for i in range(count)]


def _accelerator(flat: list[Any]) -> torch.device | None:
    """The device of the call's first tensor not on the CPU (the engine ran on CPU copies), or None."""
    return next((v.device for v in flat if isinstance(v, torch.Tensor) and v.device.type != "cpu"), None)


def _on(device: torch.device | None, outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return outputs if device is None else {name: t.to(device) for name, t in outputs.items()}
