"""Small helpers shared by tests: target availability, subprocess runs and max-error comparison."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import fxdeploy

ROOT = Path(__file__).resolve().parent.parent


NOT_INSTALLABLE = frozenset({"tensorrt"})
"""Targets no machine here can install (TensorRT needs a CUDA GPU): they skip, even where required."""


def require_target(target: str) -> None:
    """Skip the test, with the reason, where ``target`` cannot run here; fail instead where the run
    requires every runtime that installs here (the detector leg: FXDEPLOY_REQUIRE_DETECTORS=1)."""
    status = fxdeploy.targets()[target]
    if not status.available:
        message = f"{target}: {status.reason}"
        if os.environ.get("FXDEPLOY_REQUIRE_DETECTORS") == "1" and target not in NOT_INSTALLABLE:
            pytest.fail(message + " (FXDEPLOY_REQUIRE_DETECTORS=1: every runtime that installs here must run)")
        pytest.skip(message)


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: int = 300) -> str:
    """Run code in a fresh interpreter; fail the test with its stderr if it exits non-zero."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT
    )
    assert result.returncode == 0, f"subprocess failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return result.stdout


def max_abs_error(got: Any, want: Any) -> float:
    """Max |got - want| over every tensor leaf; structures must match exactly."""
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"structure differs:\n{got_spec}\nvs\n{want_spec}"
    error = 0.0
    for g, w in zip(got_leaves, want_leaves, strict=True):
        if isinstance(w, torch.Tensor):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            error = max(error, (g.double() - w.double()).abs().max().item() if w.numel() else 0.0)
        else:
            assert g == w, (g, w)
    return error


def special_pairs(special: list[float], random: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ordered pair of the ``special`` values (NaN, infinities, zeros), then ``random`` normal
    pairs, as two [2, n] tensors: a binary op's inputs for an exact check against eager."""
    n = len(special)
    a, b = torch.tensor(special).repeat_interleave(n), torch.tensor(special).repeat(n)
    generator = torch.Generator().manual_seed(0)
    a = torch.cat([a, torch.randn(random, generator=generator)])
    b = torch.cat([b, torch.randn(random, generator=generator)])
    return a.reshape(2, -1), b.reshape(2, -1)


def count_engine_calls(deployed: fxdeploy.Deployed) -> list[int]:
    """From now on, counts the engine calls of this Deployed's executor (an instance attribute of
    this one executor, nothing global): ``calls[0]``."""
    calls = [0]
    run = deployed.executor.run

    def counting(feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        calls[0] += 1
        return run(feeds)

    deployed.executor.run = counting  # type: ignore[method-assign]
    return calls


def assert_batched_engine(deployed: fxdeploy.Deployed, saved: Path) -> None:
    """A per-image loop model's artifact whose engine takes the whole batch (the per-image graph
    vectorized): the manifest says so, and model.onnx, where there is one, has a symbolic dim 0.
    ncnn's extractor takes one image: there the engine runs per image, as the manifest says."""
    per_image = deployed.manifest["per_image"]
    if deployed.target == "ncnn":
        assert per_image["engine"] == "image", per_image
        return
    assert per_image["engine"] == "batch", per_image
    if (saved / "model.onnx").is_file():
        import onnx

        model = onnx.load(str(saved / "model.onnx"), load_external_data=False)
        assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param, "dim 0 of the ONNX input is fixed"
    if deployed.target in ("onnxruntime", "openvino"):  # Triton batches it: the batch max, dynamic batching
        from fxdeploy.integrations.triton import export_triton
        from tests.integrations.test_triton import parse_config

        config, _ = parse_config(export_triton(saved, saved.parent / "triton", model_name="detector"))
        assert config.max_batch_size == per_image["max"] and config.HasField("dynamic_batching"), config


def tensorrt_onnx_file(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic_shapes: Any,
                       out_dir: Path, settings: fxdeploy.Settings | None = None,
                       calibration: fxdeploy.Calibration | None = None) -> tuple[Path, list[str], Any, dict]:
    """The TensorRT target's ONNX (what its engine is built from, written where TensorRT is absent),
    vectorized where the model loops over its images, quantized where ``calibration`` is given:
    the file, its output names, the job and the lowering's info."""
    from fxdeploy.capture import batching, capture, substitution
    from fxdeploy.passes.base import run_pipeline
    from fxdeploy.passes.record import record, update
    from fxdeploy.quantize.calibration import Calibrated, calibration_samples
    from fxdeploy.targets import LoweringJob, get_target
    from fxdeploy.targets.tensorrt import tensorrt_onnx

    settings, target = settings or fxdeploy.Settings(), get_target("tensorrt")
    # the built-in substitutions (torchvision's NMS functions, where installed), as lower() passes them
    captured = capture(model, example, dynamic_shapes=dynamic_shapes, substitutions=substitution.resolve(None),
                       settings=settings)
    gm = captured.graph_module
    update(gm, output_names=tuple(captured.output_names))
    gm, _ = run_pipeline(gm, target.pipeline, settings)
    names = [leaf["name"] for leaf in record(gm).output_leaves if leaf["kind"] != "constant"]
    job = LoweringJob(gm, captured.example_inputs, captured.input_names, names, captured.export_dynamic_shapes,
                      settings, out_dir)
    if captured.per_image is not None:
        engine = batching.engine_for(target, captured, settings)
        job = batching.vectorized_job(job, captured, engine)
        assert engine.batched, engine.why
    if calibration is not None:
        job.calibration = Calibrated(calibration, calibration_samples(calibration, captured, True))
    return out_dir / "model.onnx", names, job, tensorrt_onnx(job).info
