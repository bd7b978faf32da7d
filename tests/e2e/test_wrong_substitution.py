"""A wrong substitution cannot hide: lower() checks the artifact against the model the user gave
(run eagerly, with no substitution), and ``fxdeploy compare`` checks every per-detection field.

TinyPose has YOLOX-Pose's shape: per anchor a box, a score and 17 keypoints; per image a score
filter, an NMS, ``[:k]`` and gathers, returning a list of dicts with keypoints. Its
hand-written tensor-only replacement gathers the keypoints one anchor off, the slip a per-model
rewriter makes.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from examples.pose import unpack  # padded rows and keypoints as a list of dicts, cut at each count
from fxdeploy import Substitution
from fxdeploy.parity import compare_outputs

KEYPOINTS = 17


class TinyPose(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, 5 + 3 * KEYPOINTS, 8, stride=8)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        raw = self.head(images).flatten(2).transpose(1, 2)  # [B, N, 56]
        xy = raw[..., :2] * 20 + 40
        boxes = torch.cat([xy, xy + raw[..., 2:4].abs() * 20 + 4], -1)
        keypoints = raw[..., 5:].unflatten(-1, (KEYPOINTS, 3)) * 30
        return self.postprocess(boxes, raw[..., 4].sigmoid(), keypoints)

    def postprocess(self, boxes: torch.Tensor, scores: torch.Tensor, keypoints: torch.Tensor) -> list[dict]:
        out = []
        for b in range(len(boxes)):
            keep = scores[b] > 0.4
            kept_boxes, kept_scores, kept_points = boxes[b][keep], scores[b][keep], keypoints[b][keep]
            kept = fxdeploy.ops.nms(kept_boxes, kept_scores, 0.5)[:50]
            out.append({"boxes": kept_boxes[kept], "scores": kept_scores[kept],
                        "labels": torch.zeros_like(kept), "keypoints": kept_points[kept]})
        return out


def off_by_one(self: TinyPose, boxes: torch.Tensor, scores: torch.Tensor, keypoints: torch.Tensor) -> tuple:
    """The replacement with the slip: keypoints gathered at the next anchor."""
    det_boxes, det_scores, det_labels, counts, index = fxdeploy.ops.multiclass_nms(
        boxes, scores.unsqueeze(-1), iou_threshold=0.5, score_threshold=0.4, max_output_boxes_per_class=50,
        keep_top_k=50, output_index=True,
    )
    shifted = (index + 1).clamp(0, boxes.shape[1] - 1)  # BUG (on purpose): one anchor off
    points = torch.gather(keypoints, 1, shifted[..., None, None].expand(-1, -1, KEYPOINTS, 3))
    return det_boxes, det_scores, det_labels, counts, points


def _model_and_images() -> tuple[TinyPose, torch.Tensor]:
    torch.manual_seed(0)
    model = TinyPose().eval()
    images = torch.rand(2, 3, 96, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert all(len(d["scores"]) >= 10 for d in model(images))
    return model, images


@pytest.mark.parametrize("settings", [fxdeploy.Settings(), fxdeploy.Settings(precision="fp16", atol=1e-2)],
                         ids=["fp32", "fp16"])
def test_lower_refuses_the_wrong_substitution(settings: fxdeploy.Settings) -> None:
    """At fp16 too: the check against the model itself once ran at fp32 only."""
    model, images = _model_and_images()
    wrong = {TinyPose.postprocess: Substitution(TinyPose.postprocess, off_by_one, unpack=unpack)}
    with pytest.raises(fxdeploy.FxDeployError, match="keypoints"):
        fxdeploy.lower(model, (images,), target="onnxruntime", substitutions=wrong, settings=settings)


def test_without_substitution_the_keypoints_match() -> None:
    model, images = _model_and_images()
    deployed = fxdeploy.lower(model, (images,), target="onnxruntime")  # lower()'s own check passes
    with torch.no_grad():
        want = model(images)
    results = compare_outputs(want, deployed(images))
    assert [r.kind for r in results] == ["detections"] and all(r.ok for r in results), [r.detail for r in results]


def test_compare_catches_a_wrong_per_detection_field() -> None:
    model, images = _model_and_images()
    wrong = {TinyPose.postprocess: Substitution(TinyPose.postprocess, off_by_one, unpack=unpack)}
    # this test's subject is what lower()'s check catches: with it off, a wrong artifact is written,
    # marked unverified, and fxdeploy compare still reports it
    deployed = fxdeploy.lower(model, (images,), target="onnxruntime", substitutions=wrong,
                              settings=fxdeploy.Settings(verify=False))
    with torch.no_grad():
        want = model(images)
    (result,) = compare_outputs(want, deployed(images))
    assert result.kind == "detections" and not result.ok
    assert all(m.unmatched_ref == 0 and m.unmatched_got == 0 for m in result.images)  # boxes and scores agree
    assert "keypoints differs" in result.detail
