"""TorchScript: the passed graph scripted into ``model.pt``, run by ``torch.jit.load``.

The artifact needs only torch: multiclass_nms is compiled in as the scripted reference kernel,
and no fxdeploy op or Python object is pickled into it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings
from fxdeploy.targets.base import Lowered, LoweringJob, Target

MODEL_FILE = "model.pt"


def lower_torchscript(job: LoweringJob) -> Lowered:
    from fxdeploy.artifact.jit_warnings import quiet_jit
    from fxdeploy.lowering.torchscript import script_graph

    module = script_graph(job.graph_module, target="torchscript")
    with quiet_jit():
        module.save(str(job.out_dir / MODEL_FILE))
    return Lowered([MODEL_FILE], {"torchscript": "scripted"})


def load(directory: Path, manifest: Manifest, settings: Settings) -> Executor:
    from fxdeploy.runtime.torchscript import TorchScriptExecutor

    names = [o["name"] for o in manifest["outputs"]]
    return TorchScriptExecutor(directory / MODEL_FILE, names, settings)


def version() -> str | None:
    return torch.__version__.split("+")[0]


TARGET = Target(
    name="torchscript",
    pipeline=pipeline_for("torchscript"),
    lower=lower_torchscript,
    load=load,
    version=version,
    install_hint="pip install torch",
    precisions=("fp32", "fp16", "bf16"),
    unsupported={"int8": "no maintained tool quantizes a TorchScript graph: torch.ao.quantization is deprecated "
                         "for torchao, whose INT8 does not script; use onnxruntime or openvino for INT8 on a CPU"},
)
