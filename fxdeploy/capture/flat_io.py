"""The captured graph's flat inputs and outputs: their names, which input sizes are symbolic and
over which ranges, and the output structure that capture must keep.

The exported program's placeholders become identifier names, its root symbols (s0, s77) the dim
names the user gave through torch.export.Dim, and its outputs ONNX-safe leaf names. The graph
module itself is made flat: tensors in, a tuple of leaves out.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx.graph import CodeGen
from torch.utils import _pytree as pytree

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.artifact import guards, structure
from fxdeploy.capture import substitution
from fxdeploy.errors import CaptureError


@dataclass
class Inputs:
    """An exported program's user inputs, as the artifact takes them."""

    names: list[str]
    shapes: list[list[int | str]]
    dims: dict[str, dims_mod.DimRange]
    symbol_names: dict[str, str]
    export_shapes: list[dict[int, Any] | None]
    guards: list[str]


def require_tensors(flat_inputs: list[Any]) -> None:
    """Every input leaf must be a tensor: the artifact takes tensors only."""
    for i, leaf in enumerate(flat_inputs):
        if not isinstance(leaf, torch.Tensor):
            raise CaptureError(
                f"input leaf #{i} is {type(leaf).__name__} ({leaf!r}); fxdeploy inputs must be "
                "tensors (bake constants into the model, e.g. with functools.partial)"
            )


def inputs_of(ep: torch.export.ExportedProgram, flat_inputs: list[torch.Tensor], opts: dict[str, int]) -> Inputs:
    """The program's user inputs: their names, their shapes over the dims' names, each dim's range
    (its opt: the user's ``opts``, else its size in ``flat_inputs``) and torch.export's guards."""
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
    names = [clean(n) for n in user_inputs]
    kept_guards = guards.from_export(getattr(ep, "_guards_code", None) or [], dict(zip(names, shapes, strict=True)))
    return Inputs(names, shapes, dims, symbol_names, export_shapes, kept_guards)


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


def clean(name: str) -> str:
    """A name as an identifier: any other character becomes an underscore."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def unique_outputs(names: list[str], inputs: list[str]) -> list[str]:
    """ONNX needs distinct value names: an output named like an input gets an '_out' suffix."""
    taken = {clean(n) for n in inputs}
    unique = []
    for name in names:
        while name in taken:
            name += "_out"
        taken.add(name)
        unique.append(name)
    return unique


def make_flat(gm: torch.fx.GraphModule) -> None:
    """Plain codegen: flat tensors in, a flat tuple out, no pytree (un)flattening or guard hooks."""
    gm._forward_pre_hooks.clear()
    gm.graph._codegen = CodeGen()
    gm.recompile()


def check_structure(
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


def plain_outputs(model: torch.nn.Module) -> torch.nn.Module:
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
