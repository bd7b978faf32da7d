"""A target from another distribution, found through the ``fxdeploy.targets`` entry-point group.

The third-party package lives in a temporary site directory with its own ``*.dist-info``; only a
subprocess sees it (on PYTHONPATH), so fxdeploy itself is not changed and this process's
registry is not touched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fxdeploy.errors import RegistryError
from fxdeploy.targets import get_target, register_target
from tests.helpers import ROOT, run_python

PACKAGE = '''
"""my_pkg: reuses fxdeploy's ONNX lowering, runs it with a deliberately trivial executor."""
from dataclasses import dataclass
import onnxruntime
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Section
from fxdeploy.targets import Target
from fxdeploy.targets.onnxruntime import lower_onnx
from fxdeploy.targets.sections import OnnxSettings


@dataclass(frozen=True)
class MySettings(Section):
    level: int = 1
    """how hard my_pkg optimizes (recorded in the artifact's info)."""


def _lower(job):
    lowered = lower_onnx(job)
    lowered.info["level"] = job.settings.mypkg.level
    return lowered


class PlainSession(Executor):
    def __init__(self, path, names):
        super().__init__()
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = names

    def run(self, feeds):
        import torch
        arrays = self.session.run(self.names, {k: v.numpy() for k, v in feeds.items()})
        return {n: torch.from_numpy(a.copy()) for n, a in zip(self.names, arrays)}


def _load(directory, manifest, settings):
    return PlainSession(directory / "model.onnx", [o["name"] for o in manifest["outputs"]])


def make_target(name="mytarget", sections=None):
    return Target(name=name, pipeline=pipeline_for("onnxruntime"), lower=_lower, load=_load,
                  version=lambda: "1.0", install_hint="pip install my-pkg",
                  sections={"mypkg": MySettings, "onnx": OnnxSettings} if sections is None else sections)


def make_duplicate():
    return make_target("onnxruntime")


def make_clash():
    return make_target("clash", sections={"onnx": MySettings})


PACKAGE_NAME = "my_pkg"
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


def make_site(root: Path, entry_points: str) -> Path:
    """A site directory holding ``my_pkg`` as distribution my-pkg 1.0, with these target entry points."""
    site = root / "site"
    (site / "my_pkg").mkdir(parents=True)
    (site / "my_pkg" / "__init__.py").write_text(PACKAGE)
    info = site / "my_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[fxdeploy.targets]\n{entry_points}\n")
    return site


def test_entry_point_target_is_listed_and_lowers_without_changing_fxdeploy(tmp_path: Path) -> None:
    site = make_site(tmp_path, "mytarget = my_pkg:make_target")
    out = run_python(USE.format(out=str(tmp_path / "art")), env={"PYTHONPATH": f"{site}:{ROOT}"}).splitlines()
    names, available, version = out[0].split(" ")
    assert names.split(",") == ["onnxruntime", "openvino", "ncnn", "tensorrt", "torchscript", "mytarget"]
    assert (available, version) == ("True", "1.0")
    executor, error = out[1].split()
    assert executor == "PlainSession" and float(error) <= 1e-4
    assert out[2] == "mytarget True"


BUILTIN_STILL_WORKS = """
import json, subprocess, sys, torch, fxdeploy
from examples import models
for attempt in (1, 2):  # the first call and every later one
    rows = fxdeploy.targets()
    print(json.dumps({n: [s.available, s.reason, s.source] for n, s in rows.items()}))
model, (x,) = models.convnet()
deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
with torch.no_grad():
    print(float((deployed(x) - model(x)).abs().max()))
env = subprocess.run([sys.executable, "-m", "fxdeploy.cli", "check-env"], capture_output=True, text=True)
print(env.returncode, json.dumps(env.stdout))
"""


BROKEN = [
    ("onnxruntime = my_pkg:make_duplicate", "onnxruntime (entry point 'onnxruntime = my_pkg:make_duplicate' "
     "of distribution my-pkg 1.0)", "RegistryError: target 'onnxruntime' is already registered"),
    ("broken = my_pkg.missing:make_target", "broken", "ModuleNotFoundError: No module named 'my_pkg.missing'"),
    ("wrong = my_pkg:PACKAGE_NAME", "wrong", "RegistryError: it gave str, expected fxdeploy.targets.Target"),
    ("clash = my_pkg:make_clash", "clash", "RegistryError: target 'clash': settings section 'onnx' is already "
     "declared by target 'onnxruntime' as OnnxSettings"),
]
"""(entry point, its row in ``fxdeploy.targets()``, the error the row gives): all four in one
distribution, each its own row, one process (a fresh interpreter each would cost ~20 s)."""


def test_a_broken_plugin_is_a_row_and_every_other_target_works(tmp_path: Path) -> None:
    site = make_site(tmp_path, "\n".join(entry_point for entry_point, _, _ in BROKEN))
    out = run_python(BUILTIN_STILL_WORKS, env={"PYTHONPATH": f"{site}:{ROOT}"}).splitlines()
    first, second = json.loads(out[0]), json.loads(out[1])
    assert first == second
    code, env_out = out[3].split(" ", 1)
    assert code == "0"
    for _, row, error in BROKEN:
        available, reason, source = first[row]
        assert not available and error in reason, row
        assert f"of distribution my-pkg 1.0 failed: {error}" in reason and source.startswith("entry point '")
        assert error in json.loads(env_out)
    assert first["onnxruntime"][0] is True and first["onnxruntime"][2] == "fxdeploy"
    assert float(out[2]) <= 1e-4


def test_a_loaded_artifact_whose_plugin_is_gone_names_its_distribution(tmp_path: Path) -> None:
    site = make_site(tmp_path, "mytarget = my_pkg:make_target")
    run_python(USE.format(out=str(tmp_path / "art")), env={"PYTHONPATH": f"{site}:{ROOT}"})
    code = (
        "import fxdeploy\n"
        "try:\n    fxdeploy.load({art!r})\nexcept fxdeploy.errors.RegistryError as exc:\n    print(exc)\n"
    ).format(art=str(tmp_path / "art"))
    out = run_python(code)
    assert "target 'mytarget' is not registered here" in out
    assert "entry point 'mytarget = my_pkg:make_target' of distribution my-pkg 1.0" in out
    assert "pip install my-pkg" in out


def test_registering_a_duplicate_name_in_process_is_a_registry_error() -> None:
    builtin = get_target("onnxruntime")
    with pytest.raises(RegistryError, match="target 'onnxruntime' is already registered"):
        register_target(builtin)
    assert get_target("onnxruntime") is builtin


KEY = """
from fxdeploy.cache.key import cache_key
for target in ("mytarget", "onnxruntime"):
    print(cache_key(target=target, settings={}, parts={}))
"""


def test_the_cache_key_covers_a_plugins_distribution_and_source(tmp_path: Path) -> None:
    """An edited plugin must not be served the artifacts its old code built."""
    site = make_site(tmp_path, "mytarget = my_pkg:make_target")
    env = {"PYTHONPATH": f"{site}:{ROOT}"}
    plugin_before, builtin_before = run_python(KEY, env=env).split()
    assert run_python(KEY, env=env).split() == [plugin_before, builtin_before]  # stable
    source = site / "my_pkg" / "__init__.py"
    source.write_text(source.read_text().replace('"1.0"', '"1.1"'))
    plugin_after, builtin_after = run_python(KEY, env=env).split()
    assert plugin_after != plugin_before and builtin_after == builtin_before
