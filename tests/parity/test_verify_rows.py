"""parity.verify.compare pairs detection rows per image, whether a leaf holds a batch or one image."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.errors import LoweringError
from fxdeploy.parity.verify import compare

BOXES = torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 5.0, 20.0, 30.0], [1.0, 2.0, 3.0, 4.0]])


def _compare(got: torch.Tensor, want: torch.Tensor, flag: bool | int) -> float:
    return compare("example", [], [got], [want], 1e-4, "onnxruntime", [flag]).max_abs_error


def test_one_images_rows_pair_in_any_order() -> None:
    assert _compare(BOXES[[1, 0, 2]], BOXES, 0) == 0.0


def test_one_images_rows_are_whole_boxes() -> None:
    """Row 0 with its x2 and y2 swapped has every coordinate somewhere in the image, but no row."""
    got = BOXES.clone()
    got[1] = torch.tensor([5.0, 5.0, 30.0, 20.0])
    with pytest.raises(LoweringError, match="output #0: image 0 row 1"):
        _compare(got, BOXES, 0)


def test_batched_rows_pair_per_image() -> None:
    want = torch.stack([BOXES, BOXES.flip(0)])
    assert _compare(want[:, [2, 0, 1]], want, 1) == 0.0
    swapped_images = want.flip(0).clone()
    swapped_images[0, 0] += 1.0  # image 0 no longer holds the same set
    with pytest.raises(LoweringError, match="image 0"):
        _compare(swapped_images, want, 1)


def test_unrecorded_dim_takes_the_batch_first() -> None:
    """Manifests written before rows_dim existed flag True: dim 1 of a batched leaf."""
    want = torch.stack([BOXES, BOXES])
    assert _compare(want[:, [1, 2, 0]], want, True) == 0.0


def test_an_image_without_detections_pairs_nothing() -> None:
    """An image whose threshold keeps nothing: zero rows of boxes and of keypoints ([0, 17, 3])."""
    assert _compare(BOXES[:0], BOXES[:0], 0) == 0.0
    assert _compare(torch.zeros(0, 17, 3), torch.zeros(0, 17, 3), 0) == 0.0
    assert _compare(torch.zeros(2, 0, 4), torch.zeros(2, 0, 4), 1) == 0.0


def test_leaves_of_one_detection_pair_together() -> None:
    """Boxes, scores, labels and keypoints are one detection: a runtime that reorders tied rows
    passes, while keypoints that moved to another detection fail, though every keypoint row exists
    somewhere (each leaf on its own would pair)."""
    scores, labels = torch.tensor([0.9, 0.5, 0.5]), torch.tensor([1, 2, 2])
    keypoints = torch.arange(3 * 2 * 3, dtype=torch.float32).reshape(3, 2, 3)
    want = [BOXES, scores, labels, keypoints]
    order = [0, 2, 1]
    got = [t[order] for t in want]
    assert compare("example", [], got, want, 1e-4, "onnxruntime", [0, 0, 0, 0]).max_abs_error == 0.0
    got[3] = keypoints[[1, 0, 2]]
    with pytest.raises(LoweringError, match=r"outputs #0, #1, #2, #3: image 0 row 0: output #3 differs"):
        compare("example", [], got, want, 1e-4, "onnxruntime", [0, 0, 0, 0])


def test_a_label_is_part_of_the_detection() -> None:
    labels = torch.tensor([1, 2, 2])
    with pytest.raises(LoweringError, match=r"image 0 row 0: missing label 1"):
        compare("example", [], [BOXES, labels.flip(0)], [BOXES, labels], 1e-4, "onnxruntime", [0, 0])


@pytest.mark.parametrize(("precision", "atol"), [("fp16", 1e-2), ("bf16", 3e-2), ("int8", 0.1)])
def test_reduced_precision_still_compares_detections(precision: str, atol: float) -> None:
    """fp16, bf16 and INT8 artifacts' detections are paired and compared at the check's tolerance
    (they were skipped once): a score within it passes, one beyond it, or a box moved, is refused."""
    from fxdeploy.parity.rows import RowsSpec

    spec = RowsSpec(0, "nms", iou_threshold=0.5, score_thresholds=(0.05,))
    scores, labels = torch.tensor([0.9, 0.6, 0.3]), torch.tensor([1, 2, 2])
    want = [BOXES, scores, labels]

    def check(got: list[torch.Tensor]) -> float:
        return compare("example", [], got, want, atol, "onnxruntime", [spec] * 3, precision).max_abs_error

    assert check([BOXES, scores + atol / 2, labels]) == pytest.approx(atol / 2)
    with pytest.raises(LoweringError, match=r"image 0"):
        check([BOXES, scores + atol * 3, labels])
    moved = BOXES.clone()
    moved[1] += 8.0  # INT8 may lose a few detections (5%), but not one of three
    with pytest.raises(LoweringError, match=r"image 0 row 1: missing|2 of eager's 3 detections paired"):
        check([moved, scores, labels])


def test_each_images_rows_pair_on_their_own_where_each_image_has_its_nms() -> None:
    """A list of per-image dicts (``[{"boxes", "scores", "labels"}] * 2``, one NMS an image) holds
    both images' rows at one padded size: grouped together, the second image's rows were paired by
    the first image's boxes, and two tied detections the runtime kept in the other order (fp16)
    were refused. Each NMS's rows pair on their own; a wrong detection is still refused."""
    from fxdeploy.parity.rows import RowsSpec

    first, second = (RowsSpec(0, "nms", iou_threshold=0.5, score_thresholds=(0.05,), nms=n) for n in (0, 1))
    scores, labels = torch.tensor([0.9, 0.6, 0.6]), torch.tensor([1, 2, 2])
    other = BOXES.flip(0) + 40.0
    want = [BOXES, scores, labels, other, scores, labels]
    swapped = [0, 2, 1]  # image 1's tied rows 1 and 2 in the other order
    got = [BOXES, scores, labels, other[swapped], scores[swapped], labels[swapped]]
    assert compare("example", [], got, want, 1e-2, "onnxruntime", [first] * 3 + [second] * 3, "fp16").max_abs_error == 0
    moved = other[swapped].clone()
    moved[0] += 8.0  # the top detection, tied with none
    with pytest.raises(LoweringError, match=r"image 0 row"):
        compare("example", [], [*got[:3], moved, *got[4:]], want, 1e-2, "onnxruntime", [first] * 3 + [second] * 3)


def test_int8_pairs_most_detections_and_counts_the_rest() -> None:
    """INT8 may lose a detection or gain one (a flip at a threshold, an argmax between close classes):
    at least 95% of eager's must pair (label, IoU >= 0.9); the others are counted."""
    from fxdeploy.parity.rows import RowsSpec

    spec = RowsSpec(0, "nms", iou_threshold=0.5, score_thresholds=(0.05,))
    count = 40
    boxes = torch.stack([torch.tensor([0.0, 0.0, 10.0, 10.0]) + 20.0 * i for i in range(count)])
    scores, labels = torch.linspace(0.9, 0.3, count), torch.zeros(count, dtype=torch.long)
    kept = list(range(count - 2))  # 38 of 40 (95%) pair
    checked = compare("example", [], [boxes[kept], scores[kept], labels[kept]], [boxes, scores, labels], 0.1,
                      "onnxruntime", [spec] * 3, "int8")
    assert checked.excused == {"int8_unpaired": 2}
    kept = list(range(count - 3))  # 37 of 40: below 95%
    with pytest.raises(LoweringError, match=r"37 of eager's 40 detections paired \(label, IoU >= 0.9\); an INT8 "
                                            r"artifact must pair at least 95%"):
        compare("example", [], [boxes[kept], scores[kept], labels[kept]], [boxes, scores, labels], 0.1,
                "onnxruntime", [spec] * 3, "int8")


def test_int8_tensors_are_bounded_as_noise() -> None:
    """INT8 tensor leaves: noise over every element passes where one element at 11% of the range
    would fail fp32's rule; a systematic error (one class's logits off) or one element far off fails."""
    from fxdeploy.parity.closeness import INT8_ATOL, INT8_MAX_ERROR, INT8_RMS

    generator = torch.Generator().manual_seed(0)
    want = torch.randn(64, 10, generator=generator) * 4
    scale, rms_scale = float(want.abs().max()), float(want.pow(2).mean().sqrt())
    noise = torch.randn(64, 10, generator=generator) * 0.05 * rms_scale
    noise[0, 0] = 0.11 * scale  # past INT8_ATOL of the range, within INT8_MAX_ERROR
    got = want + noise
    assert compare("example", [want], got, want, INT8_ATOL, "t", precision="int8").max_abs_error > INT8_ATOL * scale
    with pytest.raises(LoweringError, match="differs from eager by"):
        compare("example", [want], got, want, INT8_ATOL, "t")  # fp32's rule at the same atol refuses it
    shifted = want.clone()
    shifted[:, 3] += 2 * INT8_RMS * rms_scale * 10 ** 0.5  # one class of ten: RMS error 2 x INT8_RMS
    with pytest.raises(LoweringError, match="RMS"):
        compare("example", [want], shifted, want, INT8_ATOL, "t", precision="int8")
    spike = want.clone()
    spike[5, 5] += 1.1 * INT8_MAX_ERROR * scale
    with pytest.raises(LoweringError, match="at one element"):
        compare("example", [want], spike, want, INT8_ATOL, "t", precision="int8")


def test_a_half_output_is_compared_to_its_own_rounding() -> None:
    """A float16 output one fp16 step off passes at fp32's atol; two steps' worth more is refused."""
    want = torch.tensor([0.3, 0.7, 0.45], dtype=torch.float16)
    step = torch.finfo(torch.float16).eps
    assert _compare(want + torch.tensor([0.0, step / 2, 0.0], dtype=torch.float16), want, False) > 1e-4
    with pytest.raises(LoweringError, match="differs from eager"):
        _compare(want + torch.tensor([0.0, 3 * step, 0.0], dtype=torch.float16), want, False)


def test_an_integer_tensor_is_held_element_by_element() -> None:
    """A wrapped small code (an int8 -56 computed without wrap-around: 127) beside a code of 5e6:
    a tolerance scaled by the tensor's largest value (500) let it pass."""
    want = torch.tensor([[-56, 29, 100], [5_000_000, 50_000, 0]], dtype=torch.int32)
    wrapped = want.clone()
    wrapped[0, 0] = 127
    with pytest.raises(LoweringError, match="an integer element is 127 where eager's is -56"):
        compare("example", [], wrapped, want, 1e-4, "openvino")
    rounded = want.clone()
    rounded[1, 0] += 1  # a float truncated to a large integer: its rounding's slack stays
    assert compare("example", [], rounded, want, 1e-4, "openvino").max_abs_error == 1
    floats = want.float()
    floats[0, 0] = -55.5  # a float tensor keeps its tensor-wide scale
    assert compare("example", [], floats, want.float(), 1e-4, "openvino").max_abs_error == 0.5
