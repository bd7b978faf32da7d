"""Capture: torch.export with fxdeploy's substitutions applied, into one flat GraphModule.

Mode "auto" runs non-strict torch.export (fast, runs the model's Python for real) with method
substitutions on the model's instances, and watches whether a substituted *function* was called
(only those the model called when run eagerly first: ``substitution.traced``).
If one was, it captures again in strict mode (dynamo), where function substitutions apply as
scoped polyfills. "strict" and "non_strict" force one path. This module runs the model and
assembles the ``Captured`` result; the export itself is ``exporting``, and the names, dims and
output structure of the flat graph are ``signature``.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.artifact import guards, structure
from fxdeploy.capture import exporting, fixes, flat_io, memo, per_image, state, substitution
from fxdeploy.capture.batch_watch import BatchFixed
from fxdeploy.capture.exporting import module_state
from fxdeploy.capture.functional import drop_input_writes, functionalize
from fxdeploy.capture.state import eval_mode
from fxdeploy.capture.widen import widen
from fxdeploy.errors import CaptureError
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class Pending:
    """The ranges torch.export narrowed and the guards only their declared min breaks: they stand
    again if lower()'s check at the declared min fails."""

    dims: dict[str, dims_mod.DimRange]
    guards: list[str]


@dataclass
class Captured:
    """A model as one flat graph: tensors in, a tuple of leaves out, plus how to rebuild both."""

    graph_module: torch.fx.GraphModule
    example_inputs: list[torch.Tensor]
    input_names: list[str]
    input_shapes: list[list[int | str]]
    in_spec: pytree.TreeSpec
    out_spec: pytree.TreeSpec
    output_names: list[str]
    dims: dict[str, dims_mod.DimRange]
    symbol_names: dict[str, str]
    export_dynamic_shapes: list[dict[int, Any] | None]
    eager_outputs: Any
    mode: str
    substitutions: list[str] = field(default_factory=list)
    unpacks: list[Callable[[Any], Any]] = field(default_factory=list)
    dataclass_template: Any = None
    # the ExportedProgram the graph module came from: lowering exports it as is when no pass changed it
    exported_program: torch.export.ExportedProgram | None = None
    # a model that loops over the batch in Python, captured for one image (fxdeploy.capture.per_image):
    # the batch dim and the join plan, and the user's whole example
    per_image: dict[str, Any] | None = None
    batch_inputs: list[torch.Tensor] | None = None
    # dynamic dims whose example size was 1, captured on the example repeated to 2 (capture/widen.py)
    widened_dims: list[str] = field(default_factory=list)
    # declared dims the artifact takes otherwise (fxdeploy.capture.fixes): fixes applied, ranges narrowed
    dim_changes: list[str] = field(default_factory=list)
    # torch.export's guards on dynamic input sizes, over the input names (fxdeploy.artifact.guards)
    guards: list[str] = field(default_factory=list)
    # dims whose declared min was given back after torch.export raised it (fixes.lifted_minimums):
    # what stands if lower()'s check at that min fails
    pending: Pending | None = None


def capture(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    substitutions: list[substitution.Substitution] | None = None,
    settings: Settings | None = None,
) -> Captured:
    """Capture ``model`` on the example ``args``/``kwargs``; a dim torch.export fixes or narrows is
    fixed as it suggests and warned about, and a model that fixes its batch is captured for one image."""
    settings = settings or Settings()
    kwargs = dict(kwargs or {})
    subs = list(substitutions or [])
    flat_inputs, in_spec = pytree.tree_flatten((args, kwargs))
    flat_io.require_tensors(flat_inputs)
    export_shapes, opts = dims_mod.to_export_dynamic_shapes(dynamic_shapes, model.forward, args, kwargs)
    args, kwargs, widened = widen(args, kwargs, export_shapes, model.forward)
    if widened:
        logger.info("dims %s have size 1 in the example, which torch.export would fix: capturing on the "
                    "example repeated to size 2", widened)
        flat_inputs, in_spec = pytree.tree_flatten((args, kwargs))
    with _capturing(model):
        eager_outputs, called = _run_eagerly(model, args, kwargs, subs)
        subs = substitution.traced(subs, called)
        template = eager_outputs if structure.has_unregistered_dataclass(eager_outputs) else None
        target = flat_io.plain_outputs(model) if template is not None else model
        batch = per_image.batch_dim(export_shapes, flat_inputs)
        changes: list[str] = []
        try:
            ep, mode, applied = memo.export(target, args, kwargs, export_shapes, subs, settings.capture.mode,
                                            batch=batch.name if batch is not None else None)
        except CaptureError as exc:
            if batch is not None and per_image.specialized(exc.__cause__ or exc, batch.name):
                captured = _try_one_image(exc, model, args, kwargs, subs, settings, batch, flat_inputs, called, opts)
                if captured is None:
                    raise  # the batch's own error says what to change
                captured.widened_dims = widened
                return captured
            (ep, mode, applied), export_shapes, changes = fixes.exported_again(
                exc, lambda shapes, deferred: memo.export(target, args, kwargs, shapes, subs, settings.capture.mode,
                                                          deferred=deferred), export_shapes)
        captured = _flatten(ep, eager_outputs, template, flat_inputs, in_spec, opts, mode, applied, subs)
        if settings.verify:  # lower() checks the declared min; without its check the narrowed range stands
            _lift_minimums(captured, fixes.lifted_minimums(export_shapes, captured.dims))
        changes += fixes.narrowed(export_shapes, captured.dims)
        fixes.warn(changes)
        captured.widened_dims, captured.dim_changes = widened, changes
        return captured


@contextlib.contextmanager
def _capturing(model: torch.nn.Module) -> Iterator[None]:
    """What capture runs under: eval mode, no autograd, every submodule's state given back after,
    and the warnings torch raises during export that no user can act on held back."""
    with eval_mode(model), module_state(model), state.kept_values(model), torch.no_grad(), \
            warnings.catch_warnings():
        # torch 2.13's own pytree deprecation, raised inside torch.export; nothing a user can act on
        warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*", category=FutureWarning)
        # torchvision 0.29's fake nms kernel calls a renamed torch API; nothing a user can act on
        warnings.filterwarnings("ignore", message=".*assigned during export.*", category=UserWarning)  # restored
        # a module caching state in forward (torchvision's anchor generator); module_state restores it
        warnings.filterwarnings("ignore", message=".*found certain side effects happened.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*create_unbacked_symint.*is deprecated", category=FutureWarning)
        yield


def _run_eagerly(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], subs: list[substitution.Substitution]
) -> tuple[Any, list[str]]:
    """The model's outputs on the example, run with the method substitutions on its instances, and
    the substituted functions it called (which only a strict capture substitutes). It runs on
    copies of the example: a model that writes into its inputs leaves the user's example unchanged,
    and the capture and the artifact's check see the example as given."""
    functions = [s for s in subs if not s.is_method]

    def run() -> Any:  # once, or twice where it wrote a buffer (state.run_once)
        copies, kw = pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
        try:
            return model(*copies, **kw)
        except Exception as exc:
            raise CaptureError(
                f"{type(model).__name__} failed when run eagerly on the example inputs"
                f"{' with substitutions ' + ', '.join(applied) if applied else ''}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    with substitution.on_instances(model, subs) as applied, substitution.watch_calls(functions) as watch:
        return state.run_once(model, run), watch.hits


def _lift_minimums(captured: Captured, lifted: dict[str, int]) -> None:
    """Give the dims of ``fixes.lifted_minimums`` their declared min back, pending lower()'s check
    at it; the guards that only the declared min breaks wait with them (``Captured.pending``)."""
    if not lifted:
        return
    narrowed = {name: captured.dims[name] for name in lifted}
    for name, low in lifted.items():
        captured.dims[name] = replace(captured.dims[name], min=low)
    sizes = {name: r.min for name, r in captured.dims.items()}
    shapes = dict(zip(captured.input_names, captured.input_shapes, strict=True))
    at_min = {name: [dims_mod.size_of(d, sizes) for d in shape] for name, shape in shapes.items()}
    lifted_axes = {(name, axis) for name, shape in shapes.items() for axis, d in enumerate(shape)
                   if isinstance(d, str) and dims_mod.parse(d)[1] in lifted}
    waiting = [g for g in captured.guards  # broken at the declared min, and about a lifted dim
               if guards.sizes_read(g) & lifted_axes and guards.violated([g], at_min) is not None]
    captured.pending = Pending(narrowed, waiting)
    captured.guards = [g for g in captured.guards if g not in waiting]
    logger.info("torch.export raised the min of %s to 2 (its 0/1 specialization); lower() checks the declared min",
                ", ".join(sorted(lifted)))


def _try_one_image(
    exc: CaptureError, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
    subs: list[substitution.Substitution], settings: Settings, batch: per_image.BatchDim,
    batch_inputs: list[torch.Tensor], called: list[str], opts: dict[str, int],
) -> Captured | None:
    """The model fixes its ``batch`` (``exc``, the whole batch's error): capture one image,
    starting where the batch's capture got to; None if that fails too (its CaptureError where the
    batch's trace stopped at the loop, ``BatchFixed``: it got further). In "auto" mode, a model
    that ran a substituted function eagerly (``called``) starts strict: its non-strict trace would
    stop at that call to start strict anyway (a detector's NMS, after the whole network)."""
    logger.info("the model fixes its batch %r: capturing one image", batch.name)
    strict = getattr(exc, "strict", False) or (settings.capture.mode == "auto" and bool(called))
    mode = "strict" if strict else settings.capture.mode
    start = (mode, getattr(exc, "real_values", False))
    try:
        return _capture_one_image(model, args, kwargs, subs, batch, batch_inputs, start, opts)
    except (per_image.JoinError, exporting.emptied.OtherSide):
        raise  # it names the output (the branch) at fault: clearer than the batch's error
    except Exception as failed:  # noqa: BLE001 - the caller raises the whole batch's error instead
        if isinstance(failed, CaptureError) and isinstance(exc.__cause__, BatchFixed):
            raise  # the batch's trace stopped at its loop; this one went further: its error says more
        logger.info("capturing one image failed too: %s: %s", type(failed).__name__, failed)
        return None


def _capture_one_image(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], subs: list[substitution.Substitution],
    batch: per_image.BatchDim, batch_inputs: list[torch.Tensor], start: tuple[str, bool], opts: dict[str, int],
) -> Captured:
    """Capture the first image with a static batch of 1, starting in the mode the whole batch
    needed (``start``: capture mode, real values), the inputs' other dynamic dims kept (a fix
    torch.export suggests for them applied and warned about); record how per-image results join."""
    one_args, one_kwargs = per_image.take_images((args, kwargs), 0, 1)
    two_args, two_kwargs = per_image.take_images((args, kwargs), 0, 2)
    distinct = batch_inputs[0].shape[0] > 1 and not all(torch.equal(x[0], x[1]) for x in batch_inputs)
    if not distinct:  # one image (or one repeated): it and another, its values rolled, show how results join
        two_args, two_kwargs = pytree.tree_map(
            lambda x: torch.cat([x, x.roll(1, -1)]) if isinstance(x, torch.Tensor) else x, (one_args, one_kwargs)
        )
    second_args, second_kwargs = per_image.take_images((two_args, two_kwargs), 1, 2)
    with substitution.on_instances(model, subs):  # the second image alone: a batch-wide size (pad_sequence) differs
        second = model(*second_args, **second_kwargs)  # first: two images last, whose caches the capture then reads
        one, two = model(*one_args, **one_kwargs), model(*two_args, **two_kwargs)
    if structure.has_unregistered_dataclass(one):
        raise CaptureError("a model that loops over the batch and returns dataclasses is not supported; return dicts")
    plan = per_image.join_plan(one, two, second=second)
    flat_one, in_spec = pytree.tree_flatten((one_args, one_kwargs))
    (ep, mode, applied), shapes, changes = fixes.exported_with_fixes(
        lambda shapes, deferred: memo.export(model, one_args, one_kwargs, shapes, subs, *start, deferred=deferred),
        batch.rest
    )
    captured = _flatten(ep, one, None, flat_one, in_spec, opts, mode, applied, subs)
    changes += fixes.narrowed(shapes, captured.dims)
    fixes.warn(changes)
    captured.dim_changes = changes
    captured.per_image = dict(batch.to_dict(), opt=int(batch_inputs[0].shape[0]), join=plan)
    captured.batch_inputs = list(batch_inputs)
    return captured


def _flatten(
    ep: torch.export.ExportedProgram,
    eager_outputs: Any,
    template: Any,
    flat_inputs: list[torch.Tensor],
    in_spec: pytree.TreeSpec,
    opts: dict[str, int],
    mode: str,
    applied: list[str],
    subs: list[substitution.Substitution],
) -> Captured:
    """The exported program as a ``Captured``: its output structure checked against eager's (for
    the ``applied`` substitutions), its inputs and outputs named, its graph module made flat."""
    flat_io.check_structure(ep, eager_outputs, template, [s for s in subs if s.name in applied])
    ep = memo.functional(ep, functionalize)  # before any pass: a rewrite of a graph that writes can move the write
    unpacks = [s.unpack for s in subs if s.name in applied and s.unpack is not None]
    inputs = flat_io.inputs_of(ep, flat_inputs, opts)
    gm = ep.module(check_guards=False)  # the guards are checked by Deployed, on the manifest's copy
    flat_io.make_flat(gm)
    written = drop_input_writes(gm)
    if written:
        logger.info("the model writes into its input(s) %s; the artifact returns eager's outputs and leaves "
                    "the arrays it is given unchanged", ", ".join(written))
    plain = structure.dataclasses_to_dicts(eager_outputs) if template is not None else eager_outputs
    return Captured(
        graph_module=gm,
        example_inputs=list(flat_inputs),
        input_names=inputs.names,
        input_shapes=inputs.shapes,
        in_spec=in_spec,
        out_spec=ep.call_spec.out_spec,
        output_names=flat_io.unique_outputs(structure.leaf_names(plain), list(ep.graph_signature.user_inputs)),
        dims=inputs.dims,
        guards=inputs.guards,
        symbol_names=inputs.symbol_names,
        export_dynamic_shapes=inputs.export_shapes,
        eager_outputs=eager_outputs,
        mode=mode,
        substitutions=applied,
        unpacks=unpacks,
        dataclass_template=template,
        exported_program=ep,
    )

