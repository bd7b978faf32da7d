"""TensorRT build inputs that need no TensorRT: optimization profiles and the engine cache key."""

from __future__ import annotations

import torch
from torch.export import Dim

from fxdeploy.lowering.tensorrt import UNBOUNDED_CAP, cache_key, profile_shapes
from fxdeploy.settings import Settings
from fxdeploy.targets.sections import TensorRTSettings


def test_profile_takes_min_and_max_from_dims_and_opt_from_the_example() -> None:
    profile = profile_shapes(
        [torch.zeros(2, 3, 32, 32), torch.zeros(7)],
        ["x", "y"],
        [{0: Dim("batch", min=1, max=16), 2: Dim("h", min=16, max=64)}, None],
    )
    assert profile["x"] == ([1, 3, 16, 32], [2, 3, 32, 32], [16, 3, 64, 32])
    assert profile["y"] == ([7], [7], [7])


def test_unbounded_dim_gets_a_finite_cap() -> None:
    profile = profile_shapes([torch.zeros(4, 3)], ["x"], [{0: Dim("batch", min=1)}])
    assert profile["x"] == ([1, 3], [4, 3], [4 * UNBOUNDED_CAP, 3])


def test_cache_key_changes_with_what_changes_the_engine_only() -> None:
    profile = {"x": ([1, 3], [2, 3], [8, 3])}
    base = cache_key(b"onnx", profile, Settings(), "10.7")
    # the subject is the key: lower()'s check (verify=False here) does not change the engine
    assert base == cache_key(b"onnx", profile, Settings(threads=7, verify=False), "10.7")
    cached = Settings().with_sections(tensorrt=TensorRTSettings(engine_cache_dir="/tmp/elsewhere"))
    assert base == cache_key(b"onnx", profile, cached, "10.7")
    for changed in (
        cache_key(b"other onnx", profile, Settings(), "10.7"),
        cache_key(b"onnx", {"x": ([1, 3], [2, 3], [16, 3])}, Settings(), "10.7"),
        cache_key(b"onnx", profile, Settings(precision="fp16"), "10.7"),
        cache_key(
            b"onnx", profile, Settings().with_sections(tensorrt=TensorRTSettings(workspace_gib=1)), "10.7"
        ),
        cache_key(b"onnx", profile, Settings(), "11.0"),
    ):
        assert changed != base
