"""lower()'s check excuses an element whose value hangs on a comparison at its edge (a sigmoid at
its 0.5 threshold, decided by the runtime's last bit), and only there: a decision flipped off its
edge, or an integer output that differs, stays refused (fxdeploy/parity/decision_edges.py)."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import LoweringError
from fxdeploy.parity.decision_edges import tilted
from fxdeploy.parity.referee import refereed
from tests.helpers import require_target


class SigmoidMask(torch.nn.Module):
    """A segmentation head's ``mask = prob > 0.5``, on logits near zero: ONNX Runtime's and
    OpenVINO's Sigmoid put about one element in ten on the other side of 0.5 there."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        prob = x.sigmoid()
        return prob * (prob > 0.5), prob > 0.5


def logits(batch: int, seed: int) -> torch.Tensor:
    return (torch.rand(batch, 4000, generator=torch.Generator().manual_seed(seed)) - 0.5) * 1e-6


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_threshold_decided_by_the_last_bit_is_not_refused(target: str) -> None:
    require_target(target)
    model = SigmoidMask()
    deployed = fxdeploy.lower(model, (logits(2, 0),), target=target, dynamic_shapes={"x": {0: ("b", 1, 4)}})
    checks = deployed.manifest["info"]["shape_checks"]
    assert all(check["excused"].get("decision_edges", 0) > 0 for check in checks), checks
    x = logits(3, 1)
    (want, want_mask), (got, got_mask) = model(x), deployed(x)
    flipped = got_mask != want_mask
    assert flipped.any(), "the runtime's Sigmoid decides no element otherwise: the test shows nothing"
    assert ((x.sigmoid() - 0.5).abs()[flipped] <= 1e-6).all()  # each at its edge
    torch.testing.assert_close(got[~flipped], want[~flipped], rtol=0, atol=1e-6)


def _failure() -> LoweringError:
    return LoweringError("the onnxruntime artifact at the example input shapes [(2, 4000)]: output #0 differs from "
                         "eager by 0.5 (tolerance 0.0001)")


def _referee(got: tuple[torch.Tensor, ...], x: torch.Tensor) -> tuple[float, dict[str, int]]:
    model = SigmoidMask()
    return refereed(_failure(), got, model(x), lambda inputs: model(inputs[0].double()), [x], 1e-4, tilted(
        lambda inputs: model(*inputs)))


def test_an_artifact_at_the_edge_is_excused_element_by_element() -> None:
    x = logits(2, 0)
    at_edge = (x.sigmoid() - 0.5).abs() < 1e-7
    prob = x.sigmoid()
    mask = (prob > 0.5) ^ at_edge  # every element at its edge on the other side
    error, excused = _referee((prob * mask, mask), x)
    # where float64 puts the element on the artifact's side, it is eager's rounding that decided
    assert excused["decision_edges"] > 0 and sum(excused.values()) == 2 * int(at_edge.sum()), excused
    assert error == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize("output", [0, 1], ids=["values", "mask"])
def test_a_decision_flipped_off_its_edge_stays_refused(output: int) -> None:
    x = logits(2, 0)
    x[0, 0] = 3.0  # far from the edge: 0.95 > 0.5 by any runtime's rounding
    prob = x.sigmoid()
    mask = prob > 0.5
    wrong = mask.clone()
    wrong[0, 0] = False
    got = (prob * wrong, mask) if output == 0 else (prob * mask, wrong)
    with pytest.raises(LoweringError, match="no comparison at its edge decides it"):
        _referee(got, x)


def test_an_integer_output_that_differs_is_refused_whatever_float64_says() -> None:
    """Before, the referee looked at float outputs only: a wrong label beside right scores passed."""
    labels = torch.tensor([3, 1, 4, 1])
    scores = torch.tensor([0.5, 0.25, 0.125, 1.0])
    with pytest.raises(LoweringError, match="no comparison at its edge decides it"):
        refereed(_failure(), (scores, labels + 1), (scores + 0.01, labels), lambda inputs: (scores.double(), labels),
                 [torch.zeros(4)], 1e-4)


def test_a_tilted_run_of_another_shape_leaves_the_float64_referee_its_say() -> None:
    """A selection the tilt changes (``x[x > 0.5]``) gives the tilted runs another shape there: they
    have no say on that output, and the float64 referee still excuses eager's own rounding."""
    exact = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    want, got = torch.tensor([0.01, 1.0, 2.0, 3.0]), torch.tensor([0.0, 1.0, 2.0, 3.0])
    other = (torch.zeros(5),)
    error, excused = refereed(_failure(), (got,), (want,), lambda inputs: (exact,), [torch.zeros(4)], 1e-4,
                              [lambda inputs: other, lambda inputs: other])
    assert excused == {"eager_rounding": 1}
