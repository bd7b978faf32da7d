"""First vs second ``lower()`` of ResNet-50 through the artifact cache (the bar: second >= 10x faster).

Until ``fxdeploy.lower`` calls the cache itself, this does what it will do: fingerprint the model
(``model_parts``), then ``cached_lower`` with ``fxdeploy.lower`` as the build function and the
in-process loader, so a hit returns the same output types as a fresh ``lower()``. The first call
runs on an empty cache directory (a miss: capture, passes, ONNX export, verification, store);
the second is a hit (fingerprint, hash check of the cached files, runtime session, one eager
forward). The second's own parts are timed too. Outputs of both are compared.

    .venv/bin/python benchmarks/cache_bench.py [--target onnxruntime] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.models import resnet50  # noqa: E402
from fxdeploy.cache import cached_lower, in_process_loader, model_parts, open_cache  # noqa: E402
from fxdeploy.capture import substitution  # noqa: E402


def cached(model: torch.nn.Module, inputs: tuple[Any, ...], target: str, cache_dir: str) -> tuple[Any, bool, float]:
    """One lower() as it will run with the cache on: (Deployed, hit, seconds)."""
    settings = fxdeploy.Settings()
    start = time.perf_counter()
    subs = substitution.resolve(None)
    deployed, hit = cached_lower(
        target, model_parts(model, inputs, None, None, subs),
        build=lambda: fxdeploy.lower(model, inputs, target=target, settings=settings),
        settings_dict=settings.to_dict(), cache_dir=cache_dir, load=in_process_loader(model, inputs, None, subs),
    )
    return deployed, hit, time.perf_counter() - start


def parts_of_a_hit(model: torch.nn.Module, inputs: tuple[Any, ...], target: str, cache_dir: str) -> dict[str, float]:
    settings, subs = fxdeploy.Settings(), substitution.resolve(None)
    cache, times = open_cache(cache_dir), {}
    start = time.perf_counter()
    parts = model_parts(model, inputs, None, None, subs)
    key = cache.key(target=target, settings=settings.to_dict(), parts=parts)
    times["fingerprint_s"] = time.perf_counter() - start
    start = time.perf_counter()
    found = cache.lookup(key)
    times["lookup_and_hash_check_s"] = time.perf_counter() - start
    assert found is not None, "the second lookup must hit"
    start = time.perf_counter()
    in_process_loader(model, inputs, None, subs)(*found)
    times["load_s"] = time.perf_counter() - start
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="onnxruntime")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model, inputs = resnet50()
    with tempfile.TemporaryDirectory(prefix="fxdeploy-cache-bench-") as cache_dir:
        first, hit1, t1 = cached(model, inputs, args.target, cache_dir)
        second, hit2, t2 = cached(model, inputs, args.target, cache_dir)
        parts = parts_of_a_hit(model, inputs, args.target, cache_dir)
        same = torch.equal(first(*inputs).logits, second(*inputs).logits)
        result = {
            "model": "resnet50", "target": args.target, "first_s": round(t1, 3), "second_s": round(t2, 3),
            "ratio": round(t1 / t2, 1), "first_hit": hit1, "second_hit": hit2, "identical_outputs": same,
            "second_output_type": type(second(*inputs)).__name__,
            "hit_parts_s": {k: round(v, 3) for k, v in parts.items()},
            "cache_bytes": open_cache(cache_dir).size(), "torch_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
        }
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name:>20}: {value}")
    ok = not hit1 and hit2 and same and result["ratio"] >= 10
    print("PASS" if ok else "FAIL", "(bar: second lower() >= 10x faster, identical outputs)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
