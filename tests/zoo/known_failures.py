"""Why a zoo model fails on a target, in one place: the tests turn each into a strict xfail, and
benchmarks/zoo.py lists them in benchmarks/README.md. A fixed failure makes its test XPASS,
which fails the run, so this table cannot go stale."""

from __future__ import annotations

from fxdeploy.errors import LoweringError

KNOWN_FAILURES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {
    ("rt_detr_small", "ncnn"): (
        "ncnn has no TopK, Gather or Select layer: RT-DETR's own query selection (RTDetrModel.forward, "
        "transformers/models/rt_detr/modeling_rt_detr.py: torch.topk over the encoder scores, then gather) "
        "stays in the engine part, and pnnx leaves torch.topk, torch.gather, Tensor.select and a dynamic "
        "Tensor.reshape unconverted (LoweringError at check_layers). Needs a host-side split before the "
        "query selection, or a substitution of it, to run on ncnn",
        LoweringError,
    ),
}
"""(model, target) -> (reason, the exception lowering raises)."""

NCNN_FIXED_HW: dict[str, str] = {
    "detr_small": (
        "with a dynamic H/W, DETR computes its sine position embedding and pixel mask from the input size at run "
        "time; pnnx keeps those ops dynamic and ncnn has no layer for them (torch.arange, torch.ones, torch.where, "
        "torch.ge, torch.flatten, torch.unbind, Tensor.index/expand/reshape/to, pnnx.Expression; the embedding's "
        "strided slices now become reshapes and selects), so lower() raises LoweringError at "
        "check_layers, advising a batch-only lowering. On ncnn this model gets a dynamic batch at one H/W"
    ),
    "yolos_small": (
        "with a dynamic H/W, pnnx keeps a torch.unbind (Tensor.select) that it folds away at a static size, and "
        "ncnn has no layer for it, so lower() raises LoweringError at check_layers, advising a batch-only lowering. "
        "The captured graph's only selects are YOLOS's own position-embedding interpolation "
        "(transformers/models/yolos/modeling_yolos.py: pos_embed[:, 0, :], interpolated_mid_position_embeddings[i]), "
        "which depends on H/W; the postprocess substitution has none. "
        "On ncnn this model gets a dynamic batch at one H/W"
    ),
}
"""Models whose H/W stays static on ncnn (every other target takes it dynamic)."""

HW_CAPTURE_FAILS: dict[str, str] = {
    "vit_small": (
        "torch.export specializes H and W: ViTEmbeddings.forward (transformers/models/vit/modeling_vit.py:152) "
        "tests `height != self.image_size[0]` and raises unless interpolate_pos_encoding=True; with it "
        "(a wrapper baking it in, since fxdeploy inputs are tensors only), ViTEmbeddings.interpolate_pos_encoding "
        "tests `num_patches == num_positions`, and torch.export still specializes H to 96 "
        "(guard 1 + (H//16)*(W//16) == 37)"
    ),
}
"""Models whose H/W cannot be dynamic: lowered with a dynamic batch only, on every target."""


_TORCHVISION_NCNN = (
    "what fxdeploy's host split has to take now runs on the host: the anchors and the transform's 0-d resize "
    "ratios, made without the inputs, are recomputed there, and the candidate selection ahead of the NMS "
    "(topk, ge, where, zeros_like, view_as, cat) moves there with it (tests/e2e/test_ncnn_anchor_detector.py). "
    "What remains is torchvision's own code ahead of them, which pnnx leaves as ops ncnn has no layer for "
    "(LoweringError at check_layers): strided slices (BoxCoder.decode_single's rel_codes[:, 0::4], "
    "clip_boxes_to_image's boxes[..., 0::2]) and selects on the batch axis (GeneralizedRCNNTransform: "
    "interpolate(image[None])[0], batched_imgs[i].copy_(img); the wrapper's unbind of the batch); Faster "
    "R-CNN's second stage adds gather, index and eq. Tried on SSD at batch 1, outside the repository: with "
    "those rewritten (contiguous slices, a select of a size-1 axis as a squeeze) it lowers and runs, but its "
    "detections differ from eager's (a box 48 px off; pnnx may drop the in-place copy into the padded batch). "
    "At batch 2 a list of images fixes the batch, and ncnn traces at batch 1 (LoweringError at trace)"
)
TORCHVISION_FAILURES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {
    (name, "ncnn"): (_TORCHVISION_NCNN, LoweringError) for name in ("retinanet", "fcos", "ssd", "faster_rcnn")
}
"""(torchvision model, target) -> (reason, the exception lowering raises); see test_zoo_torchvision.py."""


def known_failure_lines() -> list[str]:
    lines = [f"- {model} on {target}: {reason}" for (model, target), (reason, _) in KNOWN_FAILURES.items()]
    lines += [f"- {model}, dynamic H/W (every target): {reason}" for model, reason in HW_CAPTURE_FAILS.items()]
    lines += [f"- {model}, dynamic H/W on ncnn: {reason}" for model, reason in NCNN_FIXED_HW.items()]
    if TORCHVISION_FAILURES:
        models = ", ".join(model for model, _ in TORCHVISION_FAILURES)
        lines.append(f"- torchvision's {models} on ncnn: {_TORCHVISION_NCNN}")
    return lines
