"""Capture: torch.export with fxdeploy's substitutions applied, into one flat GraphModule.

Mode "auto" runs non-strict torch.export (fast, runs the model's Python for real) with method
substitutions on the model's instances, and watches whether a substituted *function* was called.
If one was, it captures again in strict mode (dynamo), where function substitutions apply as
scoped polyfills. "strict" and "non_strict" force one path.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.fx.graph import CodeGen
from torch.utils import _pytree as pytree

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.artifact import structure
from fxdeploy.capture import fixes, guards, per_image, substitution
from fxdeploy.capture.errors import explain
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
    # torch.export's guards on dynamic input sizes, over the input names (fxdeploy.capture.guards)
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
    settings = settings or Settings()
    kwargs = dict(kwargs or {})
    subs = list(substitutions or [])
    flat_inputs, in_spec = pytree.tree_flatten((args, kwargs))
    for i, leaf in enumerate(flat_inputs):
        if not isinstance(leaf, torch.Tensor):
            raise CaptureError(
                f"input leaf #{i} is {type(leaf).__name__} ({leaf!r}); fxdeploy inputs must be "
                "tensors (bake constants into the model, e.g. with functools.partial)"
            )
    export_shapes, opts = dims_mod.to_export_dynamic_shapes(dynamic_shapes, model.forward, args, kwargs)
    args, kwargs, widened = widen(args, kwargs, export_shapes, model.forward)
    if widened:
        logger.info("dims %s have size 1 in the example, which torch.export would fix: capturing on the "
                    "example repeated to size 2", widened)
        flat_inputs, in_spec = pytree.tree_flatten((args, kwargs))
    with eval_mode(model), module_state(model), torch.no_grad(), warnings.catch_warnings():
        # torch 2.13's own pytree deprecation, raised inside torch.export; nothing a user can act on
        warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*", category=FutureWarning)
        # torchvision 0.29's fake nms kernel calls a renamed torch API; nothing a user can act on
        warnings.filterwarnings("ignore", message=".*assigned during export.*", category=UserWarning)  # restored
        # a module caching state in forward (torchvision's anchor generator); module_state restores it
        warnings.filterwarnings("ignore", message=".*found certain side effects happened.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*create_unbacked_symint.*is deprecated", category=FutureWarning)
        with substitution.on_instances(model, subs) as applied:
            try:
                eager_outputs = model(*args, **kwargs)
            except Exception as exc:
                raise CaptureError(
                    f"{type(model).__name__} failed when run eagerly on the example inputs"
                    f"{' with substitutions ' + ', '.join(applied) if applied else ''}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        template = eager_outputs if structure.has_unregistered_dataclass(eager_outputs) else None
        target = _plain_outputs(model) if template is not None else model
        batch = per_image.batch_dim(export_shapes, flat_inputs)
        changes: list[str] = []
        try:
            ep, mode, applied = _export(target, args, kwargs, export_shapes, subs, settings.capture.mode)
        except CaptureError as exc:
            if batch is not None and per_image.specialized(exc.__cause__ or exc, batch.name):
                logger.info("the model fixes its batch %r: capturing one image", batch.name)
                mode = "strict" if getattr(exc, "strict", False) else settings.capture.mode
                start = (mode, getattr(exc, "real_values", False))
                captured = _try_one_image(model, args, kwargs, subs, settings, batch, flat_inputs, start)
                if captured is None:
                    raise  # the batch's own error says what to change
                captured.widened_dims = widened
                return captured
            fixed = fixes.apply(export_shapes, fixes.suggested(exc.__cause__))
            if fixed is None:
                raise
            export_shapes, changes = fixed
            ep, mode, applied = _export(target, args, kwargs, export_shapes, subs, settings.capture.mode)
        _check_structure(ep, eager_outputs, template, [s for s in subs if s.name in applied])
        unpacks = [s.unpack for s in subs if s.name in applied and s.unpack is not None]
        captured = _flatten(ep, model, eager_outputs, template, flat_inputs, in_spec, opts, mode, applied, unpacks)
        if settings.verify:  # lower() checks the declared min; without its check the narrowed range stands
            _lift_minimums(captured, fixes.lifted_minimums(export_shapes, captured.dims))
        changes += fixes.narrowed(export_shapes, captured.dims)
        fixes.warn(changes)
        captured.widened_dims, captured.dim_changes = widened, changes
        return captured


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


def _try_one_image(*args: Any) -> Captured | None:
    try:
        return _capture_one_image(*args)
    except Exception as exc:  # noqa: BLE001 - the caller raises the whole batch's error instead
        logger.info("capturing one image failed too: %s: %s", type(exc).__name__, exc)
        return None


def _capture_one_image(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], subs: list[substitution.Substitution],
    settings: Settings, batch: per_image.BatchDim, batch_inputs: list[torch.Tensor], start: tuple[str, bool],
) -> Captured:
    """Capture the first image with a static batch of 1, starting in the mode the whole batch
    needed (``start``: capture mode, real values); record how per-image results join."""
    one_args, one_kwargs = per_image.take_images((args, kwargs), 0, 1)
    two_args, two_kwargs = per_image.take_images((args, kwargs), 0, 2)
    if batch_inputs[0].shape[0] < 2:  # one image given: the same image twice shows how results join
        two_args, two_kwargs = pytree.tree_map(
            lambda x: torch.cat([x, x]) if isinstance(x, torch.Tensor) else x, (one_args, one_kwargs)
        )
    with substitution.on_instances(model, subs):
        one, two = model(*one_args, **one_kwargs), model(*two_args, **two_kwargs)
    if structure.has_unregistered_dataclass(one):
        raise CaptureError("a model that loops over the batch and returns dataclasses is not supported; return dicts")
    plan = per_image.join_plan(one, two)
    flat_one, in_spec = pytree.tree_flatten((one_args, one_kwargs))
    ep, mode, applied = _export(model, one_args, one_kwargs, None, subs, *start)
    _check_structure(ep, one, None, [s for s in subs if s.name in applied])
    unpacks = [s.unpack for s in subs if s.name in applied and s.unpack is not None]
    captured = _flatten(ep, model, one, None, flat_one, in_spec, {}, mode, applied, unpacks)
    captured.per_image = dict(batch.to_dict(), opt=int(batch_inputs[0].shape[0]), join=plan)
    captured.batch_inputs = list(batch_inputs)
    return captured


def _export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    shapes: Any,
    subs: list[substitution.Substitution],
    mode: str,
    real_values: bool = False,
) -> tuple[torch.export.ExportedProgram, str, list[str]]:
    """Export in ``mode``; ``real_values``: let the example decide size branches from the start.
    A CaptureError says how far it got (``strict``, ``real_values``), so that a retry on one image
    starts there."""
    functions = [s for s in subs if not s.is_method]
    if mode in ("auto", "non_strict"):
        watch = None
        try:
            with substitution.on_instances(model, subs) as applied, substitution.watch_calls(
                functions
            ) as watch:
                ep = _decided_by_example(model, args, kwargs, shapes, strict=False, real_values=real_values)
            if not watch.hits:
                return ep, "non_strict", applied
            logger.info("substituted function(s) %s called; capturing again in strict mode", watch.hits)
        except Exception as exc:  # noqa: BLE001 - re-raised with an explanation, or retried strict
            fixed_dim = "Constraints violated" in str(exc) and not (watch and watch.hits)  # strict fixes no dim
            if mode == "non_strict" or fixed_dim:
                error = CaptureError(explain(exc, model, subs))
                error.strict, error.real_values = False, real_values or getattr(exc, "real_values", False)
                raise error from exc
            logger.info("non-strict capture failed (%s); trying strict mode", type(exc).__name__)
    try:
        with substitution.on_instances(model, subs) as applied, substitution.in_dynamo(functions) as fns:
            ep = _decided_by_example(model, args, kwargs, shapes, strict=True, real_values=real_values)
    except Exception as exc:  # noqa: BLE001
        error = CaptureError(explain(exc, model, subs))
        error.strict, error.real_values = True, real_values or getattr(exc, "real_values", False)
        raise error from exc
    return ep, "strict", applied + fns


def _decided_by_example(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], shapes: Any, strict: bool,
    real_values: bool = False,
) -> torch.export.ExportedProgram:
    """torch.export; where Python branches on a data-dependent size (Ultralytics'
    ``if not x.shape[0]: continue`` after a score filter, torchvision's ``if box_sum > 0`` over
    the proposals an NMS kept), once more with the example's real values deciding each such branch.

    torch records the branch taken as a runtime assert on the size (``Ne(u0, 0)``). The masking
    passes then keep that size at its static bound, and ``lower()`` checks the artifact against the
    model run eagerly, so a branch that matters shows as a mismatch there."""
    first: Exception | None = None
    if not real_values:
        with module_state(model), _quiet():
            try:
                return torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=strict)
            except Exception as exc:  # noqa: BLE001 - only a data-dependent branch is retried
                text = f"{type(exc).__name__} {exc}"
                if "GuardOnDataDependentSymNode" not in text and "Could not guard on data-dependent" not in text:
                    raise
                first = exc
    logger.info("a Python branch reads a data-dependent size; capturing with the example's values")
    with module_state(model), torch._functorch.config.patch(fake_tensor_propagate_real_tensors=True), _quiet():
        try:
            ep = torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=strict)
        except Exception as second:  # noqa: BLE001
            if "Constraints violated" in str(second) or first is None:
                second.real_values = True  # type: ignore[attr-defined]
                raise  # a dim the code fixes (a loop over the batch): capture can act on it
            logger.debug("capture with the example's values failed too: %s", second)
            raise first from None  # the data-dependent branch is what the user can act on
    if _branches_on_values(ep.graph):  # only sizes may decide: a value's branch differs per input
        raise first or CaptureError("a Python branch reads a tensor's value, which the example decided")
    for node in ep.graph.nodes:  # the real values decided the branches; passes re-derive shapes only
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor) and getattr(value, "real_tensor", None) is not None:
                value.real_tensor = None
    return ep


def _branches_on_values(graph: torch.fx.Graph) -> bool:
    """Whether a branch the example decided reads a tensor's value (``if x.sum() > 0``), not
    the size of a selection (``if not len(kept)``): the asserts torch left name the symbols."""
    values = set()
    for node in graph.nodes:
        if str(node.target) in ("aten._local_scalar_dense.default", "aten.item.default"):
            values |= {str(s) for s in node.meta.get("unbacked_bindings", {})}
    for node in graph.nodes:
        if str(node.target) == "aten._assert_scalar.default" and isinstance(node.args[0], torch.fx.Node):
            condition = node.args[0].meta.get("val")
            symbols = getattr(getattr(condition, "node", None), "expr", None)
            if symbols is not None and {str(s) for s in symbols.free_symbols} & values:
                return True
    return False


def _check_structure(
    ep: torch.export.ExportedProgram, eager_outputs: Any, template: Any, applied: list[substitution.Substitution]
) -> None:
    """A function substitution applies only in capture, so eager ran the original: the two output
    structures must agree, or the deployed model would silently return another shape of result.
    A substitution with ``unpack`` rebuilds the eager structure on the host, so it may differ."""
    functions = [s for s in applied if not s.is_method]
    if not functions or any(s.unpack is not None for s in functions):
        return
    plain = structure.dataclasses_to_dicts(eager_outputs) if template is not None else eager_outputs
    want = structure.describe(pytree.tree_structure(plain))
    got = structure.describe(ep.call_spec.out_spec)
    if want != got:
        raise CaptureError(
            f"substitution(s) {', '.join(s.name for s in functions)} changed the model's output structure: "
            f"eager returns {structure.render(want)}, the captured graph returns {structure.render(got)} "
            "(T is a leaf). A replacement must return what the original returns, or be registered with "
            "unpack=... to rebuild the eager structure on the host"
        )


def _flatten(
    ep: torch.export.ExportedProgram,
    model: torch.nn.Module,
    eager_outputs: Any,
    template: Any,
    flat_inputs: list[torch.Tensor],
    in_spec: pytree.TreeSpec,
    opts: dict[str, int],
    mode: str,
    applied: list[str],
    unpacks: list[Callable[[Any], Any]],
) -> Captured:
    user_inputs = list(ep.graph_signature.user_inputs)
    fakes = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    user_fakes = [fakes[name] for name in user_inputs]
    symbol_names = _symbol_names(user_fakes)
    shapes = [dims_mod.symbolic_dims(fake, symbol_names) for fake in user_fakes]
    observed = _observed_sizes(shapes, flat_inputs)
    dims = dims_mod.dim_ranges(ep.range_constraints, symbol_names, opts, observed)
    export_dims = {name: torch.export.Dim(name, min=r.min, max=r.max) for name, r in dims.items()}
    export_shapes = [
        {i: dims_mod.export_dim(s, export_dims) for i, s in enumerate(shape) if isinstance(s, str)} or None
        for shape in shapes
    ]
    names = [_clean(n) for n in user_inputs]
    kept_guards = guards.from_export(getattr(ep, "_guards_code", None) or [], dict(zip(names, shapes, strict=True)))
    gm = ep.module(check_guards=False)  # the guards are checked by Deployed, on the manifest's copy
    _make_flat(gm)
    plain = structure.dataclasses_to_dicts(eager_outputs) if template is not None else eager_outputs
    return Captured(
        graph_module=gm,
        example_inputs=list(flat_inputs),
        input_names=names,
        input_shapes=shapes,
        in_spec=in_spec,
        out_spec=ep.call_spec.out_spec,
        output_names=_unique_outputs(structure.leaf_names(plain), user_inputs),
        dims=dims,
        guards=kept_guards,
        symbol_names=symbol_names,
        export_dynamic_shapes=export_shapes,
        eager_outputs=eager_outputs,
        mode=mode,
        substitutions=applied,
        unpacks=unpacks,
        dataclass_template=template,
        exported_program=ep,
    )


def _symbol_names(fakes: list[Any]) -> dict[str, str]:
    """Root symbols (s0, s77) → the names the user gave them through torch.export.Dim."""
    names: dict[str, str] = {}
    for fake in fakes:
        if not isinstance(fake, torch.Tensor):
            continue
        for size in fake.shape:
            if isinstance(size, torch.SymInt):
                for symbol in size.node.expr.free_symbols:
                    names.setdefault(str(symbol), _dim_source_name(size.node.shape_env, symbol) or str(symbol))
    return names


def _dim_source_name(shape_env: Any, symbol: Any) -> str | None:
    """The torch.export.Dim name behind a root symbol, if the user named one.

    A dim used directly is known by its input-size source (``L['x'].size()[0]`` → ``batch``); the
    root of a derived dim (``32 * h``) has a source of its own whose name is the Dim's name.
    """
    debug_names = getattr(shape_env, "source_name_to_debug_name", {})
    for source in getattr(shape_env, "var_to_sources", {}).get(symbol, []):
        name = debug_names.get(source.name, source.name)
        if isinstance(name, str) and name.isidentifier():
            return name
    return None


def _observed_sizes(shapes: list[list[int | str]], inputs: list[torch.Tensor]) -> dict[str, int]:
    """Each root dim's value in the example inputs."""
    observed: dict[str, int] = {}
    for shape, real in zip(shapes, inputs, strict=True):
        for entry, actual in zip(shape, real.shape, strict=True):
            if isinstance(entry, str):
                value = dims_mod.root_value(entry, int(actual))
                if value is not None:
                    observed.setdefault(dims_mod.parse(entry)[1], value)
    return observed


def _make_flat(gm: torch.fx.GraphModule) -> None:
    """Plain codegen: flat tensors in, a flat tuple out, no pytree (un)flattening or guard hooks."""
    gm._forward_pre_hooks.clear()
    gm.graph._codegen = CodeGen()
    gm.recompile()


def _unique_outputs(names: list[str], inputs: list[str]) -> list[str]:
    """ONNX needs distinct value names: an output named like an input gets an '_out' suffix."""
    taken = {_clean(n) for n in inputs}
    unique = []
    for name in names:
        while name in taken:
            name += "_out"
        taken.add(name)
        unique.append(name)
    return unique


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _plain_outputs(model: torch.nn.Module) -> torch.nn.Module:
    """Wrap a model whose output holds dataclasses that pytree cannot flatten.

    The wrapper keeps the model's forward signature, so dynamic_shapes keyed by input name
    still bind.
    """
    signature = inspect.signature(model.forward)

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return structure.dataclasses_to_dicts(self.model(*args, **kwargs))

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *signature.parameters.values()]
    )
    wrapper = type("PlainOutputs", (torch.nn.Module,), {"forward": forward})()
    wrapper.model = model
    return wrapper


@contextlib.contextmanager
def module_state(model: torch.nn.Module) -> Iterator[None]:
    """Give every submodule back its attributes as they were before capture.

    Models cache values on themselves in forward (Ultralytics' Detect head keeps its anchors and
    strides for the last input shape). Under torch.export those caches become fake or traced
    tensors, which a later eager call would reuse: the same model would then compute with another
    trace's values, or fail. Capture may run forward several times, and may fail half-way."""
    saved = [(m, dict(m.__dict__), dict(m._parameters), dict(m._buffers)) for m in model.modules()]
    try:
        yield
    finally:
        for module, attributes, parameters, buffers in saved:
            module.__dict__.clear()
            module.__dict__.update(attributes)
            module._parameters.clear()
            module._parameters.update(parameters)
            module._buffers.clear()
            module._buffers.update(buffers)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Dynamo logs a failed trace at error level (the guards, the frames), and torch.export prints
    the partial graph of a failed export to stderr: the CaptureError says what broke, so torch's
    loggers are held above error level, and its stderr output goes to fxdeploy's debug log."""
    names = ["torch"] + [n for n in logging.root.manager.loggerDict if n.startswith("torch.")]
    loggers = [logging.getLogger(name) for name in names]  # torch._logging sets levels on children
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if printed.getvalue().strip():
            logger.debug("torch printed during capture:\n%s", printed.getvalue())


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Deployment means inference: capture in eval mode, and give the model back as it was."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
