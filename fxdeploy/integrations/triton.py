"""``export_triton``: a saved artifact as one model of a Triton Inference Server model repository.

Layout: ``<repo>/<name>/config.pbtxt`` and ``<repo>/<name>/<version>/<model file>``.

- onnxruntime → platform ``onnxruntime_onnx`` with model.onnx (and its external data, if any);
- openvino → backend ``openvino`` with model.onnx (``default_model_filename``), KIND_CPU; an INT8
  artifact's IR as model.xml and model.bin;
- tensorrt → platform ``tensorrt_plan`` with model.plan, KIND_GPU. The plan only runs under the
  TensorRT version and GPU it was built with (recorded in the config's comment and parameters);
- torchscript → platform ``pytorch_libtorch`` with model.pt. Triton's libtorch backend binds
  tensors by position through the ``INPUT__i`` / ``OUTPUT__i`` naming convention, so the config
  uses those names (in manifest order, which is the scripted forward's order) and records the
  mapping to the manifest's names in a comment and the ``fxdeploy_names`` parameter;
- a plugin target whose artifact is one ``model.onnx`` → ``onnxruntime_onnx``, as above;
- ncnn and any other target are refused, with the reason: Triton has no backend for them.

The model directory is written whole and swapped in atomically, like ``artifact.save``; version
directories already there for other versions are kept (hard-linked into the new directory).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from fxdeploy import artifact
from fxdeploy.artifact import store
from fxdeploy.artifact.manifest import Manifest
from fxdeploy.errors import ArtifactError, FxDeployError
from fxdeploy.integrations.triton_config import layout, triton_config

logger = logging.getLogger(__name__)

FORMATS: dict[str, dict[str, str]] = {
    "onnxruntime": {"platform": "onnxruntime_onnx", "file": "model.onnx", "kind": "KIND_CPU"},
    "openvino": {
        "backend": "openvino", "default_model_filename": "model.onnx", "file": "model.onnx", "kind": "KIND_CPU",
    },
    "tensorrt": {"platform": "tensorrt_plan", "file": "model.plan", "kind": "KIND_GPU"},
    "openvino IR": {  # an INT8 openvino artifact: NNCF's IR (fxdeploy/quantize/openvino.py)
        "backend": "openvino", "default_model_filename": "model.xml", "file": "model.xml", "kind": "KIND_CPU",
    },
    "torchscript": {"platform": "pytorch_libtorch", "file": "model.pt", "kind": "KIND_CPU"},
}
REFUSED = {
    "ncnn": "Triton Inference Server has no ncnn backend, and an ncnn artifact runs its NMS tail on the "
            "host inside fxdeploy's runtime; lower to onnxruntime, openvino or tensorrt for Triton",
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TritonExportError(FxDeployError):
    """The artifact cannot become a Triton model (unsupported target, bad name or version)."""


def export_triton(
    artifact_dir: str | os.PathLike[str],
    repo_dir: str | os.PathLike[str],
    *,
    model_name: str | None = None,
    version: int = 1,
    max_batch_size: int | None = None,
    instance_count: int = 1,
    dynamic_batching: bool = True,
) -> Path:
    """Write ``<repo>/<name>`` for the artifact and return that model directory."""
    root, manifest = artifact.read_manifest(artifact_dir)  # checks hashes before anything is copied
    name = model_name or root.name
    _check_args(name, version, instance_count)
    model_format = _format(manifest["target"], manifest["files"])
    resolved = layout(manifest, max_batch_size)
    io_names = _io_names(manifest)
    config = triton_config(
        manifest, model_name=name, model_format=model_format, io_names=io_names, layout_=resolved,
        instance_count=instance_count, dynamic_batching=dynamic_batching,
    )
    dest = Path(repo_dir).absolute() / name
    _write_model_dir(dest, config, root, _model_files(manifest, model_format["file"]), version)
    logger.info(
        "triton: wrote %s (version %d, max_batch_size %d) from %s", dest, version, resolved.max_batch_size, root
    )
    return dest


def _check_args(name: str, version: int, instance_count: int) -> None:
    if not _NAME.match(name):
        raise TritonExportError(
            f"model name {name!r}: use letters, digits, '_', '.', '-' (it becomes a directory name)"
        )
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise TritonExportError(f"version must be an integer >= 1 (a Triton version directory), got {version!r}")
    if instance_count < 1:
        raise TritonExportError(f"instance_count must be >= 1, got {instance_count}")


def _format(target: str, files: dict[str, str]) -> dict[str, str]:
    """A built-in target's Triton format; a plugin target's artifact is served as ONNX where it is
    one (its model.onnx is all there is: no host stage, no other engine file)."""
    if target == "openvino" and "model.xml" in files:
        return FORMATS["openvino IR"]
    if target in FORMATS:
        return FORMATS[target]
    if target in REFUSED:
        raise TritonExportError(f"cannot export a {target!r} artifact to Triton: {REFUSED[target]}")
    engine = [name for name in files if not name.endswith(".data")]
    if engine == ["model.onnx"]:
        logger.info("triton: %r is a plugin target; its model.onnx goes to Triton's ONNX Runtime backend", target)
        return FORMATS["onnxruntime"]
    raise TritonExportError(
        f"cannot export a {target!r} artifact to Triton: it is a plugin target whose artifact is not one ONNX "
        f"model (files {sorted(files)}), and Triton export takes ONNX, TensorRT plans and TorchScript; "
        "lower to onnxruntime, openvino, tensorrt or torchscript for Triton"
    )


def _io_names(manifest: Manifest) -> dict[str, str]:
    """Manifest name → Triton name; only the libtorch backend needs other names than ours."""
    inputs = [spec["name"] for spec in manifest["inputs"]]
    outputs = [spec["name"] for spec in manifest["outputs"]]
    if manifest["target"] != "torchscript":
        return {n: n for n in inputs + outputs}
    return {**{n: f"INPUT__{i}" for i, n in enumerate(inputs)}, **{n: f"OUTPUT__{i}" for i, n in enumerate(outputs)}}


def _model_files(manifest: Manifest, main: str) -> dict[str, str]:
    """The files Triton loads, with the sha256 the manifest records for each."""
    files: dict[str, str] = manifest["files"]
    if main not in files:
        raise ArtifactError(f"the {manifest['target']} artifact has no {main!r}; its files are {sorted(files)}")
    extra = [n for n in files if main == "model.onnx" and n.endswith(".data")]  # ONNX external weights
    extra += [n for n in files if main == "model.xml" and n == "model.bin"]  # IR weights
    return {n: files[n] for n in [main, *extra]}


def _write_model_dir(dest: Path, config: str, source: Path, files: dict[str, str], version: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and not (dest / "config.pbtxt").is_file() and any(dest.iterdir()):
        raise TritonExportError(f"refusing to replace {dest}: it exists and holds no config.pbtxt")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        (staging / "config.pbtxt").write_text(config)
        version_dir = staging / str(version)
        version_dir.mkdir()
        for name, digest in files.items():
            shutil.copyfile(source / name, version_dir / name)
            if artifact.sha256(version_dir / name) != digest:
                raise ArtifactError(f"{source / name}: the copy's sha256 differs from the manifest's")
        _keep_other_versions(dest, staging, version)
        _swap(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _keep_other_versions(dest: Path, staging: Path, version: int) -> None:
    if not dest.is_dir():
        return
    for entry in dest.iterdir():
        if entry.is_dir() and entry.name.isdigit() and int(entry.name) != version:
            shutil.copytree(entry, staging / entry.name, copy_function=_link_or_copy)
            logger.info("triton: kept version %s of %s", entry.name, dest)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _swap(staging: Path, dest: Path) -> None:
    if not dest.exists():
        os.rename(staging, dest)
        return
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    if store.exchange(staging, dest):  # the same renameat2 swap as artifact.save
        shutil.rmtree(staging)
        return
    os.rename(dest, old)
    os.rename(staging, dest)
    shutil.rmtree(old)
