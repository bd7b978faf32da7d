"""One torch.export per model and example in a process (``fxdeploy/capture/memo.py``): a second
lowering reuses the trace only where it would trace the same program, and says what the first said."""

from __future__ import annotations

import copy
import gc
import logging
import weakref

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.capture import capture, memo
from tests.detections import assert_same_detections
from tests.helpers import max_abs_error, require_target


class Thresholded(nn.Module):
    """A conv and a Python float threshold (a constant in the graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.threshold = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).flatten(1)
        return (y * (y > self.threshold)).sum(1) + self.threshold


class Flagged(Thresholded):
    """A flag on the class (as Ultralytics' heads have): set on the class, every instance reads it."""

    export = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y.sigmoid() if self.export else y


def model() -> nn.Module:
    torch.manual_seed(0)
    return Thresholded().eval()


def example(seed: int = 0) -> torch.Tensor:
    return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def empty_memo() -> None:
    memo.clear()


def lower(m: nn.Module, x: torch.Tensor, target: str = "torchscript") -> fxdeploy.Deployed:
    require_target(target)
    return fxdeploy.lower(m, (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})


def check(m: nn.Module, deployed: fxdeploy.Deployed) -> None:
    x = example(7)
    with torch.no_grad():
        assert max_abs_error(deployed(x), m(x)) < 1e-4


def traced(action) -> int:  # noqa: ANN001 - a callable
    before = memo.STATS.misses
    action()
    return memo.STATS.misses - before


def test_a_second_target_starts_from_the_first_ones_trace() -> None:
    m, x = model(), example()
    assert traced(lambda: check(m, lower(m, x, "onnxruntime"))) == 1
    assert traced(lambda: check(m, lower(m, x, "torchscript"))) == 0
    assert traced(lambda: check(m, lower(m, x, "onnxruntime"))) == 0


def test_a_weight_changed_in_place_is_traced_again() -> None:
    m, x = model(), example()
    first = lower(m, x)
    with torch.no_grad():
        m.conv.weight.mul_(-3.0)
    assert traced(lambda: check(m, lower(m, x))) == 1
    with torch.no_grad():
        assert max_abs_error(first(x), m(x)) > 1e-2  # the first artifact kept the weights it was lowered with


def test_a_plain_attribute_changed_is_traced_again() -> None:
    m, x = model(), example()
    lower(m, x)
    m.threshold = 0.25  # read as a Python float: a constant in the graph
    assert traced(lambda: check(m, lower(m, x))) == 1


def test_a_flag_changed_on_the_class_is_traced_again() -> None:
    torch.manual_seed(0)
    m, x = Flagged().eval(), example()
    lower(m, x)
    Flagged.export = True
    try:
        assert traced(lambda: check(m, lower(m, x))) == 1
    finally:
        Flagged.export = False


def test_another_model_object_or_example_is_traced_again() -> None:
    m, x = model(), example()
    lower(m, x)
    twin = copy.deepcopy(m)  # the same fingerprint; the trace holds the first one's parameters
    assert traced(lambda: check(twin, lower(twin, x))) == 1
    assert traced(lambda: check(m, lower(m, example(1)))) == 1  # values may decide a branch


def test_a_pass_on_one_capture_does_not_reach_the_next() -> None:
    m, x = model(), example()
    first = capture(m, (x,), dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    code = first.graph_module.code
    for node in list(first.graph_module.graph.nodes):  # what a pass may do: rewrite every op
        if node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor:
            node.target = torch.ops.aten.add.Tensor
    first.graph_module.recompile()
    assert first.graph_module.code != code
    second = capture(m, (x,), dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    assert memo.STATS.hits >= 1 and second.graph_module is not first.graph_module
    assert second.graph_module.code == code


def test_the_second_lowering_says_what_the_first_said(caplog: pytest.LogCaptureFixture) -> None:
    """SplitYolo branches on the size of a selection: the first trace stops there, and the example's
    values decide it in a second one (info lines)."""
    from tests.capture.test_real_values import split_yolo

    m, x = split_yolo(), torch.rand(2, 3, 64, 64) * 255
    said = []
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fxdeploy"):
            fxdeploy.lower(m, (x,), target="torchscript")
        said.append([r.getMessage() for r in caplog.records if r.name.startswith("fxdeploy.capture")])
    assert any("data-dependent size" in line for line in said[0])
    assert said[1] == said[0]


def test_a_models_batch_loop_is_captured_once_for_every_target() -> None:
    from examples import detector

    m, (x,) = detector.tiny_yolo()
    shapes = {"images": {0: ("batch", 1, 8)}}
    deployed = [fxdeploy.lower(m, (x,), target=t, dynamic_shapes=shapes) for t in ("onnxruntime", "torchscript")]
    assert memo.STATS.hits >= 2  # the batch's trace (it fixes the batch: an error kept) and the image's
    x = torch.rand(3, 3, 128, 128, generator=torch.Generator().manual_seed(3)) * 255
    with torch.no_grad():
        want = m(x)
    for d in deployed:
        assert_same_detections(want, d(x))


class PickedColumn(nn.Module):
    """``x[:, idx[0]]``: the index is a data-dependent size in the program's shape env."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[:, idx[0]]


def test_a_data_dependent_size_does_not_stop_the_next_lowering() -> None:
    """torch.onnx's retrace left that size pending in the shared shape env, and the second lowering's
    retrace refused to start ("Pending unbacked symbols {u6, u7} not in returned outputs")."""
    m = PickedColumn().eval()
    args = (torch.randn(2, 7, 4), torch.tensor([-3, 1]))
    for target in ("onnxruntime", "onnxruntime", "openvino"):
        require_target(target)
        deployed = fxdeploy.lower(m, args, target=target)
        for idx in ([-3, 1], [6, 0], [-7, 2]):
            x, i = torch.randn(2, 7, 4), torch.tensor(idx)
            assert torch.equal(deployed(x, i), m(x, i))
    assert memo.STATS.hits >= 2


def test_an_entry_goes_with_its_model() -> None:
    m, x = model(), example()
    lower(m, x)
    assert len(memo._ENTRIES) == 1
    del m
    gc.collect()
    assert not memo._ENTRIES


class ImageLoop(nn.Module):
    """A Python loop over the images: the batch's trace fails (the loop fixes the batch), and the
    memo keeps that failure beside the one image's program."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.lin(x[i]).relu() for i in range(x.shape[0])])


def causes(error: BaseException) -> list[BaseException]:
    chain = [error]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    return chain


def test_a_kept_failure_does_not_keep_its_model() -> None:
    """A failure's traceback holds the frames that traced the model: kept as it was raised, it
    kept the model (and so the entry) alive after the user dropped it."""
    m = ImageLoop().eval()
    ref = weakref.ref(m)
    x = torch.randn(2, 4)
    deployed = lower(m, x)
    kept = [e.error for e in memo._ENTRIES.values() if e.error is not None]
    assert len(kept) == 1 and all(e.__traceback__ is None for e in causes(kept[0]))
    assert type(kept[0].__cause__).__name__ == "BatchFixed"  # kept: capture reads it to choose a retry
    assert (kept[0].strict, kept[0].real_values) == (False, False)  # what a retry on one image starts from
    misses = memo.STATS.misses
    lower(m, x, "onnxruntime")
    assert memo.STATS.misses == misses  # the failure raised again from the memo, then the image's program
    assert all(e.__traceback__ is None for e in causes(kept[0]))  # each raise is of a copy: the kept one stays bare
    del m, deployed
    gc.collect()
    assert ref() is None and not memo._ENTRIES
