"""ncnn: the passed graph traced to TorchScript, converted by pnnx, run by ncnn on the CPU.

ncnn has no general NMS layer, so the ncnn pipeline ends with ``host_postprocess_split`` and
the NMS tail runs on the host inside the same timed ``execute`` (see docs/nms-spec.md).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings
from fxdeploy.targets.base import Lowered, LoweringJob, Target
from fxdeploy.targets.sections import NcnnSettings

INSTALL = "pip install fxdeploy[ncnn]"


def lower(job: LoweringJob) -> Lowered:
    from fxdeploy.lowering.ncnn import lower_ncnn

    files, plan, moved = lower_ncnn(
        job.graph_module, job.example_inputs, job.input_names, job.output_names, job.out_dir,
        settings=job.settings,
    )
    fallback = {"ops": moved, "max_host_ops": job.settings.ncnn.max_host_ops}
    return Lowered(files, {"ncnn": plan, "pnnx_version": _dist_version("pnnx"),
                           **({"unconverted_on_host": fallback} if moved else {})})


def load(directory: Path, manifest: Manifest, settings: Settings) -> Executor:
    from fxdeploy.runtime.ncnn import NcnnExecutor

    return NcnnExecutor(directory, manifest, settings)


def version() -> str | None:
    from fxdeploy.runtime.ncnn import version as ncnn_version

    return ncnn_version()


def unavailable_reason() -> str | None:
    """Both halves are needed: pnnx converts, ncnn runs."""
    missing = [name for name in ("ncnn", "pnnx") if _dist_version(name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed: {INSTALL}"
    if version() is None:
        return f"ncnn is installed but does not import: {INSTALL}"
    return None


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


TARGET = Target(
    name="ncnn",
    pipeline=pipeline_for("ncnn"),
    lower=lower,
    load=load,
    version=version,
    install_hint=INSTALL,
    unavailable_reason=unavailable_reason,
    batched_engine=False,  # its extractor takes one image
    unsupported={"int8": "ncnn's INT8 needs its ncnn2table and ncnn2int8 tools, which the ncnn and pnnx wheels do "
                         "not ship (build them from ncnn's source); use onnxruntime or openvino for INT8 on a CPU"},
    sections={"ncnn": NcnnSettings},
)
