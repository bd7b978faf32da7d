"""``>`` and ``>=`` on OpenVINO (``fxdeploy/lowering/onnx_translations/comparisons.py``): OpenVINO's CPU
plugin computes ONNX's ``Greater``/``GreaterOrEqual`` as true beside a NaN on AVX-512 CPUs. The
``openvino`` flavour writes them as ``Less``/``LessOrEqual`` with the operands swapped."""

from __future__ import annotations

import onnx
import pytest
import torch

import fxdeploy
from fxdeploy.lowering.onnx_translations import translation_table
from tests.helpers import require_target, special_pairs

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 2.5]


class Comparisons(torch.nn.Module):
    """Each overload once: tensors, a scalar on either side, booleans, integers against floats."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (a > b, a >= b, a > 1.0, a >= -1.0, 2.5 > a, (a > 0) > (b > 0), (a > 0) >= (b < 0),
                a.nan_to_num(0).clamp(-9, 9).long() > b, a.nan_to_num(0).clamp(-9, 9).long() >= 1)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_comparisons_beside_nan_are_torchs(target: str) -> None:
    require_target(target)
    deployed = fxdeploy.lower(Comparisons(), (torch.randn(2, 64), torch.randn(2, 64)), target=target)
    a, b = special_pairs(SPECIAL)
    for i, (got, want) in enumerate(zip(deployed(a, b), Comparisons()(a, b), strict=True)):
        assert torch.equal(got, want), f"output {i}: {(got != want).sum()} elements differ"


def test_the_openvino_flavour_writes_no_greater() -> None:
    """The swap is in the graph, whatever CPU the test runs on (an AVX2 one computes Greater right)."""
    class Plain(torch.nn.Module):  # nothing else: torch.onnx's nan_to_num writes a Greater of its own
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return a > b, a >= b, a > 1.0, a >= -1.0, 2.5 > a

    ep = torch.export.export(Plain(), (torch.randn(2, 64), torch.randn(2, 64)))
    for flavour, greater in (("openvino", False), ("standard", True)):
        program = torch.onnx.export(ep, dynamo=True, custom_translation_table=translation_table(flavour), verbose=False)
        ops = {node.op_type for node in onnx.load_from_string(program.model_proto.SerializeToString()).graph.node}
        assert ({"Greater", "GreaterOrEqual"} & ops != set()) is greater, (flavour, sorted(ops))
