"""TensorRT engine build from ONNX, written against the TensorRT 10/11 Python API.

The ONNX comes from the shared ONNX lowering (``fxdeploy.targets.tensorrt.tensorrt_onnx``), so
its numerics can be proven on ONNX Runtime where no GPU exists; this module only turns that
ONNX into a serialized engine (``model.plan``), with an optional on-disk engine cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fxdeploy.artifact.dims import INT_MAX
from fxdeploy.errors import LoweringError
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)

PLAN = "model.plan"
UNBOUNDED_CAP = 4
"""An unbounded dynamic dim gets max = opt * UNBOUNDED_CAP: TensorRT needs a finite profile."""

Profile = dict[str, tuple[list[int], list[int], list[int]]]


def profile_shapes(
    example_inputs: Sequence[torch.Tensor], input_names: Sequence[str],
    dynamic_shapes: Sequence[dict[int, Any] | None],
) -> Profile:
    """min/opt/max per input from the export Dims; opt is the example's size."""
    profile: Profile = {}
    for name, example, dims in zip(input_names, example_inputs, dynamic_shapes, strict=True):
        opt = [int(d) for d in example.shape]
        low, high = list(opt), list(opt)
        for axis, dim in (dims or {}).items():
            low[axis] = max(1, min(_bound(getattr(dim, "min", None), default=1), opt[axis]))
            upper = _bound(getattr(dim, "max", None))
            high[axis] = upper if upper < INT_MAX else max(opt[axis] * UNBOUNDED_CAP, low[axis])
        profile[name] = (low, opt, high)
    return profile


def _bound(value: Any, default: int = INT_MAX) -> int:
    """A Dim bound as an int; unset or infinite (sympy oo) bounds give ``default``."""
    try:
        return min(int(value), INT_MAX) if value is not None else default
    except (TypeError, ValueError, OverflowError, AttributeError):
        return default


def build_engine(onnx_path: Path, profile: Profile, settings: Settings, out_dir: Path) -> dict[str, Any]:
    """Write ``out_dir/model.plan``, from the cache when an identical build is there."""
    import tensorrt as trt

    key = cache_key(_onnx_digest(onnx_path), profile, settings, trt.__version__)
    cache_dir = Path(settings.tensorrt.engine_cache_dir) if settings.tensorrt.engine_cache_dir else None
    cached = cache_dir / f"{key}.plan" if cache_dir else None
    if cached is not None and cached.is_file():
        logger.info("tensorrt: engine cache hit %s", cached)
        shutil.copyfile(cached, out_dir / PLAN)
    else:
        (out_dir / PLAN).write_bytes(_build(trt, onnx_path, profile, settings))
        if cached is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".partial-{key[:8]}")
            shutil.copyfile(out_dir / PLAN, partial)
            partial.replace(cached)  # atomic: a reader never sees half an engine
    return {"tensorrt_profile": {n: {"min": a, "opt": b, "max": c} for n, (a, b, c) in profile.items()},
            "engine_cache_key": key}


def _onnx_digest(onnx_path: Path) -> bytes:
    """sha256 over the model file and its external weights (``<name>.data``), read in chunks."""
    digest = hashlib.sha256()
    for path in (onnx_path, onnx_path.with_name(onnx_path.name + ".data")):
        if path.is_file():
            with path.open("rb") as f:
                while chunk := f.read(1 << 24):
                    digest.update(chunk)
    return digest.digest()


def cache_key(onnx_digest: bytes, profile: Profile, settings: Settings, trt_version: str) -> str:
    """An engine is only valid for the same ONNX, build settings, TensorRT version and GPU."""
    digest = hashlib.sha256(onnx_digest)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
    build = {"precision": settings.precision, "tensorrt": dataclasses.asdict(settings.tensorrt)}
    build["tensorrt"].pop("engine_cache_dir")  # where the cache lives does not change the engine
    extra = {"build": build, "profile": profile, "tensorrt": trt_version, "gpu": gpu}
    digest.update(json.dumps(extra, sort_keys=True).encode())
    return digest.hexdigest()


@functools.cache
def _logger(trt: Any) -> Any:
    """One logger per process: TensorRT keeps the first one it is given and warns about others."""
    return trt.Logger(trt.Logger.WARNING)


def _build(trt: Any, onnx_path: Path, profile: Profile, settings: Settings) -> bytes:
    trt_logger = _logger(trt)
    builder = trt.Builder(trt_logger)
    network = builder.create_network(_network_flags(trt, settings))
    parser = trt.OnnxParser(network, trt_logger)
    if not parser.parse_from_file(str(onnx_path)):  # finds the external weights next to the file
        errors = "\n  ".join(_parse_errors(parser))
        raise LoweringError(f"tensorrt: the ONNX parser rejected {onnx_path.name}:\n  {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(settings.tensorrt.workspace_gib * 2**30))
    if settings.precision == "fp32" and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)  # on by default; fp32 means fp32 matmuls for parity
    optimization = builder.create_optimization_profile()
    for name, (low, opt, high) in profile.items():
        optimization.set_shape(name, low, opt, high)
    config.add_optimization_profile(optimization)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise LoweringError(
            f"tensorrt: build_serialized_network failed for {onnx_path.name} with profile {profile}; "
            "the TensorRT log above says why"
        )
    return bytes(serialized)


def _network_flags(trt: Any, settings: Settings) -> int:
    """fp32: default flags (explicit batch is the only mode in TensorRT 10+). fp16/bf16: the ONNX
    already carries the precision policy's casts (NMS inputs, scores and box decoding in fp32),
    so the network is strongly typed and TensorRT keeps exactly those types; a weakly typed
    network with the FP16/BF16 builder flag could move the excluded ops to half precision too.
    int8: the ONNX carries explicit Q/DQ pairs (``targets.tensorrt.tensorrt_onnx``), which a
    strongly typed network runs as written, with no INT8 builder flag or calibrator."""
    if settings.precision == "fp32":
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)


def _parse_errors(parser: Any) -> list[str]:
    """One line per error, naming the ONNX node and operator where TensorRT reports them."""
    lines: list[str] = []
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        node_name = error.node_name() if hasattr(error, "node_name") else ""
        operator = error.node_operator() if hasattr(error, "node_operator") else ""
        where = f"node #{error.node()}"
        if operator or node_name:
            where += f" {node_name!r} ({operator})"
        lines.append(f"{where}: {error.desc()}")
    return lines
