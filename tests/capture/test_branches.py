"""branches: a capture stopped by a data-dependent guard says, in fxdeploy's words, which line read
what, and which function to substitute. The model is torchvision's Mask R-CNN mask pasting in
small: a size branch on the kept rows (``if box_sum > 0``, which the example decides), then a
per-detection Python loop whose sizes and slices come from box values."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.capture import capture
from fxdeploy.capture.branches import explain, parse
from fxdeploy.errors import CaptureError
from fxdeploy.settings import CaptureSettings, Settings


def paste_one(mask: torch.Tensor, box: torch.Tensor, size: int) -> torch.Tensor:
    w = max(int(box[2] - box[0] + 1), 1)
    h = max(int(box[3] - box[1] + 1), 1)
    mask = F.interpolate(mask[None, None], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
    image = torch.zeros((size, size))
    x_0, x_1 = max(box[0], 0), min(box[2] + 1, size)
    y_0, y_1 = max(box[1], 0), min(box[3] + 1, size)
    image[y_0:y_1, x_0:x_1] = mask[(y_0 - box[1]) : (y_1 - box[1]), (x_0 - box[0]) : (x_1 - box[0])]
    return image


def paste_all(masks: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    pasted = [paste_one(m, b, size) for m, b in zip(masks, boxes.to(torch.int64), strict=True)]
    return torch.stack(pasted) if len(pasted) > 0 else masks.new_zeros((0, size, size))


class PastesMasks(torch.nn.Module):
    def forward(self, rows: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        keep = rows[:, 4] > 0.5
        boxes, kept = rows[keep], masks[keep]
        total = boxes.shape[0] + 0
        if total > 0:  # reads only the size of a selection: the example decides it
            boxes = boxes * 1.0
        return paste_all(kept, boxes[:, :4], 32)


class BranchesOnAValue(torch.nn.Module):
    """Captured with the example's real values, ``if x.sum() > 0`` leaves only asserts on a
    constant ``item``: it must still be refused, not deployed as the example's branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # a tensor's value: no example decides it for every input
            return x * 2
        return x


def _line(function: object, text: str) -> str:
    lines, first = inspect.getsourcelines(function)
    return f"{__file__}:{first + next(i for i, line in enumerate(lines) if text in line)}"


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    rows = torch.rand(10, 5, generator=generator) * 20
    rows[:, 2:4] += rows[:, :2]
    rows[:, 4] = torch.rand(10, generator=generator)
    return rows, torch.rand(10, 8, 8, generator=generator)


@pytest.mark.parametrize("mode", ["non_strict", "strict"])
def test_a_value_made_size_names_its_line_and_the_loop_to_substitute(mode: str) -> None:
    model = PastesMasks()
    assert model(*_inputs()).shape[0] > 0
    with pytest.raises(CaptureError) as info:
        capture(model, _inputs(), settings=Settings(capture=CaptureSettings(mode=mode)))
    message = str(info.value)
    assert message.splitlines()[0] == "fxdeploy could not capture PastesMasks:"
    assert f"tracing broke in paste_one() at {_line(paste_one, 'image[y_0:y_1')}: a Python branch" in message
    assert "image[y_0:y_1, x_0:x_1] = mask[" in message  # the source line itself
    callers = f"{_line(paste_all, 'pasted = [')} in paste_all <- {_line(PastesMasks.forward, 'return paste_all')}"
    assert f"called from {callers} in forward\n" in message  # the model's frames, not what called capture()
    assert "reads a tensor's values" in message
    assert f"@fxdeploy.substitute({__name__}.paste_all)" in message  # the function that loops over rows
    assert f"decided the branch before it, at {_line(PastesMasks.forward, 'if total > 0')} in forward, by" in message
    assert "Could not guard" not in message


def test_a_branch_on_a_value_says_so() -> None:
    with pytest.raises(CaptureError) as info:
        capture(BranchesOnAValue(), (torch.rand(4),))
    message = str(info.value)
    assert f"tracing broke in forward() at {_line(BranchesOnAValue.forward, 'if x.sum() > 0')}: a Python" in message
    assert "reads a tensor's values" in message
    assert f"@fxdeploy.substitute({__name__}.BranchesOnAValue.forward)" in message


def test_parse_tells_sizes_from_values() -> None:
    with pytest.raises(CaptureError) as info:
        capture(BranchesOnAValue(), (torch.rand(4),))
    guard = parse(info.value)
    assert guard is not None and guard.values and guard.site is not None
    assert guard.site.func == "forward" and guard.site.file == __file__
    assert parse(ValueError("no guard here")) is None


def test_a_float_read_from_a_tensor_is_a_value_not_a_count() -> None:
    """torch 2.11 names a float a tensor's value made (``.item()`` of a float) ``zuf0``: the message
    said it "counts the rows a selection kept", naming no symbol."""
    torch_says = RuntimeError("Could not guard on data-dependent expression zuf0 > 50.0 (unhinted: zuf0 > 50.0).  "
                              "(Size-like symbols: none)")
    guard = parse(torch_says)
    assert guard is not None and guard.values == ("zuf0",)
    text = "\n".join(explain(guard))
    assert "reads a tensor's values (zuf0 comes from them)" in text and "counts the rows" not in text
