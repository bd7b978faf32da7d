"""INT8 on ONNX Runtime, measured on a model trained here: a small CNN on scikit-learn's bundled
digits (1797 8x8 images, a fixed split), lowered with ``Settings(precision="int8")`` and
calibration data through the default path (lower()'s check on, at its INT8 tolerance).

- top-1 on the held-out split within 1 point of fp32, also after save/load and for each method;
- the graph's float region (``fxdeploy/quantize/float_region.py``): without it, sigmoid scores
  collapse onto uint8's 256 steps; with it, they stay distinct;
- the calibration batch is its own (16 where the example has 4), within the dynamic batch;
- bad calibration input: refused naming the sample, no artifact left behind, and a warning where
  the calibration range misses the example's.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.errors import CalibrationWarning, FxDeployError, LoweringError
from fxdeploy.parity.closeness import INT8_ATOL
from fxdeploy.quantize import onnxruntime as ort_quantize
from tests.helpers import require_target, tensorrt_onnx_file

sklearn_datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn (make test installs it)")

INT8 = fxdeploy.Settings(precision="int8")
TARGETS = ["onnxruntime", "openvino"]
METHODS = {"onnxruntime": ["percentile", "entropy"], "openvino": ["percentile"]}
BATCH = {"x": {0: ("batch", 1, 512)}}


class DigitsNet(nn.Module):
    def __init__(self, sigmoid_scores: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.classes = nn.Linear(32, 10)
        self.sigmoid_scores = sigmoid_scores

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.classes(self.features(x))
        return logits.sigmoid() if self.sigmoid_scores else logits


def _silu_conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class SplitNet(nn.Module):
    """A YOLO C2f block: one conv's output split in two, the second half feeding a conv, a residual
    add and the concat. OpenVINO 2026.4 computed NNCF's QDQ ONNX of this wrongly (11% top-1)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.cv1, self.cv2 = _silu_conv(1, 16), _silu_conv(16, 32, 2), _silu_conv(48, 32)
        self.m = nn.Sequential(_silu_conv(16, 16), _silu_conv(16, 16))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classes = nn.Linear(32, 10)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(self.stem(x)).chunk(2, 1)
        return self.pool(self.cv2(torch.cat([a, b, b + self.m(b)], 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classes(self.features(x))

@pytest.fixture(scope="module")
def digits() -> dict[str, torch.Tensor]:
    data = sklearn_datasets.load_digits()
    images = torch.tensor(data.images, dtype=torch.float32)[:, None] / 16.0
    labels = torch.tensor(data.target)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    train, test = order[:1400], order[1400:]
    return {"train_x": images[train], "train_y": labels[train], "test_x": images[test], "test_y": labels[test]}


def _trained(digits: dict[str, torch.Tensor], sigmoid_scores: bool = False, net: type[nn.Module] = DigitsNet) -> Any:
    torch.manual_seed(0)
    model = DigitsNet(sigmoid_scores) if net is DigitsNet else net()
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    x, y = digits["train_x"], digits["train_y"]
    for _ in range(15):
        for i in range(0, len(x), 64):
            logits = model.classes(model.features(x[i : i + 64]))
            loss = nn.functional.cross_entropy(logits, y[i : i + 64])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def model(digits: dict[str, torch.Tensor]) -> DigitsNet:
    return _trained(digits)


def _calibration(digits: dict[str, torch.Tensor], count: int = 16, batch: int = 16) -> list[tuple[torch.Tensor]]:
    return [(digits["train_x"][i * batch : (i + 1) * batch],) for i in range(count)]


def _accuracy(outputs: torch.Tensor, labels: torch.Tensor) -> float:
    return 100.0 * float((outputs.argmax(1) == labels).float().mean())


@pytest.fixture(scope="module", params=TARGETS)
def int8_model(request: pytest.FixtureRequest, model: DigitsNet, digits: dict[str, torch.Tensor]) -> fxdeploy.Deployed:
    require_target(request.param)
    return fxdeploy.lower(model, (digits["test_x"][:4],), target=request.param, dynamic_shapes=BATCH, settings=INT8,
                          calibration=_calibration(digits))


def test_int8_top1_is_within_one_point_of_fp32(
    model: DigitsNet, int8_model: fxdeploy.Deployed, digits: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    with torch.no_grad():
        fp32 = _accuracy(model(digits["test_x"]), digits["test_y"])
    assert fp32 > 90.0, f"the model did not train ({fp32:.1f}%)"
    int8 = _accuracy(int8_model(digits["test_x"]), digits["test_y"])
    assert abs(int8 - fp32) <= 1.0, f"int8 {int8:.2f}% against fp32 {fp32:.2f}%"
    int8_model.save(tmp_path / "digits")
    loaded = fxdeploy.load(tmp_path / "digits")
    assert torch.equal(loaded(digits["test_x"]), int8_model(digits["test_x"]))


def test_the_manifest_says_how_it_was_quantized_and_checked(
    int8_model: fxdeploy.Deployed, model: DigitsNet, digits: dict[str, torch.Tensor]
) -> None:
    info = int8_model.manifest["info"]["int8"]
    if int8_model.target == "onnxruntime":
        assert info["format"] == "QDQ" and info["reduce_range"] is not ort_quantize.cpu_has_vnni()
    else:
        assert info["tool"].startswith("nncf ")
    assert info["calibration"] == {"samples": 16, "method": "minmax"}
    assert list(info["float_ops"].values()) == ["the last weighted layer (Gemm) before output 'output'"]
    checks = int8_model.manifest["info"]["shape_checks"]
    assert {c["label"] for c in checks} >= {"example", "min", "max"}
    # the check ran at the INT8 tolerance and saw INT8's rounding (never skipped, never exact)
    assert all(0.0 < c["max_abs_error"] for c in checks)
    with torch.no_grad():
        scale = max(1.0, float(model(digits["test_x"][:4]).abs().max()))
    example = next(c for c in checks if c["label"] == "example")
    assert example["max_abs_error"] <= INT8_ATOL * scale


@pytest.mark.parametrize("target", TARGETS)
def test_a_static_batch_of_one_calibrates_on_batches(
    model: DigitsNet, digits: dict[str, torch.Tensor], target: str
) -> None:
    """Lowered at a static batch of 1, calibrated with batches of 16 (a DataLoader's): each batch is
    16 samples of one image (the calibration batch is not the export batch); refused before."""
    require_target(target)
    deployed = fxdeploy.lower(model, (digits["test_x"][:1],), target=target, settings=INT8,
                              calibration=_calibration(digits, count=2, batch=16))
    assert deployed.manifest["inputs"][0]["shape"] == [1, 1, 8, 8]
    assert deployed.manifest["info"]["int8"]["calibration"]["samples"] == 32
    with torch.no_grad():
        fp32 = model(digits["test_x"]).argmax(1)
    int8 = torch.cat([deployed(image[None]) for image in digits["test_x"]]).argmax(1)
    assert float((int8 == fp32).float().mean()) >= 0.98


@pytest.mark.parametrize("target", TARGETS)
def test_a_split_block_keeps_its_top1(digits: dict[str, torch.Tensor], target: str) -> None:
    """YOLO's C2f/C3k2 structure (SplitNet), trained here: INT8 top-1 within 1 point of fp32."""
    require_target(target)
    model = _trained(digits, net=SplitNet)
    deployed = fxdeploy.lower(model, (digits["test_x"][:4],), target=target, dynamic_shapes=BATCH, settings=INT8,
                              calibration=_calibration(digits))
    with torch.no_grad():
        fp32 = _accuracy(model(digits["test_x"]), digits["test_y"])
    assert fp32 > 90.0, f"the model did not train ({fp32:.1f}%)"
    assert abs(_accuracy(deployed(digits["test_x"]), digits["test_y"]) - fp32) <= 1.0

@pytest.mark.parametrize(("target", "method"), [(t, m) for t in TARGETS for m in METHODS[t]])
def test_other_calibration_methods(model: DigitsNet, digits: dict[str, torch.Tensor], target: str, method: str) -> None:
    require_target(target)
    calibration = fxdeploy.Calibration(_calibration(digits, count=12), samples=12, method=method)
    deployed = fxdeploy.lower(model, (digits["test_x"][:4],), target=target, dynamic_shapes=BATCH, settings=INT8,
                              calibration=calibration)
    with torch.no_grad():
        fp32 = _accuracy(model(digits["test_x"]), digits["test_y"])
    assert abs(_accuracy(deployed(digits["test_x"]), digits["test_y"]) - fp32) <= 1.0
    assert deployed.manifest["info"]["int8"]["calibration"] == {"samples": 12, "method": method}


def test_without_the_float_region_sigmoid_scores_collapse(
    digits: dict[str, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trained network with sigmoid scores: its quantized tail rounds the scores onto
    uint8's grid (at most 256 values over 3970 scores); kept float, they stay distinct."""
    require_target("onnxruntime")
    scorer = _trained(digits, sigmoid_scores=True)
    example, test = (digits["test_x"][:4],), digits["test_x"]

    def distinct(deployed: fxdeploy.Deployed) -> int:
        return int(deployed(test).unique().numel())

    kept = fxdeploy.lower(scorer, example, dynamic_shapes=BATCH, settings=INT8, calibration=_calibration(digits))
    assert distinct(kept) > 0.9 * test.shape[0] * 10
    monkeypatch.setattr(ort_quantize, "float_nodes", lambda model: {})
    # the default path: each score moves by at most half a uint8 step, within lower()'s tolerance, so
    # only the ties show what the quantized tail costs
    rounded = fxdeploy.lower(scorer, example, dynamic_shapes=BATCH, settings=INT8, calibration=_calibration(digits))
    assert distinct(rounded) <= 256


def test_openvino_has_no_entropy_calibration(model: DigitsNet, digits: dict[str, torch.Tensor]) -> None:
    require_target("openvino")
    calibration = fxdeploy.Calibration(_calibration(digits), method="entropy")
    with pytest.raises(FxDeployError, match=r"method 'entropy': the openvino target \(NNCF\) calibrates with "
                                            r"\['minmax', 'percentile'\]"):
        fxdeploy.lower(model, (digits["test_x"][:4],), target="openvino", dynamic_shapes=BATCH, settings=INT8,
                       calibration=calibration)


def test_int8_needs_calibration_and_only_int8_takes_it(model: DigitsNet, digits: dict[str, torch.Tensor]) -> None:
    example = (digits["test_x"][:4],)
    with pytest.raises(FxDeployError, match=r"'int8' needs calibration data: pass lower\(\.\.\., calibration=\.\.\.\)"):
        fxdeploy.lower(model, example, settings=INT8)
    with pytest.raises(FxDeployError, match=r"calibration: given, but Settings.precision is 'fp32'"):
        fxdeploy.lower(model, example, calibration=_calibration(digits))
    for target, why in [("torchscript", "no maintained tool quantizes a TorchScript graph"),
                        ("ncnn", "ncnn's INT8 needs its ncnn2table and ncnn2int8 tools")]:
        require_target(target)
        with pytest.raises(LoweringError, match=rf"target '{target}' supports \[.*\], got 'int8' \({why}.*use "
                           r"onnxruntime or openvino for INT8 on a CPU\); targets with int8: "
                           r"\['onnxruntime', 'openvino', 'tensorrt'\]"):
            fxdeploy.lower(model, example, target=target, settings=INT8, calibration=_calibration(digits))


def _failing(data: object, model: DigitsNet, digits: dict[str, torch.Tensor], match: str,
             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """lower() with this calibration data raises ``match``, and leaves no artifact directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(FxDeployError, match=match):
        fxdeploy.lower(model, (digits["test_x"][:4],), dynamic_shapes=BATCH, settings=INT8, calibration=data)
    assert not list(tmp_path.glob("fxdeploy-*")), "a failed INT8 lowering left its directory behind"


def _raising_midway(digits: dict[str, torch.Tensor]):  # noqa: ANN202 - a generator
    yield from _calibration(digits, count=3)
    raise OSError("the image folder went away")


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda d: _calibration(d, count=3), r"calibration: 3 sample\(s\) given, 8 needed"),
        (lambda d: fxdeploy.Calibration(_calibration(d, count=10), samples=12), r"10 sample\(s\) given, 12 needed"),
        (lambda d: [], r"calibration: 0 sample\(s\) given, 8 needed"),
        (_raising_midway, r"reading sample #3 raised OSError: the image folder went away"),
        (lambda d: [*_calibration(d, 4), (d["train_x"][:2], d["train_x"][:2]), *_calibration(d, 4)],
         r"calibration sample #4: expected the model's inputs as lower\(\) was given them \(1 tensor"),
        (lambda d: [*_calibration(d, 5), (d["train_x"][:2].double(),)],
         r"sample #5, input 'x': expected dtype torch.float32, got torch.float64"),
        (lambda d: [*_calibration(d, 2), (d["train_x"][:2, :, :4],)],
         r"sample #2, input 'x': dim 2 must be 8 \(the artifact's shape \['batch', 1, 8, 8\]\), got 4"),
        (lambda d: [*_calibration(d, 6), (torch.zeros(513, 1, 8, 8),)],
         r"sample #6, input 'x': dim 0 \(batch\) must be in \[1, 512\], got 513"),
        (lambda d: [*_calibration(d, 7), (torch.full((2, 1, 8, 8), float("nan")),)],
         r"sample #7, input 'x': holds NaN or inf"),
    ],
    ids=["too_few", "fewer_than_asked", "empty", "raises_midway", "structure", "dtype", "shape", "beyond_batch", "nan"],
)
def test_bad_calibration_names_the_sample(
    make, match: str, model: DigitsNet, digits: dict[str, torch.Tensor],  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    require_target("onnxruntime")
    _failing(make(digits), model, digits, match, monkeypatch, tmp_path)


def test_calibration_far_from_the_example_warns_and_the_check_refuses(
    model: DigitsNet, digits: dict[str, torch.Tensor]
) -> None:
    """Calibrated on dim images (a tenth of the brightness), the activation ranges clip the real
    ones: a warning gives both ranges, and lower()'s INT8 check refuses the artifact."""
    require_target("onnxruntime")
    dim = [(x * 0.1,) for (x,) in _calibration(digits)]
    with pytest.warns(CalibrationWarning, match=r"input 'x' spans \[0, 0\.1\] in the calibration samples but "
                                                 r"\[0, 1\] in the example"), \
            pytest.raises(LoweringError, match=r"output #0 differs from eager by .* \(INT8 tolerance"):
        fxdeploy.lower(model, (digits["test_x"][:4],), dynamic_shapes=BATCH, settings=INT8, calibration=dim)


def test_tensorrt_int8_onnx_is_symmetric_qdq_and_accurate_on_onnxruntime(
    model: DigitsNet, digits: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """The ONNX the TensorRT engine is built from (``tensorrt_onnx``), at INT8: symmetric int8 Q/DQ
    pairs (every zero point 0, what TensorRT's explicit quantization reads), the last Gemm float,
    and run here on ONNX Runtime, top-1 within 1 point of fp32 (the engine itself needs a GPU).

    ONNX Runtime runs the Q/DQ graph as written (basic optimizations: each DequantizeLinear, the
    float op, QuantizeLinear), which is what TensorRT computes with its int32 accumulation. At full
    optimization it fuses them into S8S8 kernels that, on a CPU without VNNI, saturate 16-bit sums
    (77% top-1 here on an AVX2 machine); that is ONNX Runtime's CPU kernel, not this ONNX."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    calibration = fxdeploy.Calibration(_calibration(digits))
    *_, info = tensorrt_onnx_file(model, (digits["test_x"][:4],), BATCH, tmp_path, INT8, calibration)
    info = info["int8"]
    assert info["activations"] == "int8, symmetric" and list(info["float_ops"]) == ["node_linear"]
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    zero_points = [initializers[n.input[2]] for n in graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.dtype.name == "int8" and not z.any() for z in zero_points)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), options, providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"x": digits["test_x"].numpy()})
    with torch.no_grad():
        fp32 = _accuracy(model(digits["test_x"]), digits["test_y"])
    assert abs(_accuracy(torch.from_numpy(logits), digits["test_y"]) - fp32) <= 1.0


def test_the_artifact_cache_keys_on_the_calibration_values(
    model: DigitsNet, digits: dict[str, torch.Tensor], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same calibration is a hit (a generator, read once, included); other values miss."""
    from fxdeploy.settings import CacheSettings

    def outcomes() -> list[str]:
        return [r.getMessage().split()[1] for r in caplog.records if r.getMessage().startswith("cache ")]

    require_target("onnxruntime")
    caplog.set_level(logging.INFO, logger="fxdeploy.cache.store")
    settings = fxdeploy.Settings(precision="int8", cache=CacheSettings(enabled=True, dir=str(tmp_path)))
    example = (digits["test_x"][:4],)
    first = fxdeploy.lower(model, example, dynamic_shapes=BATCH, settings=settings, calibration=_calibration(digits))
    again = fxdeploy.lower(model, example, dynamic_shapes=BATCH, settings=settings,
                           calibration=(sample for sample in _calibration(digits)))
    assert outcomes() == ["miss", "store", "hit"]
    assert again.manifest["info"]["int8"] == first.manifest["info"]["int8"]
    assert torch.equal(again(digits["test_x"]), first(digits["test_x"]))
    other = [(x * 0.9,) for (x,) in _calibration(digits)]
    with pytest.warns(CalibrationWarning):  # 0.9 of the brightness: the example reaches past it
        fxdeploy.lower(model, example, dynamic_shapes=BATCH, settings=settings, calibration=other)
    assert outcomes() == ["miss", "store", "hit", "miss", "store"]
