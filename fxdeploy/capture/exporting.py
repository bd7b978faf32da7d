"""One torch.export of a model, in the capture mode asked for.

"auto" runs non-strict torch.export with the substitutions applied and, if a substituted
*function* was called (or non-strict failed), exports again in strict mode (dynamo), where
function substitutions apply as scoped polyfills. Where Python branches on a data-dependent
size, the export runs once more with the example's real values deciding the branch. Every
export runs with the model's state given back afterwards (``module_state``) and torch's own
failure output held back (``_quiet``): the CaptureError says what broke.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch._functorch.config
from torch._guards import detect_fake_mode
from torch.utils import _pytree as pytree

from fxdeploy.capture import branches, decisions, emptied, substitution
from fxdeploy.capture.batch_watch import stopping_when_fixed
from fxdeploy.capture.errors import explain
from fxdeploy.capture.real_values import offsets_unguarded
from fxdeploy.capture.stacks import recording_stacks
from fxdeploy.errors import CaptureError, first_line

logger = logging.getLogger(__name__)


def export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    shapes: Any,
    subs: list[substitution.Substitution],
    mode: str,
    real_values: bool = False,
    batch: str | None = None,
    deferred: bool = False,
) -> tuple[torch.export.ExportedProgram, str, list[str]]:
    """Export in ``mode``; ``real_values``: let the example decide size branches from the start;
    ``batch``: the inputs' one dynamic dim, whose fixing stops a non-strict trace at once
    (``batch_watch``); ``deferred``: keep the guards on input sizes as runtime asserts
    (``true_guards``: each holds at every declared size). Returns the program, the mode that
    captured it and the substitutions applied. A CaptureError says how far it got (``strict``,
    ``real_values``), so that a retry on one image starts there."""
    functions = [s for s in subs if not s.is_method]
    if mode in ("auto", "non_strict"):
        watch = None
        try:
            with substitution.on_instances(model, subs) as applied, substitution.watch_calls(
                functions, stop=mode == "auto"
            ) as watch:
                ep = _decided_by_example(model, args, kwargs, shapes, False, real_values, batch, deferred)
            if not watch.hits:
                return ep, "non_strict", applied
            logger.info("substituted function(s) %s called; capturing again in strict mode", watch.hits)
        except (emptied.OtherSide, decisions.ValueDecided):
            raise  # it names the line; strict mode would decide the branch the same way
        except Exception as exc:  # noqa: BLE001 - re-raised with an explanation, or retried strict
            hit = watch is not None and bool(watch.hits)  # in "auto", the first hit stops the trace
            fixed_dim = "Constraints violated" in str(exc) and not hit  # strict fixes no dim
            if mode == "non_strict" or fixed_dim:
                error = CaptureError(explain(exc, model, subs))
                error.strict, error.real_values = False, real_values or getattr(exc, "real_values", False)
                raise error from exc
            if hit:
                logger.info("substituted function(s) %s called; capturing again in strict mode", watch.hits)
            else:
                logger.info("non-strict capture failed (%s); trying strict mode", type(exc).__name__)
    try:
        with substitution.on_instances(model, subs) as applied, substitution.in_dynamo(functions) as fns:
            ep = _decided_by_example(model, args, kwargs, shapes, True, real_values, None, deferred)
    except (emptied.OtherSide, decisions.ValueDecided):
        raise
    except Exception as exc:  # noqa: BLE001
        error = CaptureError(explain(exc, model, subs))
        error.strict, error.real_values = True, real_values or getattr(exc, "real_values", False)
        raise error from exc
    return ep, "strict", applied + fns


def _decided_by_example(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], shapes: Any, strict: bool,
    real_values: bool = False, batch: str | None = None, deferred: bool = False,
) -> torch.export.ExportedProgram:
    """torch.export; where Python branches on a data-dependent size (Ultralytics'
    ``if not x.shape[0]: continue`` after a score filter, torchvision's ``if box_sum > 0`` over
    the proposals an NMS kept), once more with the example's real values deciding each such branch.

    torch records the branch taken as a runtime assert on the size (``Ne(u0, 0)``). The masking
    passes then keep that size at its static bound, and ``lower()`` checks the artifact against the
    model run eagerly, so a branch that matters shows as a mismatch there."""
    first: Exception | None = None
    stacks = contextlib.nullcontext if strict else recording_stacks  # dynamo records whole stacks itself
    watch = stopping_when_fixed(None if strict else batch)
    if not real_values:
        with module_state(model), _quiet(), stacks(), watch:
            try:
                return _asserts_as_guards(_autocast_inlined(torch.export.export(
                    model, args, kwargs, dynamic_shapes=shapes, strict=strict,
                    prefer_deferred_runtime_asserts_over_guards=deferred)), deferred)
            except Exception as exc:  # noqa: BLE001 - only a data-dependent branch is retried
                text = f"{type(exc).__name__} {exc}"
                if "GuardOnDataDependentSymNode" not in text and "Could not guard on data-dependent" not in text:
                    raise
                first = exc
    logger.info("a Python branch reads a data-dependent size; capturing with the example's values")
    with module_state(model), _parameters_as_buffers(model), _quiet(), stacks(), \
            stopping_when_fixed(None if strict else batch), offsets_unguarded(), \
            torch._functorch.config.patch(fake_tensor_propagate_real_tensors=True), decisions.recorded() as decided:
        try:
            ep = torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=strict,
                                     prefer_deferred_runtime_asserts_over_guards=deferred)
        except Exception as second:  # noqa: BLE001
            if "Constraints violated" in str(second) or first is None:
                second.real_values = True  # type: ignore[attr-defined]
                raise  # a dim the code fixes (a loop over the batch): capture can act on it
            logger.debug("capture with the example's values failed too: %s", second)
            if branches.elsewhere(second, first):  # the example decided the first branch; another one stops it
                second.real_values, second.decided = True, first  # type: ignore[attr-defined]
                raise
            first.retry = first_line(second)  # type: ignore[attr-defined]
            raise first from None  # the data-dependent branch is what the user can act on
    if _branches_on_values(ep.graph):  # only sizes may decide: a value's branch differs per input
        raise first or CaptureError("a Python branch reads a tensor's value, which the example decided")
    decisions.refuse_values(decided, ep, model)  # the ones that left no assert (a float, an item dynamo dropped)
    decisions.refuse_fixed_counts(decided, ep, model)
    for node in ep.graph.nodes:  # the real values decided the branches; passes re-derive shapes only
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor) and getattr(value, "real_tensor", None) is not None:
                value.real_tensor = None
    mode = detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"])
    if mode is not None:  # a later trace of the program (functionalization) runs in its fake mode: shapes only
        mode.propagate_real_tensors = False
    with module_state(model):
        emptied.check(ep, model, args, kwargs)
    return _asserts_as_guards(_autocast_inlined(ep), deferred)


def _asserts_as_guards(ep: torch.export.ExportedProgram, deferred: bool) -> torch.export.ExportedProgram:
    """``ep`` with, where it was ``deferred``, the runtime asserts on its input sizes added to its
    guards. With ``prefer_deferred_runtime_asserts_over_guards``, every guard on the input sizes is
    an assert, not only the ones ``true_guards`` proved (``x.view(-1, 4)``'s ``h*w % 4 == 0``, a
    branch the example decided): the cleanup drops asserts, so as guards they stay, checked by
    ``Deployed`` as torch.export's own (torch's ``_convert_guards_to_code``, for the asserts)."""
    if not deferred:
        return ep
    from torch.export.exported_program import _get_shape_env
    from torch.fx.experimental.symbolic_shapes import ShapeGuardPythonPrinter

    env = _get_shape_env(ep.graph_module)
    if env is None:
        return ep
    inputs = {symbol for symbol, sources in env.var_to_sources.items()
              if all(not isinstance(source, torch._dynamo.source.ConstantSource) for source in sources)}
    printer = ShapeGuardPythonPrinter(env.var_to_sources, lambda s: s.name, env.var_to_sources)
    asserts = [printer.doprint(ra.expr) for ras in env.deferred_runtime_asserts.values() for ra in ras
               if ra.expr.free_symbols and ra.expr.free_symbols <= inputs]
    ep._guards_code = [*ep._guards_code, *(g for g in asserts if "L['self']" not in g and g not in ep._guards_code)]
    return ep


def _autocast_inlined(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """torch.export keeps a ``torch.autocast`` region in forward as one higher-order op over a
    submodule, which TorchScript cannot compile and no pass sees into; the program retraced spells
    the region's casts as ATen ops (``_to_copy`` to bfloat16 around the linear), as eager runs it."""
    if any(node.target is torch.ops.higher_order.wrap_with_autocast for node in ep.graph.nodes):
        return ep.run_decompositions({})
    return ep


def _branches_on_values(graph: torch.fx.Graph) -> bool:
    """Whether a branch the example decided reads a tensor's value (``if x.sum() > 0``), not
    the size of a selection (``if not len(kept)``): an assert torch left computes its condition
    from an ``item`` (through scalar ops only; a tensor's size is not its value). The symbols of
    the asserts do not tell: where the real values decided, ``item`` holds a constant."""
    values = ("aten._local_scalar_dense.default", "aten.item.default")
    for node in graph.nodes:
        if str(node.target) != "aten._assert_scalar.default":
            continue
        stack, seen = [a for a in node.all_input_nodes], set()
        while stack:
            current = stack.pop()
            if current in seen or isinstance(current.meta.get("val"), torch.Tensor):
                continue
            if str(current.target) in values:
                return True
            seen.add(current)
            stack.extend(current.all_input_nodes)
    return False


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
def _parameters_as_buffers(model: torch.nn.Module) -> Iterator[None]:
    """Every parameter held as a buffer of the same values, for an export whose real values decide
    branches. torch 2.13's fake tensors copy the values of a plain tensor into ``real_tensor``, but
    not those of an ``nn.Parameter`` (its ``_safe_copy`` takes only ``type(t) is torch.Tensor``):
    every weight would hold uninitialized memory, and a branch on a score filter would be decided by
    it. Runs inside ``module_state``, which gives each module its parameters back; tied weights
    stay one tensor."""
    held: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, parameter in list(module._parameters.items()):
            if parameter is None:
                continue
            module._buffers[name] = held.setdefault(id(parameter), parameter.detach())
            del module._parameters[name]
    yield


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Dynamo logs a failed trace at error level (the guards, the frames), and torch.export prints
    the partial graph of a failed export to stderr: the CaptureError says what broke, so torch's
    loggers are held above error level, and its stderr output goes to fxdeploy's debug log."""
    # torch._logging sets levels on children; one without its own level takes its parent's. Each
    # setLevel clears every logger's cache, so only those with a level are set (not all ~300).
    children = [lg for n, lg in logging.root.manager.loggerDict.items()
                if n.startswith("torch.") and isinstance(lg, logging.Logger) and lg.level != logging.NOTSET]
    loggers = [logging.getLogger("torch"), *children]
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
