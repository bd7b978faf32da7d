"""Detectors written the way users write them (examples/idioms.py: YOLOv5's NMS loop, CenterNet's
max-pool peaks, DETR's post-process, FCOS, YOLOv8 seg / pose / OBB, SSD, RetinaFace, NanoDet),
lowered with the default settings and no substitution to every target, each at a dynamic batch:
batch 1 and 3 must match eager detection by detection, before and after save/load. A user's own
``while`` NMS loop must be refused with a message that says what to write instead.
"""

from __future__ import annotations

import functools

import pytest
import torch

import fxdeploy
from examples import idioms
from fxdeploy.capture.substitution import builtin_substitutions
from fxdeploy.errors import CaptureError, LoweringError, PassError
from fxdeploy.parity import Detections
from fxdeploy.parity.excuses import Context
from fxdeploy.passes.padding.rule import CompactionError
from tests.detections import assert_no_problems, compare_images
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]
DYNAMIC = {"images": {0: ("batch", 1, 8)}}
CHECKS = ((1, 3), (3, 1))
"""(batch, seed) of the images checked: in each, the first two images hold exact score ties."""

CAPS = {"yolov5": 300, "centernet": 100, "detr": 256, "fcos": 100, "yolo_seg": 100, "yolo_obb": 100,
        "yolo_pose": 100, "ssd": 200, "retinaface": 150, "nanodet": 100}
"""Each model's cap on detections per image (max_det, top-k, queries): a count at the cap would let
tie-breaking decide which detections are in the set."""
NMS_IOU = {"yolov5": 0.45, "fcos": 0.6, "yolo_seg": 0.5, "yolo_obb": 0.45, "yolo_pose": 0.6, "ssd": 0.45,
           "retinaface": 0.4, "nanodet": 0.5}
"""Each model's NMS IoU threshold: of two candidates at one score (the repeated patch's exact ties)
that overlap past it, the NMS keeps the one its sort visited first, and torch's default sort leaves
equal keys in any order; either is right (docs/checking.md, the tie rule). CenterNet and DETR have
no NMS: their ties must agree exactly."""


def in_make_test(test: str, params: dict) -> bool:
    """``make test``: every model on ONNX Runtime, and each model on one more target in turn
    (OpenVINO, TorchScript, ncnn); ``make test-full``: every model on every target."""
    if "lowered" not in params:
        return True
    name, target = params["lowered"]
    return target == "onnxruntime" or TARGETS[1 + list(idioms.FACTORIES).index(name) % 3] == target


def detections(output: list) -> list[Detections]:
    """Each image's detections, whatever the model returns: YOLO's [n, 6] rows (x1, y1, x2, y2, score,
    label), OBB's [n, 7] rows (x, y, w, h, score, label, angle: paired on the axis-aligned box, the
    rotated box compared as a field), or dicts whose keys past boxes/scores/labels are fields."""
    out = []
    for r in output:
        if isinstance(r, dict):
            fields = {k: v for k, v in r.items() if k not in ("boxes", "scores", "labels")}
            out.append(Detections(r["boxes"], r["scores"], r.get("labels"), fields))
        elif r.shape[1] == 6:
            out.append(Detections(r[:, :4], r[:, 4], r[:, 5].long()))
        else:
            xy, wh = r[:, :2], r[:, 2:4]
            out.append(Detections(torch.cat((xy - wh / 2, xy + wh / 2), 1), r[:, 4], r[:, 5].long(),
                                  {"rotated_box": r[:, [0, 1, 2, 3, 6]]}))
    return out


def assert_same_outputs(want: list, got: list, name: str) -> None:
    """Same structure (a list per image, the same dict keys or row width), then detection by detection:
    paired by label and IoU, every field (masks, keypoints, landmarks, rotated boxes) compared."""
    assert isinstance(got, list) and len(got) == len(want), f"{type(got).__name__} of {len(got)}, want {len(want)}"
    for w, g in zip(want, got, strict=True):
        if isinstance(w, dict):
            assert isinstance(g, dict) and set(g) == set(w), f"keys {sorted(g)}, want {sorted(w)}"
            assert all(g[k].dtype == w[k].dtype for k in w), {k: (g[k].dtype, w[k].dtype) for k in w}
        else:
            assert g.dim() == 2 and g.shape[1] == w.shape[1] and g.dtype == w.dtype, (g.shape, w.shape)
    ctx = Context(iou_threshold=NMS_IOU.get(name), score_eps=1e-4) if name in NMS_IOU else None
    assert_no_problems(compare_images(detections(want), detections(got), iou=0.99, score_atol=1e-4, ctx=ctx))


@pytest.mark.parametrize("name", list(idioms.FACTORIES))
def test_inputs_make_parity_meaningful(name: str) -> None:
    """30-200 detections per image with spread scores, under the model's cap; exact ties (equal
    scores at different boxes) in the images with the repeated patch, and only there."""
    model, _ = idioms.FACTORIES[name]()
    for batch, seed in CHECKS:
        with torch.no_grad():
            out = detections(model(idioms.images(batch, seed)))
        for i, dets in enumerate(out):
            n, distinct = len(dets), len(dets.scores.unique())
            assert 30 <= n <= 200 and n < CAPS[name], f"image {i} of batch {batch}: {n} detections"
            assert distinct >= 30, f"image {i} of batch {batch}: {distinct} distinct scores"
            equal = dets.scores[:, None] == dets.scores[None, :]
            moved = (dets.boxes[:, None] - dets.boxes[None, :]).abs().amax(-1) > 1
            ties = bool((equal & moved).any())
            assert ties == (i < 2), f"image {i} of batch {batch}: exact ties at different boxes {ties}"


def test_fcos_top_k_cuts_between_distinct_scores() -> None:
    """FCOS's topk(min(n, k)) binds on the stride-8 level of some images, and never inside a run of
    equal scores: there, which anchors make the cut would be tie-breaking, not the model."""
    model, example = idioms.fcos()
    k, binds = model.topk_candidates, 0
    for x in (example[0], *(idioms.images(b, s) for b, s in CHECKS)):
        with torch.no_grad():
            p3 = model.features(x)[0]
            scores = torch.sqrt(model.cls_score(p3).sigmoid() * model.centerness(p3).sigmoid()).flatten(1)
        for ranked in scores.sort(1, descending=True).values:
            if int((ranked > model.score_thresh).sum()) > k:
                binds += 1
                assert ranked[k - 1] != ranked[k], f"a tie at the top-{k} cut: {ranked[k - 2:k + 2].tolist()}"
    assert binds >= 2, f"top-{k} binds on {binds} images"


@functools.cache
def built(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """One model object per idiom for the module, never changed by a test: its lowering for a second
    target starts from the first one's capture (fxdeploy.capture.memo), as in a user's process."""
    return idioms.FACTORIES[name]()


@pytest.fixture(scope="module", params=[(m, t) for m in idioms.FACTORIES for t in TARGETS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def lowered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """One model lowered to one target with the default settings (lower()'s own check included),
    and the same artifact saved and loaded back."""
    name, target = request.param
    require_target(target)
    model, example = built(name)
    deployed = fxdeploy.lower(model, example, target=target, dynamic_shapes=DYNAMIC)
    builtin = {s.name for s in builtin_substitutions()}  # torchvision's NMS functions, where installed
    assert set(deployed.manifest["info"]["substitutions"]) <= builtin
    path = tmp_path_factory.mktemp(name) / target
    deployed.save(path)
    return name, model, {"lowered": deployed, "loaded": fxdeploy.load(path)}


@pytest.mark.parametrize("runner", ["lowered", "loaded"])
@pytest.mark.parametrize(("batch", "seed"), CHECKS)
def test_matches_eager(lowered: tuple, runner: str, batch: int, seed: int) -> None:
    name, model, runners = lowered
    x = idioms.images(batch, seed)
    with torch.no_grad():
        want = model(x)
    assert_same_outputs(want, runners[runner](x), name)


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_while_nms_is_refused_with_what_to_write(target: str) -> None:
    """``while order.numel() > 0`` keeps a number of boxes no static graph can hold: fxdeploy must
    refuse it, name the user's line, and name the substitution to write (or fxdeploy.ops.nms)."""
    require_target(target)
    model, example = idioms.while_loop_nms()
    with pytest.raises((CaptureError, LoweringError, PassError, CompactionError)) as info:
        fxdeploy.lower(model, example, target=target, dynamic_shapes=DYNAMIC)
    message = str(info.value)
    assert "fxdeploy.substitute" in message or "fxdeploy.ops.nms" in message, message
    assert "idioms.py" in message and "python_nms" in message, message
