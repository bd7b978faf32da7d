"""Why a zoo model fails on a target, in one place: the tests turn each into a strict xfail, and
benchmarks/zoo.py lists them in benchmarks/README.md. A fixed failure makes its test XPASS,
which fails the run, so this table cannot go stale."""

from __future__ import annotations

from fxdeploy.errors import LoweringError

KNOWN_FAILURES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {}
"""(model, target) -> (reason, the exception lowering raises)."""

NCNN_FIXED_HW: dict[str, str] = {
    "rt_detr_small": (
        "with a dynamic H/W, RT-DETR makes its anchors and valid mask (RTDetrModel._cached_generate_anchors) "
        "and its encoder's 2-D sin-cos position embedding from the feature-map sizes at run time; pnnx keeps "
        "those ops dynamic and ncnn has no layer for them (torch.arange, aten::meshgrid, aten::outer, "
        "torch.ones_like, torch.gt/lt, aten::all, torch.where, Tensor.to, the anchors' stack as a "
        "Tensor.reshape, pnnx.Expression), so lower() raises LoweringError at check_layers, advising a "
        "batch-only lowering. (It used to stop earlier, at torch.jit.trace, on RT-DETR's spatial_shapes[l, 0] = "
        "height: aten.scalar_tensor of a run-time size; traceable_sizes now respells it, "
        "tests/lowering/test_traceable_sizes.py.) What would lift it: these values depend on the image's size "
        "only, so a host stage ahead of the first engine could compute them and feed them in as inputs; not "
        "built. A probe (those three values, [N, 4] anchors, [N, 1] mask, [HW, 64] embedding, fed to the encoder "
        "by hand) shows pnnx then converts the whole encoder stage; the decoder stage at a dynamic size was not "
        "probed, and the inputs carry no batch axis, which the ncnn lowering and executor would have to accept "
        "(fed whole to every image). At one H/W it lowers and matches eager: the query selection (topk, gather) "
        "runs in a host stage "
        "between two engine stages, and the decoder's deformable attention is substituted by a "
        "four-dims-per-image version (examples/zoo_deformable.py). On ncnn this model gets a dynamic batch at "
        "one H/W"
    ),
    "detr_small": (
        "with a dynamic H/W, DETR computes its sine position embedding and pixel mask from the input size at run "
        "time; pnnx keeps those ops dynamic and ncnn has no layer for them (torch.arange, torch.ones, torch.where, "
        "torch.ge, torch.flatten, torch.unbind, Tensor.index/expand/reshape/to, pnnx.Expression; the embedding's "
        "strided slices now become reshapes and selects), so lower() raises LoweringError at "
        "check_layers, advising a batch-only lowering. What would lift it: a host stage ahead of the first "
        "engine computing those size-made values (as for RT-DETR). A probe (the values fed to the engine as "
        "inputs, by hand) shows what would remain: pnnx then converts everything but the reshape of the "
        "encoder's attention mask inside its MultiHeadAttention fusion (Tensor.reshape at a dynamic size, two "
        "layers). On ncnn this model gets a dynamic batch at one H/W"
    ),
}
"""Models whose H/W stays static on ncnn (every other target takes it dynamic)."""

_TORCHVISION_NCNN_BATCH = (
    "a list of images fixes the batch at 2, and ncnn runs one image at a time, so the graph is traced at "
    "batch 1 and the unbind of 2 images fails (LoweringError at trace: IndexError). At batch 1 RetinaNet, FCOS, "
    "SSD and Faster R-CNN lower and match eager: the host split takes the anchors, resize ratios and candidate "
    "selection (tests/e2e/test_ncnn_anchor_detector.py), and for Faster R-CNN the proposal selection with the "
    "elementwise work on what it gathered, then RoIAlign and the box head after the proposals' NMS "
    "(tests/e2e/test_ncnn_proposal_detector.py), and the ncnn passes respell torchvision's strided slices "
    "(strided_slices), its batch-axis selects (unit_selects) and its in-place copy into the padded batch, which "
    "pnnx had folded into constants (padded_copies; tests/e2e/test_ncnn_batch_images.py). Needs a per-image "
    "capture of a batch-independent list model"
)
TORCHVISION_FAILURES: dict[tuple[str, str, int], tuple[str, type[BaseException]]] = {
    **{
        (name, "ncnn", 2): (_TORCHVISION_NCNN_BATCH, LoweringError)
        for name in ("retinanet", "fcos", "ssd", "faster_rcnn")
    },
}
"""(torchvision model, target, batch) -> (reason, the exception lowering raises); see test_zoo_torchvision.py."""


def known_failure_lines() -> list[str]:
    lines = [f"- {model} on {target}: {reason}" for (model, target), (reason, _) in KNOWN_FAILURES.items()]
    lines += [f"- {model}, dynamic H/W on ncnn: {reason}" for model, reason in NCNN_FIXED_HW.items()]
    by_reason: dict[str, list[str]] = {}
    for (model, target, batch), (reason, _) in TORCHVISION_FAILURES.items():
        by_reason.setdefault(reason, []).append(f"{model} on {target} at batch {batch}")
    lines += [f"- torchvision's {', '.join(cases)}: {reason}" for reason, cases in by_reason.items()]
    return lines
