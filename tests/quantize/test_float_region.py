"""float_region: walking back from each output, the ops before (and including) the last weighted
layer stay float; everything upstream is quantized. Read from op types only."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from fxdeploy.quantize.float_region import float_nodes


def _graph() -> onnx.ModelProto:
    """x -> conv0 -> relu0 -> conv1 -> relu -> conv2 -> sigmoid -> scores;
    relu -> conv3 -> add(relu) -> mul -> boxes."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["scores"], name="sigmoid"),
        helper.make_node("Conv", ["r", "w3"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "r"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "stride"], ["boxes"], name="decode"),
    ]
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, None)  # noqa: E731
    graph = helper.make_graph(nodes, "g", [value("x")], [value("scores"), value("boxes")])
    return helper.make_model(graph)


def test_the_tail_after_the_last_weighted_layers_stays_float() -> None:
    kept = float_nodes(_graph())
    # the residual add reaches relu, then conv1: the last weighted layer on that path to 'boxes'
    assert set(kept) == {"sigmoid", "conv2", "decode", "add", "conv3", "relu", "conv1"}  # conv0, relu0 quantized
    assert kept["sigmoid"] == "between the last weighted layer and output 'scores'"
    assert kept["conv2"] == "the last weighted layer (Conv) before output 'scores'"


def test_a_chain_keeps_only_its_tail() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["p"], name="softmax"),
    ]
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, None)  # noqa: E731
    model = helper.make_model(helper.make_graph(nodes, "g", [value("x")], [value("p")]))
    assert set(float_nodes(model)) == {"softmax", "fc"}


def test_a_weighted_layer_over_a_softmax_is_box_decoding() -> None:
    """YOLOv8/11's DFL: the regression conv's 16 bins, a softmax, a fixed 1x1 conv (the expectation):
    that conv is decoding, so the walk goes on through it to the regression conv."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="backbone"),
        helper.make_node("Conv", ["c0", "w1"], ["bins"], name="regression"),
        helper.make_node("Reshape", ["bins", "shape"], ["r"], name="reshape"),
        helper.make_node("Softmax", ["r"], ["p"], name="softmax"),
        helper.make_node("Transpose", ["p"], ["t"], name="transpose"),
        helper.make_node("Conv", ["t", "arange"], ["distance"], name="dfl"),
        helper.make_node("Mul", ["distance", "stride"], ["boxes"], name="decode"),
    ]
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, None)  # noqa: E731
    kept = float_nodes(helper.make_model(helper.make_graph(nodes, "g", [value("x")], [value("boxes")])))
    assert set(kept) == {"decode", "dfl", "transpose", "softmax", "reshape", "regression"}
    assert kept["dfl"].startswith("box decoding before output 'boxes'")
    assert kept["regression"] == "the last weighted layer (Conv) before output 'boxes'"


def test_a_softmax_written_as_reductions_is_a_distribution_too() -> None:
    """The standard lowering writes a softmax over a non-last axis as ``e / ReduceSum(e)``: the DFL
    conv over it is still box decoding; a Div of anything else is not a distribution."""

    def kept_with(div_inputs: list[str]) -> dict[str, str]:
        nodes = [
            helper.make_node("Conv", ["x", "w0"], ["c0"], name="backbone"),
            helper.make_node("Conv", ["c0", "w1"], ["bins"], name="regression"),
            helper.make_node("ReduceMax", ["bins", "axes"], ["m"], name="max"),
            helper.make_node("Sub", ["bins", "m"], ["shifted"], name="sub"),
            helper.make_node("Exp", ["shifted"], ["e"], name="exp"),
            helper.make_node("ReduceSum", ["e", "axes"], ["total"], name="sum"),
            helper.make_node("Div", div_inputs, ["p"], name="div"),
            helper.make_node("Conv", ["p", "arange"], ["boxes"], name="dfl"),
        ]
        value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, None)  # noqa: E731
        return float_nodes(helper.make_model(helper.make_graph(nodes, "g", [value("x")], [value("boxes")])))

    assert set(kept_with(["e", "total"])) == {"dfl", "div", "exp", "sub", "max", "sum", "regression"}
    assert set(kept_with(["shifted", "total"])) == {"dfl"}  # not exp / sum(exp): the dfl conv is the last layer
