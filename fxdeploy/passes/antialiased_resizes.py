"""An antialiased resize (``F.interpolate(..., antialias=True)``) as weighted sums of gathered rows and columns.

``aten._upsample_bilinear2d_aa`` and ``_upsample_bicubic2d_aa`` (torchvision's ``Resize`` on
tensors antialiases by default) become ONNX's ``Resize`` with ``antialias=1``, which OpenVINO's
importer (2026.4) reads as a plain resize (a 16x24 -> 5x7 downscale differed from eager by 0.48),
and whose cubic weights on ONNX Runtime are not torch's (0.81 off): lower()'s check refused them.

The resize is linear and separable: each output row is a weighted sum of a few neighbouring input
rows, each output column of input columns. The weights are torch's own: its resize of the identity
matrix along one axis ([out, in], computed here with the node's arguments), cut to each output's
``k`` taps from its first nonzero weight. In the graph, per axis: an ``index_select`` of the taps,
a view to [..., out, k, ...], a product with the weights and a sum over k; eager's values up to the
order of the sums. Only where the input and output heights and widths are static (the weights are
constants); with a dynamic one the target refuses the model, naming the resize (``refuse_left``):
OpenVINO any, ONNX Runtime a bicubic one.
"""

from __future__ import annotations

import torch
from torch._guards import detect_fake_mode

from fxdeploy.errors import LoweringError
from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
RESIZES = {aten._upsample_bilinear2d_aa.default: "bilinear", aten._upsample_bilinear2d_aa.vec: "bilinear",
           aten._upsample_bicubic2d_aa.default: "bicubic", aten._upsample_bicubic2d_aa.vec: "bicubic"}


def antialiased_resizes(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        x, align_corners, scales = node.args[0], node.args[2], _scales(node)
        sizes, dtype = zip(x.meta["val"].shape[-2:], node.meta["val"].shape[-2:], strict=True), x.meta["val"].dtype
        fake = detect_fake_mode([x.meta["val"]])
        out = x
        with gm.graph.inserting_before(node):
            for axis, (size, size_out), scale in zip((-2, -1), sizes, scales, strict=True):
                dense = _weights(RESIZES[node.target], size, size_out, align_corners, scale, dtype)
                index, weight = _taps(dense, axis)
                constants = []
                for name, tensor in (("index", index), ("weight", weight)):
                    attr = f"_fxdeploy_antialias_{node.name}_{axis + 2}_{name}"
                    gm.register_buffer(attr, tensor)
                    constants.append(gm.graph.get_attr(attr))
                    constants[-1].meta["val"] = fake.from_tensor(tensor, static_shapes=True) if fake else tensor
                steps: list[torch.fx.Node] = []
                out = _weighted_taps(gm.graph, out, axis, size_out, *constants, index.numel() // size_out, steps)
                for inserted in steps:
                    inserted.meta.update({k: v for k, v in node.meta.items() if k != "val"})
                fill_meta(steps)  # the height pass's values, which the width pass reads
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _taps(dense: torch.Tensor, axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[out, size] weights as each output's ``k`` taps: the input positions from its first nonzero
    weight on (flattened, [out * k]) and their weights ([out, k], with a unit dim after for the
    height axis); a shorter row repeats its last position with weight 0."""
    nonzero = dense != 0
    first = nonzero.float().argmax(1)
    last = dense.shape[1] - 1 - nonzero.flip(1).float().argmax(1)
    k = int((last - first).max()) + 1
    index = torch.minimum(first[:, None] + torch.arange(k), last[:, None])
    weight = torch.where(first[:, None] + torch.arange(k) <= last[:, None], dense.gather(1, index), 0.0)
    return index.flatten(), weight[:, :, None] if axis == -2 else weight


def _weighted_taps(
    graph: torch.fx.Graph, x: torch.fx.Node, axis: int, size_out: int, index: torch.fx.Node, weight: torch.fx.Node,
    k: int, new: list[torch.fx.Node],
) -> torch.fx.Node:
    """Each output along ``axis``: its taps gathered, [..., out, k, ...], weighted and summed over k."""
    def call(target: object, *args: object) -> torch.fx.Node:
        new.append(graph.call_function(target, args))
        return new[-1]

    value = x.meta["val"]
    rank = value.dim()
    shape: list[object] = [d if isinstance(d, int) else call(aten.sym_size.int, x, i)
                           for i, d in enumerate(value.shape)]
    shape[rank + axis: rank + axis + 1] = [size_out, k]
    gathered = call(aten.view.default, call(aten.index_select.default, x, rank + axis, index), shape)
    return call(aten.sum.dim_IntList, call(aten.mul.Tensor, gathered, weight), [axis if axis == -1 else -2])


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` is an antialiased resize of a float input between static heights and widths."""
    if node.op != "call_function" or node.target not in RESIZES:
        return "not an antialiased resize"
    value, out = node.args[0].meta.get("val"), node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return "its input is not a float tensor"
    sizes = [*value.shape[-2:], *out.shape[-2:]]
    if not all(isinstance(s, int) for s in sizes):
        return "a height or width is dynamic: its weights would not be constants"
    return None


def refuse_left(gm: torch.fx.GraphModule, target: str, modes: tuple[str, ...]) -> None:
    """Refuse an antialiased resize of ``modes`` left in ``gm`` (a dynamic height or width), which
    ``target`` computes otherwise than torch."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and RESIZES.get(node.target) in modes:
            raise LoweringError(
                f"{target}: an antialiased {RESIZES[node.target]} resize at {call_site(node)} "
                f"({check(node) or 'not rewritten'}). {target} computes ONNX's antialiased Resize otherwise than "
                "torch, so fxdeploy writes it as weighted sums of gathered rows and columns, whose weights need "
                "static sizes: lower with a static height and width, or use target 'torchscript'"
            )


def _scales(node: torch.fx.Node) -> tuple[float | None, float | None]:
    """The scale factors the resize was given (None: computed from the sizes); the ``.vec`` overload
    holds them as one list, the default one as two arguments."""
    if node.target in (aten._upsample_bilinear2d_aa.vec, aten._upsample_bicubic2d_aa.vec):
        factors = node.args[3] if len(node.args) > 3 else None
        return (None, None) if factors is None else (factors[0], factors[1])
    return (node.args[3] if len(node.args) > 3 else None, node.args[4] if len(node.args) > 4 else None)


def _weights(
    mode: str, size: int, out: int, align_corners: bool, scale: float | None, dtype: torch.dtype,
) -> torch.Tensor:
    """[out, size]: torch's antialiased resize of the identity along one axis (the other kept at 1)."""
    eye = torch.eye(size, dtype=torch.float64 if dtype == torch.float64 else torch.float32)[:, None, None, :]
    scales = None if scale is None else (1.0, scale)
    resized = torch.nn.functional.interpolate(
        eye, size=None if scales else (1, out), scale_factor=scales, mode=mode, align_corners=align_corners,
        antialias=True, recompute_scale_factor=False if scales else None,
    )
    return resized[:, 0, 0, :].t().contiguous().to(dtype)
