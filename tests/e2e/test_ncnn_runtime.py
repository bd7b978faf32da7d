"""The ncnn executor: inputs whose first layer works in place, inputs whose channels a layer reads
as a range, and artifacts saved before stages."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

import fxdeploy
from fxdeploy.artifact import MANIFEST, sha256
from tests.e2e.test_targets import tiny_detector
from tests.helpers import require_target


def require_ncnn() -> None:
    require_target("ncnn")


class ActivationFirst(nn.Module):
    """Both inputs go straight into layers ncnn runs in place (a Sigmoid, a scalar BinaryOp)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.sigmoid(x)) + (y * 2.0).mean((1, 2, 3), keepdim=True)


def test_an_input_that_its_first_layer_overwrites_is_copied_not_crashed_on() -> None:
    """ncnn 1.0.20261020 segfaults when an in-place layer writes into a Mat that wraps a numpy
    array: the executor copies those inputs. The caller's tensors are left as they were."""
    require_ncnn()
    torch.manual_seed(0)
    model = ActivationFirst().eval()
    x, y = torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)
    deployed = fxdeploy.lower(model, (x, y), target="ncnn", dynamic_shapes={"x": {0: "batch"}, "y": {0: "batch"}})
    fresh_x, fresh_y = torch.randn(3, 3, 8, 8), torch.randn(3, 3, 8, 8)
    kept_x, kept_y = fresh_x.clone(), fresh_y.clone()
    for _ in range(2):
        got = deployed(fresh_x, fresh_y)
    with torch.no_grad():
        want = model(fresh_x, fresh_y)
    assert float((got - want).abs().max()) < 1e-4
    assert torch.equal(fresh_x, kept_x) and torch.equal(fresh_y, kept_y)


class ChannelRanges(nn.Module):
    """Channels of the input itself, taken by a slice and a chunk (ncnn's Crop and Slice), then
    shuffled, pooled and upsampled."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        first, second = x[:, :8].chunk(2, 1)
        return (nn.functional.pixel_shuffle(x[:, 1:5], 2), nn.functional.max_pool2d(first, 3, 1, 1),
                nn.functional.interpolate(second, scale_factor=2.0, mode="nearest"))


def test_channel_ranges_of_an_input_at_sizes_whose_area_is_not_a_multiple_of_4() -> None:
    """A Mat that wraps the numpy array packs its channels tight, where these layers expect each
    channel 16 bytes aligned: every value was wrong at 7 x 9, and lower()'s check (at 8 x 10,
    6 x 6 and 16 x 16) could not see it."""
    require_ncnn()
    model = ChannelRanges().eval()
    deployed = fxdeploy.lower(model, (torch.rand(2, 9, 8, 10),), target="ncnn",
                              dynamic_shapes={"x": {0: ("batch", 1, 4), 2: ("h", 6, 16), 3: ("w", 6, 16)}})
    for shape in [(1, 9, 7, 9), (3, 9, 6, 7), (2, 9, 13, 11), (1, 9, 16, 16)]:
        x = torch.rand(shape)
        for got, want in zip(deployed(x), model(x), strict=True):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_an_artifact_saved_with_one_head_and_one_tail_still_loads(tmp_path: Path) -> None:
    """The plan before stages: "head_outputs", "host_tail", "tail_inputs", sources named "head"/"tail"."""
    require_ncnn()
    model, (x,) = tiny_detector()
    deployed = fxdeploy.lower(model, (x,), target="ncnn", dynamic_shapes={"x": {0: ("batch", 1, 8)}})
    deployed.save(tmp_path)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    engine, host = manifest["info"]["ncnn"]["stages"]
    names = {0: "head", 1: "tail", "input": "input"}
    (tmp_path / host["file"]).rename(tmp_path / "host_tail.pt")
    manifest["files"].pop(host["file"])
    manifest["files"]["host_tail.pt"] = sha256(tmp_path / "host_tail.pt")
    manifest["info"]["ncnn"] = {
        "inputs": [{"name": "x", "blob": "in0"}],
        "head_outputs": engine["outputs"],
        "host_tail": "host_tail.pt",
        "tail_inputs": [[names[part], k] for part, k in host["sources"]],
        "outputs": [[names[part], k] for part, k in manifest["info"]["ncnn"]["outputs"]],
    }
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    old = fxdeploy.load(tmp_path)
    fresh = torch.randn(3, 3, 32, 32)
    for got, want in zip(old.execute({"x": fresh}).values(), deployed.execute({"x": fresh}).values(), strict=True):
        assert torch.equal(got, want)
