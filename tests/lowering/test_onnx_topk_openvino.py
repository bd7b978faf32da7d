"""``aten.topk`` on OpenVINO (``onnx_translations/topk.py``): ONNX TopK's result (descending value,
ties by the lower index; torch's own CPU topk leaves ties in any order) with no stable TopK over
the long axis, the one OpenVINO runs tens of times slower."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import fxdeploy
from fxdeploy.lowering.onnx_translations import translation_table
from tests.helpers import require_target


class TopK(torch.nn.Module):
    def __init__(self, k: int, dim: int = -1, largest: bool = True) -> None:
        super().__init__()
        self.k, self.dim, self.largest = k, dim, largest

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(x, self.k, dim=self.dim, largest=self.largest)


def _ties(shape: tuple[int, ...], seed: int, distinct: int = 7) -> torch.Tensor:
    """Few distinct values: every value ties many times, across the k-th place too."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, distinct, shape, generator=g).float() / distinct


def _stable_reference(x: torch.Tensor, k: int, dim: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """ONNX TopK's order: a stable sort (NaN first by descending value, last by ascending)."""
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def _openvino_model(model: torch.nn.Module, x: torch.Tensor, path: Path):  # noqa: ANN202
    import openvino as ov

    from fxdeploy.runtime.openvino import read_model

    program = torch.onnx.export(model.eval(), (x,), dynamo=True, custom_translation_table=translation_table("openvino"),
                                verbose=False, report=False)
    program.save(path)
    return read_model(ov.Core(), str(path))


def _stable_topks(ov_model, n: int) -> int:  # noqa: ANN001
    return sum(op.get_type_name() == "TopK" and op.get_attributes()["stable"]
               and op.input(0).get_partial_shape()[-1].get_length() == n for op in ov_model.get_ops())


@pytest.mark.parametrize(("k", "largest", "distinct"), [(1, True, 7), (40, True, 7), (40, False, 7), (300, True, 7),
                                                        (300, True, 1000)])
def test_the_openvino_graph_gives_onnx_topk_with_ties_and_nan(k: int, largest: bool, distinct: int,
                                                               tmp_path: Path) -> None:
    require_target("openvino")
    import openvino as ov

    x = _ties((4, 1000), 0, distinct)
    model = TopK(k, largest=largest)
    ov_model = _openvino_model(model, x, tmp_path / "topk.onnx")
    assert _stable_topks(ov_model, 1000) == 0, "a stable TopK over the long axis"
    compiled = ov.Core().compile_model(ov_model, "CPU")
    for seed in range(4):
        y = _ties((4, 1000), seed, distinct)
        y[0, 5] = y[1, 900] = float("nan")
        y[2, :] = 0.5  # a row all tied: the k lowest indices
        y[3, 10:20] = float("inf") if largest else float("-inf")
        want = _stable_reference(y, k, -1, largest)
        got = compiled({0: y.numpy()})
        np.testing.assert_array_equal(got[0], want[0].numpy())
        np.testing.assert_array_equal(got[1], want[1].numpy(), err_msg=f"seed {seed}: indices")


def test_topk_over_another_axis_is_one_stable_topk(tmp_path: Path) -> None:
    require_target("openvino")
    import openvino as ov

    x = _ties((50, 4), 3)
    ov_model = _openvino_model(TopK(10, dim=0), x, tmp_path / "topk.onnx")
    assert _stable_topks(ov_model, 4) == 1
    got = ov.Core().compile_model(ov_model, "CPU")({0: x.numpy()})
    want = _stable_reference(x, 10, 0, True)
    np.testing.assert_array_equal(got[0], want[0].numpy())
    np.testing.assert_array_equal(got[1], want[1].numpy())


def test_a_detector_style_top_k_lowers_by_default_and_matches_eager() -> None:
    """topk(scores, k) then gathered boxes, as torchvision's detectors take their candidates: the
    default path, lower()'s check included, with six scores tied across the k-th place."""
    require_target("openvino")

    class Candidates(torch.nn.Module):
        def forward(self, scores: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
            top, index = scores.flatten().topk(100)
            return boxes[index], top, index

    g = torch.Generator().manual_seed(0)
    scores, boxes = torch.rand(5000, 3, generator=g), torch.rand(15000, 4, generator=g)
    ranked = scores.flatten().argsort(descending=True)
    scores.view(-1)[ranked[98:104]] = scores.view(-1)[ranked[98]].item()  # ranks 98..103 tie
    model = Candidates()
    deployed = fxdeploy.lower(model, (scores, boxes), target="openvino")
    got, want = deployed(scores, boxes), model(scores, boxes)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    assert torch.equal(got[2][:98], want[2][:98])
    assert got[2][98:].tolist() == sorted(ranked[98:104].tolist())[:2], "the two lowest indices of the tie"
    torch.testing.assert_close(got[0], boxes[got[2]], rtol=0, atol=0)
