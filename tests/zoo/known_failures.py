"""Why a zoo model fails on a target, in one place: the tests turn each into a strict xfail, and
benchmarks/zoo.py lists them in benchmarks/README.md. A fixed failure makes its test XPASS,
which fails the run, so this table cannot go stale."""

from __future__ import annotations

from fxdeploy.errors import LoweringError

KNOWN_FAILURES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {}
"""(model, target) -> (reason, the exception lowering raises)."""

NCNN_FIXED_HW: dict[str, str] = {}
"""Models whose H/W stays static on ncnn (every other target takes it dynamic)."""

_TORCHVISION_NCNN_BATCH = (
    "a list of images fixes the batch at 2, and ncnn runs one image at a time, so the graph is traced at "
    "batch 1 and the unbind of 2 images fails (LoweringError at trace: IndexError). At batch 1 RetinaNet, FCOS, "
    "SSD and Faster R-CNN lower and match eager: the host split takes the anchors, resize ratios and candidate "
    "selection (tests/e2e/test_ncnn_anchor_detector.py), and for Faster R-CNN the proposal selection with the "
    "elementwise work on what it gathered, then RoIAlign and the box head after the proposals' NMS "
    "(tests/e2e/test_ncnn_proposal_detector.py), and the ncnn passes respell torchvision's strided slices "
    "(strided_slices), its batch-axis selects (unit_selects) and its in-place copy into the padded batch, which "
    "pnnx had folded into constants (padded_copies; tests/e2e/test_ncnn_batch_images.py). Moving the unbind "
    "and the per-image normalize/resize/copy into a host stage ahead of the engine (as size-made values now "
    "are) would not be enough: in the graph captured at batch 2 every batch size after the copy is the "
    "constant 2 (RetinaNet's head reshapes with view(N, -1, K, H, W), N = 2), which an engine traced at one "
    "image cannot take. Needs a per-image capture of a batch-independent list model"
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
