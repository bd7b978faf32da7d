"""The TensorRT target's ONNX gives ONNX TopK's order (ties by the lower index) whatever order the
runtime's TopK leaves equal values in.

ONNX Runtime's CPU provider keeps ONNX's order, and lower()'s check runs it; its CUDA provider put
CenterNet's tied peaks in another order on a lent H200 (``benchmarks/gpu_onnx_sweep.py``), and
TensorRT's TopK promises none. ``tests/onnx_ties.py`` runs a file as such a runtime could: every
TopK breaks ties by the higher index.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from examples import idioms
from fxdeploy.lowering.onnx_translations import translation_table
from tests.e2e.test_user_idioms import assert_same_outputs
from tests.helpers import tensorrt_onnx_file
from tests.onnx_ties import reversed_ties


class Orders(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        top, low = torch.topk(x, 40), torch.topk(x, 7, largest=False)
        stable = torch.sort(x, stable=True, descending=True)
        return (*top, *low, *stable, torch.argsort(x))


def _ties(seed: int) -> torch.Tensor:
    """Seven distinct values in rows of 100 (ties across every cut), a NaN, a row all equal."""
    x = torch.randint(0, 7, (3, 100), generator=torch.Generator().manual_seed(seed)).float() / 7
    x[0, 50], x[2] = float("nan"), 0.5
    return x


def _onnx_order(x: torch.Tensor) -> list[torch.Tensor]:
    """ONNX TopK's order: a stable sort, NaN the largest value."""
    down, up = torch.sort(x, descending=True, stable=True), torch.sort(x, stable=True)
    return [down.values[:, :40], down.indices[:, :40], up.values[:, :7], up.indices[:, :7], *down, up.indices]


def _run(model: onnx.ModelProto, x: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


def _exported(flavour: str) -> onnx.ModelProto:
    program = torch.onnx.export(Orders().eval(), (_ties(0),), dynamo=True, verbose=False, report=False,
                                custom_translation_table=translation_table(flavour))
    return program.model_proto


@pytest.mark.parametrize("flavour", ["tensorrt", "efficient_nms_trt"])
def test_topk_and_sorts_keep_onnx_order_whatever_the_runtimes_tie_order(flavour: str) -> None:
    model = _exported(flavour)
    for runtime in (model, reversed_ties(model)):
        for seed in range(3):
            x = _ties(seed)
            for i, (got, want) in enumerate(zip(_run(runtime, x), _onnx_order(x), strict=True)):
                np.testing.assert_array_equal(got, want.numpy(), err_msg=f"output {i}, seed {seed}")
    assert int(reversed_ties(model).doc_string) > 4  # every TopK of the translations was rewritten


def test_the_standard_graph_takes_the_runtimes_tie_order() -> None:
    """ONNX Runtime's own target keeps one TopK per op (its CPU provider orders ties as ONNX does):
    run as a runtime with another tie order, its indices move, which is what the harness catches."""
    model = reversed_ties(_exported("standard"))
    x = _ties(0)
    moved = [not np.array_equal(got, want.numpy()) for got, want in zip(_run(model, x), _onnx_order(x), strict=True)]
    assert moved[5] and moved[6], moved  # the sorts' indices


@pytest.mark.parametrize("name", ["centernet", "yolov5"])
def test_a_detectors_tensorrt_onnx_does_not_depend_on_the_tie_order(name: str, tmp_path: Path) -> None:
    """CenterNet's top-k over tied peaks, YOLOv5's sort by confidence before its NMS (the images
    hold exact score ties, ``idioms.images``): the file matches eager, and as a runtime with another
    tie order runs it, every output is the same, row for row. Before, ONNX Runtime's CUDA provider
    swapped CenterNet's tied boxes, 32 px apart."""
    model, example = idioms.FACTORIES[name]()
    path, names, *_ = tensorrt_onnx_file(model, example, {"images": {0: ("batch", 1, 8)}}, tmp_path)
    x = idioms.images(3, 1)
    as_is, reversed_order = (_run(m, x) for m in (onnx.load(str(path)), reversed_ties(onnx.load(str(path)))))
    for name_, a, b in zip(names, as_is, reversed_order, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name_)
    out = dict(zip(names, as_is, strict=True))
    got = []
    for i in range(len(x)):
        count = int(out["row_count_0"][i])
        got.append(torch.from_numpy(out["0"][i, :count]) if "0" in out else
                   {key: torch.from_numpy(out[f"0.{key}"][i, :count]) for key in ("boxes", "scores", "labels")})
    with torch.no_grad():
        assert_same_outputs(model(x), got, name)
