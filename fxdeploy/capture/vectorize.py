"""One engine call per batch: a per-image graph vectorized over a new leading batch dim.

A model that loops over its images in Python is captured for one image (``capture.per_image``).
After the passes, that graph is static-shaped (mask-don't-compact), so it can be batched
mechanically: ``torch.func.vmap`` runs it over a new leading dim, and torch.export traces the
result with that dim dynamic. Each image's inputs reach the graph as a batch of one, as captured.

vmap's own batching rules cover most aten ops; what a symbolic batch needs beyond them:
- rules for ops whose built-in rule reads the batch size as a number (torch.export would then
  fix the batch), and for ops with no rule (``fxdeploy.capture.batch_rules``);
- an op with no batching rule at all runs its decomposition, where torch has one;
- ``fxdeploy::multiclass_nms`` is batched by definition (``fxdeploy.ops.library``).

vmap's per-image fallback loop is turned off while tracing, so an op that none of this covers is
an ``Unbatchable`` naming it, and the caller keeps the per-image path.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch._C import _functorch as functorch
from torch._decomp import decomposition_table
from torch.fx.node import Argument, Target

from fxdeploy.capture import batch_rules as rules
from fxdeploy.capture import flat_io, vmap_views
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.passes.record import KEY
from fxdeploy.passes.scatters_as_slices import slice_scatters_as_cats

aten = torch.ops.aten


class Unbatchable(Exception):
    """The per-image graph could not be vectorized; ``reason`` names the op and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason  # torch.fx's interpreter appends the node to the message; this stays short


class _Vectorizing(torch.fx.Interpreter):
    """Runs the per-image graph inside vmap, with ``batch_rules``; names an op nothing covers."""

    def __init__(self, gm: torch.fx.GraphModule, batch: rules.Batch) -> None:
        super().__init__(gm)
        self.batch = batch

    def run_node(self, n: torch.fx.Node) -> Any:
        self._node = n
        return super().run_node(n)

    def call_function(self, target: Target, args: tuple[Argument, ...], kwargs: dict[str, Any]) -> Any:
        batched = [t for t in rules.tensors(args, kwargs) if functorch.is_batchedtensor(t)]
        if batched:
            rule = rules.rule_for(target, args, batched)
            if rule is not None:
                return self._fixing_no_batch(target, rule(self.batch, args, kwargs))
        try:
            return self._fixing_no_batch(target, super().call_function(target, args, kwargs))
        except RuntimeError as exc:
            if "vmap fallback" not in str(exc):
                message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                raise Unbatchable(f"{target} under vmap: {message} ({call_site(self._node)})") from exc
        decomposed = decomposition_table.get(target)  # type: ignore[arg-type]
        if decomposed is None:
            raise Unbatchable(f"{target} has no batching rule ({call_site(self._node)})")
        return self._fixing_no_batch(target, decomposed(*args, **kwargs))

    def _fixing_no_batch(self, target: Target, result: Any) -> Any:
        """``result``, unless vmap's rule for ``target`` read the symbolic batch as a number (torch.export
        would refuse the whole graph later, naming no op): then the op is named now."""
        size = self.batch.size
        if isinstance(size, torch.SymInt) and size.node.maybe_as_int() is not None:
            raise Unbatchable(f"vmap's rule for {target} fixes the batch size ({call_site(self._node)})")
        return result


class _Vectorized(torch.nn.Module):
    """vmap of the per-image graph over dim 0 of every input; each image enters as a batch of one."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__()
        self.gm = gm

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        size = inputs[0].shape[0]

        def one(*images: torch.Tensor) -> tuple[torch.Tensor, ...]:
            level = functorch.maybe_get_level(images[0])
            interpreter = _Vectorizing(self.gm, rules.Batch(level, size))
            return tuple(interpreter.run(*[image.unsqueeze(0) for image in images]))

        return torch.func.vmap(one)(*inputs)


@contextlib.contextmanager
def _no_vmap_fallback() -> Iterator[None]:
    """vmap's per-image loop raises instead: under a symbolic batch it would fix the batch size."""
    previous = functorch._is_vmap_fallback_enabled()
    functorch._set_vmap_fallback_enabled(False)
    try:
        yield
    finally:
        functorch._set_vmap_fallback_enabled(previous)


def vectorize(
    gm: torch.fx.GraphModule, batch_inputs: list[torch.Tensor], shapes: list[dict[int, Any]]
) -> tuple[torch.fx.GraphModule, torch.export.ExportedProgram]:
    """The per-image graph ``gm`` (inputs and outputs of one image) as a graph of a batch:
    every output gains a leading batch dim. ``shapes``: each batched input's dynamic dims, the
    batch on dim 0 and the per-image graph's own (height, width) on theirs. Returns the graph and
    the exported program it is taken from (the same graph: an ONNX lowering exports it as is, not
    traced again). Raises ``Unbatchable``."""
    module = _Vectorized(_constants_as_buffers(gm))
    specs = (tuple(shapes),)  # forward(*inputs)
    try:
        with _no_vmap_fallback(), torch.no_grad(), warnings.catch_warnings():
            # torch 2.13's own pytree deprecation, raised inside torch.export; nothing a user can act on
            warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*", category=FutureWarning)
            program = torch.export.export(module, tuple(batch_inputs), dynamic_shapes=specs, strict=False)
            _drop_refused(program.graph_module)
            program = program.run_decompositions({})
            vmap_views.simplify(program.graph_module)
            slice_scatters_as_cats(program.graph_module)
    except Unbatchable as exc:
        raise Unbatchable(exc.reason) from None
    except Exception as exc:  # noqa: BLE001 - every failure keeps the per-image path, named
        cause = exc
        while cause.__cause__ is not None and not isinstance(cause, Unbatchable):
            cause = cause.__cause__
        if isinstance(cause, Unbatchable):
            raise Unbatchable(cause.reason) from None
        raise Unbatchable(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}") from exc
    _numbers_as_tensors(program.graph_module)
    batched = program.module(check_guards=False)
    flat_io.make_flat(batched)
    if KEY in gm.meta:
        batched.meta[KEY] = gm.meta[KEY]
    return batched, program


def _drop_refused(gm: torch.fx.GraphModule) -> None:
    """The ops that vmap refused before their decomposition ran were recorded all the same, with
    no users: unused functional aten ops go (vmap's own calls in the graph stay)."""
    for node in reversed(list(gm.graph.nodes)):
        op = node.target
        if node.op == "call_function" and not node.users and isinstance(op, torch._ops.OpOverload) \
                and not op._schema.is_mutable:
            gm.graph.erase_node(node)
    gm.recompile()


def _numbers_as_tensors(gm: torch.fx.GraphModule) -> None:
    """vmap wraps a Python number operand (``max + 1``) into a tensor, which the trace records as
    ``_to_copy(1, dtype=...)``: the same value as ``scalar_tensor(1, dtype=...)``, which every
    lowering (TorchScript's compiler included) takes."""
    for node in gm.graph.nodes:
        if node.target is aten._to_copy.default and isinstance(node.args[0], (int, float, bool)):
            kwargs = {k: v for k, v in node.kwargs.items() if k in ("dtype", "layout", "device")}
            node.target, node.args, node.kwargs = aten.scalar_tensor.default, (node.args[0],), kwargs
    gm.recompile()


def _constants_as_buffers(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose tensor constants are buffers: export lifts a plain tensor attribute
    read inside vmap as a fake constant."""
    copy = torch.fx.GraphModule(gm, gm.graph)
    copy.meta.update(gm.meta)
    for name, value in list(vars(copy).items()):
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            delattr(copy, name)
            copy.register_buffer(name, value, persistent=False)
    return copy
