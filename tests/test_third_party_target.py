"""A target from another distribution, found through the ``fxdeploy.targets`` entry-point group.

The third-party package lives in a temporary site directory with its own ``*.dist-info``; only a
subprocess sees it (on PYTHONPATH), so fxdeploy itself is not changed and this process's
registry is not touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fxdeploy.errors import RegistryError
from fxdeploy.targets import get_target, register_target
from tests.helpers import ROOT, run_python

PACKAGE = '''
"""my_pkg: reuses fxdeploy's ONNX lowering, runs it with a deliberately trivial executor."""
import onnxruntime
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.targets import Target
from fxdeploy.targets.onnxruntime import lower_onnx


class PlainSession(Executor):
    def __init__(self, path, names):
        super().__init__()
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = names

    def _run(self, feeds):
        import torch
        arrays = self.session.run(self.names, {k: v.numpy() for k, v in feeds.items()})
        return {n: torch.from_numpy(a.copy()) for n, a in zip(self.names, arrays)}


def _load(directory, manifest, settings):
    return PlainSession(directory / "model.onnx", [o["name"] for o in manifest["outputs"]])


def make_target(name="mytarget"):
    return Target(name=name, pipeline=pipeline_for("onnxruntime"), lower=lower_onnx, load=_load,
                  version=lambda: "1.0", install_hint="pip install my-pkg")


def make_duplicate():
    return make_target("onnxruntime")
'''

USE = """
import torch, fxdeploy
from examples import models
status = fxdeploy.targets()["mytarget"]
print(",".join(fxdeploy.targets()), status.available, status.version)
model, (x,) = models.convnet()
deployed = fxdeploy.lower(model, (x,), target="mytarget")
with torch.no_grad():
    print(type(deployed.executor).__name__, float((deployed(x) - model(x)).abs().max()))
loaded = fxdeploy.load(deployed.save({out!r}))
print(loaded.target, torch.equal(loaded(x), deployed(x)))
"""


def _site(root: Path, entry_points: str) -> Path:
    site = root / "site"
    (site / "my_pkg").mkdir(parents=True)
    (site / "my_pkg" / "__init__.py").write_text(PACKAGE)
    info = site / "my_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[fxdeploy.targets]\n{entry_points}\n")
    return site


def test_entry_point_target_is_listed_and_lowers_without_changing_fxdeploy(tmp_path: Path) -> None:
    site = _site(tmp_path, "mytarget = my_pkg:make_target")
    out = run_python(USE.format(out=str(tmp_path / "art")), env={"PYTHONPATH": f"{site}:{ROOT}"}).splitlines()
    names, available, version = out[0].split(" ")
    assert names.split(",") == ["onnxruntime", "openvino", "ncnn", "tensorrt", "torchscript", "mytarget"]
    assert (available, version) == ("True", "1.0")
    executor, error = out[1].split()
    assert executor == "PlainSession" and float(error) <= 1e-4
    assert out[2] == "mytarget True"


def test_entry_point_with_a_builtin_name_is_a_registry_error(tmp_path: Path) -> None:
    site = _site(tmp_path, "onnxruntime = my_pkg:make_duplicate")
    code = (
        "import fxdeploy\n"
        "from fxdeploy.errors import RegistryError\n"
        "try:\n    fxdeploy.targets()\nexcept RegistryError as exc:\n    print(exc)\n"
    )
    out = run_python(code, env={"PYTHONPATH": f"{site}:{ROOT}"})
    assert "target 'onnxruntime' is already registered" in out


def test_registering_a_duplicate_name_in_process_is_a_registry_error() -> None:
    builtin = get_target("onnxruntime")
    with pytest.raises(RegistryError, match="target 'onnxruntime' is already registered"):
        register_target(builtin)
    assert get_target("onnxruntime") is builtin
