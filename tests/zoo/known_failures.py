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
        "torch.ge, Tensor.index/slice/expand/to, pnnx.Expression), so lower() raises LoweringError at "
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
    "torchvision's detectors compute their anchors inside forward (AnchorGenerator: 0-d strides and aranges "
    "over the static feature sizes), and the NMS on the host needs them; ncnn's engine outputs are per image "
    "(dim 0 the batch), so lower() raises LoweringError ('engine output ... must have the batch as dim 0'). "
    "Recomputing such input-free values on the host (tried) only reaches the next two: the per-level top-k "
    "ahead of NMS leaves torch.topk, torch.ge, torch.where, Tensor.slice, view_as and unbind, which ncnn has "
    "no layer for, in the engine part; and a list of images fixes the batch, while ncnn traces at batch 1 "
    "(batch 2 cannot lower). Needs the host split to take the candidate selection and input-free values"
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
