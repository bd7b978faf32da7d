"""``fxdeploy.lowering.onnx_optimize``: torch.onnx's optimizer, passes in its order, without the rewrite
rules onnxscript matches by listing the whole graph for each candidate (quadratic in the graph)."""

from __future__ import annotations

import onnx
import pytest
import torch

import fxdeploy
from fxdeploy.lowering import onnx_optimize
from tests.helpers import require_target


class Mixed(torch.nn.Module):
    """Integer and float arithmetic that exports CastLike nodes, a shared subexpression and constants."""

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = (x * 2 + 1) * n.to(x.dtype)
        shared = scaled.relu() + (x * 2 + 1).sigmoid()
        return shared.sum(-1) / 3, (n * 3 + x.shape[-1]).clamp(max=40)


def _example() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 6), torch.arange(4 * 6).reshape(4, 6) % 5


def _exported(model: torch.nn.Module) -> torch.onnx.ONNXProgram:
    return torch.onnx.export(model, _example(), dynamo=True, optimize=False, verbose=False, report=False)


def test_the_rules_left_out_are_the_ones_matched_against_every_node() -> None:
    """The installed onnxscript's rule list is read (else torch.onnx's optimizer runs, quadratic),
    and exactly its patterns of several output nodes are left out."""
    from onnxscript import rewriter

    kept = onnx_optimize.linear_rules()
    assert kept is not None, "onnxscript's default rules were not found: every lowering takes the slow optimizer"
    for rule in rewriter._DEFAULT_REWRITE_RULES:
        single = rule._target_pattern.has_single_output_node
        assert (rule in kept) == single, f"{type(rule).__name__}: one output node {single}, kept {rule in kept}"


def test_the_optimized_graph_is_torch_onnx_s_own() -> None:
    """On a graph the left-out rule does not touch, the bytes torch.onnx's optimizer writes."""
    from onnx_ir import serde

    model = Mixed().eval()
    theirs, ours = _exported(model), _exported(model)
    assert [node for node in ours.model.graph if node.op_type == "CastLike"], "the test needs a CastLike"
    theirs.optimize()
    onnx_optimize.optimize(ours)
    written = [serde.serialize_model(program.model).SerializeToString() for program in (ours, theirs)]
    assert written[0] == written[1]


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_the_optimized_graph_keeps_its_values(target: str, tmp_path) -> None:
    require_target(target)
    model = Mixed().eval()  # torch.onnx.export warns of a module in training mode
    deployed = fxdeploy.lower(model, _example(), target=target, dynamic_shapes={"x": {0: ("batch", 1, 8)},
                                                                                "n": {0: ("batch", 1, 8)}})
    deployed.save(tmp_path / "a")
    graph = onnx.load(str(tmp_path / "a" / "model.onnx")).graph
    assert not [node for node in graph.node if node.op_type == "CastLike"]  # not every ONNX consumer reads it
    for batch in (1, 3, 8):
        y, m = torch.randn(batch, 6), torch.randint(0, 9, (batch, 6))
        for got, want in zip(deployed(y, m), model(y, m), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


class Clamps(torch.nn.Module):
    """Four clamps of one tensor: onnxscript's Min/Max-to-Clip rule names each Clip's bounds
    ``{input}_min``/``_max``, and its RewritePass replaced the first Clip's bounds with the next's
    under that name, leaving the first Clip reading values the graph no longer held."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 3 - 1.5
        return torch.tan(y.clamp(-1, 1)) + torch.asin(y.clamp(-0.5, 0.7)) * 2 + y.clamp(0.1, 0.2) + y.clamp(-1, 1)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_clips_of_one_tensor_keep_each_its_own_bounds(target: str) -> None:
    require_target(target)
    model = Clamps().eval()
    deployed = fxdeploy.lower(model, (torch.rand(2, 4, 18, 18),), target=target,
                              dynamic_shapes={"x": {0: ("batch", 1, 4), 2: ("h", 10, 34), 3: ("w", 10, 34)}})
    for shape in ((1, 4, 10, 10), (3, 4, 13, 21), (4, 4, 34, 17)):
        x = torch.rand(shape)
        torch.testing.assert_close(deployed(x), model(x), rtol=1e-5, atol=1e-5)
