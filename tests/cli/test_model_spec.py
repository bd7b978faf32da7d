"""CLI model specs: ``file.py:factory`` imports the files beside it, as ``python file.py`` would."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fxdeploy.cli.model_spec import load_factory
from tests.helpers import run_python

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
