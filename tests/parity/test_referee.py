"""lower()'s check takes the model run in float64 as referee where eager float32 is itself past the
tolerance, and only there: an artifact further from float64 than eager stays refused."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import LoweringError
from fxdeploy.parity.referee import refereed
from tests.helpers import require_target


class Prototypes(torch.nn.Module):
    """Distances from every pixel's features to the first five pixels' (prototypes, as few-shot
    and re-identification heads compare embeddings). Far from the origin, as features with a bias
    are: torch.cdist's matrix product (over 25 rows) loses the near-zero distances' digits there."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = x.flatten(2).transpose(1, 2) + 10.0
        return torch.cdist(features, features[:, :5])


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_an_artifact_closer_to_float64_than_eager_is_not_refused(target: str) -> None:
    require_target(target)
    model = Prototypes()
    x = torch.rand(2, 6, 8, 10)
    deployed = fxdeploy.lower(model, (x,), target=target,
                              dynamic_shapes={"x": {0: ("b", 1, 4), 2: ("h", 6, 16), 3: ("w", 6, 16)}})
    checks = deployed.manifest["info"]["shape_checks"]
    assert all(check["excused"]["eager_rounding"] > 0 for check in checks), checks
    y = torch.rand(3, 6, 7, 9)
    exact = torch.cdist(*(f.double() for f in (y.flatten(2).transpose(1, 2) + 10.0,) * 2))[:, :, :5]
    assert (deployed(y).double() - exact).abs().max() < 1e-5 < (model(y).double() - exact).abs().max()


def failure() -> LoweringError:
    return LoweringError("the onnxruntime artifact at the example input shapes [(4,)]: output #0 differs from eager "
                         "by 0.01 (tolerance 0.0001)")


def test_the_referee_counts_what_it_excuses() -> None:
    exact = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    want = torch.tensor([0.01, 1.0, 2.0, 3.0])  # eager off by 0.01 at one element
    got = torch.tensor([0.0, 1.0, 2.0, 3.00001])
    error, excused = refereed(failure(), (got,), (want,), lambda inputs: (exact,), [torch.zeros(4)], 1e-4)
    assert excused == {"eager_rounding": 1} and error == pytest.approx(0.01, rel=1e-3)


@pytest.mark.parametrize("got", [torch.tensor([0.02, 1.0, 2.0, 3.0]), torch.tensor([0.0, 1.0, 2.0, 3.01])],
                         ids=["further-than-eager", "wrong-elsewhere"])
def test_an_artifact_further_from_float64_than_eager_stays_refused(got: torch.Tensor) -> None:
    exact = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    want = torch.tensor([0.01, 1.0, 2.0, 3.0])
    with pytest.raises(LoweringError, match="differs from eager by 0.01.*float64 agrees with eager"):
        refereed(failure(), (got,), (want,), lambda inputs: (exact,), [torch.zeros(4)], 1e-4)


def test_a_model_that_does_not_run_in_float64_leaves_the_failure_as_it_was() -> None:
    def broken(inputs: list[torch.Tensor]) -> tuple[torch.Tensor]:
        raise RuntimeError("expected scalar type Float but found Double")

    with pytest.raises(LoweringError, match=r"differs from eager by 0.01 \(tolerance 0.0001\)$"):
        refereed(failure(), (torch.ones(4),), (torch.zeros(4),), broken, [torch.zeros(4)], 1e-4)
