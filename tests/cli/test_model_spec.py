"""CLI model specs: ``file.py:factory`` imports the files beside it, as ``python file.py`` would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fxdeploy.cli.model_spec import load_factory
from tests.helpers import ROOT, run_python

POSE = """
import torch

class Pose(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""

DEPLOY = """
import torch
from pose import Pose  # the model's own file, beside this one

def factory():
    return Pose(), (torch.ones(2, 3),)
"""


def _files(folder: Path, deploy: str = DEPLOY) -> Path:
    folder.mkdir()
    (folder / "pose.py").write_text(POSE)
    (folder / "pose_deploy.py").write_text(deploy)
    return folder / "pose_deploy.py"


def test_a_model_file_imports_the_files_beside_it(tmp_path: Path) -> None:
    path = _files(tmp_path / "models")
    code = f"from fxdeploy.cli.model_spec import load_factory\nm, (x,) = load_factory({str(path) + ':factory'!r})\n"
    code += "print(type(m).__name__, m(x).sum().item())"
    assert run_python(code).split() == ["Pose", "12.0"]


def test_a_model_file_that_fails_is_imported_again_once_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # this process's path and modules as they were, after
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    path = _files(tmp_path / "broken", deploy=DEPLOY.replace("from pose import Pose", "from pose import Nope"))
    with pytest.raises(ImportError, match="Nope"):
        load_factory(f"{path}:factory")
    path.write_text(DEPLOY)
    model, (x,) = load_factory(f"{path}:factory")
    assert float(model(x).sum()) == 12.0


def test_a_model_file_inside_a_package_fails_with_the_cause_and_what_to_do(tmp_path: Path) -> None:
    """``examples/zoo.py`` imports ``examples.zoo_deformable``: run as a file, its package's root is
    not on sys.path. The CLI says so in one line (no traceback) and exits 2; a factory that raises
    is named with its error."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("from mypkg.parts import Pose\n")
    failing = DEPLOY.replace("return Pose(), (torch.ones(2, 3),)", "raise RuntimeError('no weights')")
    raises = _files(tmp_path / "raises", deploy=failing)
    for spec, words in (
        (f"{package / 'model.py'}:factory", ("ModuleNotFoundError: No module named 'mypkg'", "python -m fxdeploy")),
        (f"{raises}:factory", ("the factory raised RuntimeError: no weights",)),
    ):
        ran = subprocess.run([sys.executable, "-m", "fxdeploy.cli", "lower", spec, "--out", str(tmp_path / "art")],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert ran.returncode == 2, ran.stderr
        assert ran.stderr.startswith("fxdeploy lower: error: model spec") and "Traceback" not in ran.stderr, ran.stderr
        assert all(word in ran.stderr for word in words), ran.stderr
