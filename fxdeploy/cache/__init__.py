"""Artifact cache: a second ``lower()`` of the same model, settings and target loads, not rebuilds.

Where the key comes from, and why
---------------------------------
Measured on ResNet-50 (examples/models.py ``resnet50``, onnxruntime, a 2-core machine under
load): ``lower()`` took 35-42 s, of which capture (torch.export) was 8.5 s, ONNX export and
verification most of the rest, hashing the passed graph's code and 94 MB of weights 0.17 s and
loading the artifact 0.7 s. A key computed *after* capture and passes (a graph hash) would make
a hit cost capture + hash + load, about 9.4 s: 4x faster, short of the 10x bar. So ``lower()``
keys on the model *before* capture (``fingerprint.model_parts``, 0.23 s on ResNet-50): its
weights, every submodule's class, plain attributes and hooks, the source files defining those
classes, package versions, input structure/dtypes/shapes, ``dynamic_shapes``, substitutions,
the settings (less ``settings.cache``), the target, its runtime version, fxdeploy's version and
a digest of its source (a changed pass or lowering rebuilds), the torch/onnx/onnxscript/pnnx
versions, the CPU architecture and the GPU name. A hit then costs fingerprint 0.3 s + hash check
0.2 s + runtime session 0.6-1.5 s: 1.2-2.0 s against 35-42 s, 18-34x (benchmarks/cache_bench.py).

The trade-off: a model whose traced graph depends on something outside that list hits a stale
entry. Known cases: a helper function in *another* user file that changed (same-file helpers are
covered by the file hash; library helpers by the package version), global flags or environment
variables read inside ``forward``, and monkey-patched library functions. Users who do those turn
the cache off for that call. The torch.compile backends get a GraphModule, not a module, and key
on ``fingerprint.graph_parts`` (code plus every tensor read), which has no such blind spot.

Public pieces: ``ArtifactCache`` (key/get/put/evict/stats), ``cached_lower``, ``open_cache``,
``in_process_loader``, ``model_parts``, ``graph_parts``.
"""

from __future__ import annotations

from fxdeploy.cache.fingerprint import UncacheableError, graph_parts, model_parts
from fxdeploy.cache.lower import cached_lower, in_process_loader, load_artifact, open_cache
from fxdeploy.cache.store import DEFAULT_MAX_BYTES, ArtifactCache, CacheStats, default_root

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ArtifactCache",
    "CacheStats",
    "UncacheableError",
    "cached_lower",
    "default_root",
    "graph_parts",
    "in_process_loader",
    "load_artifact",
    "model_parts",
    "open_cache",
]
