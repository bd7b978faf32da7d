"""Artifacts: what is on disk and what it promises.

- ``manifest``: the manifest's typed schema, its one version, and its validation.
- ``store``: save a directory of data files plus ``manifest.json`` atomically; read one back as
  data only, hashes and schema checked (``read_manifest``).
- ``dims``, ``structure``, ``guards`` and ``signature``: the artifact's signature, its named dynamic
  dims, torch.export's guards kept as size arithmetic (never evaluated as code), the input and
  output trees, in the JSON form the manifest holds.
- ``onnx_files``, ``ncnn_net`` and ``jit_warnings``: the file formats' own rules (ONNX external
  data, one configured ``ncnn.Net``, quiet TorchScript), shared by lowering and the runtime.
"""

from fxdeploy.artifact.manifest import DTYPE_NAMES, MANIFEST, MAX_MANIFEST_BYTES, SCHEMA_VERSION, Manifest, validate
from fxdeploy.artifact.store import read_manifest, save, sha256

__all__ = [
    "DTYPE_NAMES", "MANIFEST", "MAX_MANIFEST_BYTES", "SCHEMA_VERSION", "Manifest", "read_manifest", "save", "sha256",
    "validate",
]
