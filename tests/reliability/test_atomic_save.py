"""Atomic save under SIGKILL: the artifact at the destination is always one whole, loadable save.

A child process saves two 16 MiB artifacts (A and B) in turn over the same path, forever; the
parent SIGKILLs it at a random moment, then checks the destination. The child imports only
``fxdeploy/artifact/store.py`` (a bare package stub skips ``fxdeploy/__init__``'s torch import), so
each kill costs milliseconds rather than an interpreter start with torch.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy import artifact
from fxdeploy.artifact import store
from tests.helpers import ROOT
from tests.reliability.artifact_edits import read_manifest
from tests.reliability.conftest import require

KILLS = 12
CHILD = """
import json, sys, types
package = types.ModuleType("fxdeploy")
package.__path__ = [sys.argv[1] + "/fxdeploy"]
sys.modules["fxdeploy"] = package
from pathlib import Path
from fxdeploy import artifact
sources = [Path(p) for p in sys.argv[3:]]
manifests = [json.loads((s / "manifest.json").read_text()) for s in sources]
print("ready", flush=True)
for i in range(10**9):
    artifact.save(manifests[i % 2], sources[i % 2], sys.argv[2])
    print("saved", i, flush=True)
"""


class Wide(torch.nn.Module):
    """2048 x 2048 float32 weights: a 16 MiB file, so copying, hashing and fsync take a while."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = torch.nn.Linear(2048, 2048)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, torch.Tensor]]:
    """Artifacts A and B, each with the output it must give on a fixed input."""
    require("onnxruntime")
    root, x = tmp_path_factory.mktemp("sources"), torch.ones(1, 2048)
    made = []
    for seed in (1, 2):
        deployed = fxdeploy.lower(Wide(seed), (x,))
        made.append((deployed.save(root / f"art{seed}"), deployed(x)))
    return made


def _exchange_works(tmp_path: Path) -> bool:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return store.exchange(tmp_path / "a", tmp_path / "b")


def _kill_mid_save(dest: Path, sources: list[Path], delay: float) -> int:
    """Start the saver, let it run ``delay`` seconds, SIGKILL it; returns how many saves finished."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ROOT), str(dest), *map(str, sources)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    try:
        child.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.kill(child.pid, signal.SIGKILL)
    output = child.communicate()[0]
    assert child.returncode == -signal.SIGKILL, f"the saver exited by itself ({child.returncode})"
    return output.count("saved")


def _assert_whole(dest: Path, sources: list[tuple[Path, torch.Tensor]]) -> None:
    assert sorted(p.name for p in dest.iterdir()) == sorted(["manifest.json", *read_manifest(dest)["files"]])
    assert "model.onnx" in read_manifest(dest)["files"]
    matches = [out for src, out in sources if read_manifest(dest)["files"] == read_manifest(src)["files"]]
    assert len(matches) == 1, "the destination's manifest is neither A's nor B's"
    assert torch.equal(fxdeploy.load(dest)(torch.ones(1, 2048)), matches[0])


def test_sigkill_during_save_leaves_the_previous_artifact_whole(sources, tmp_path: Path) -> None:
    if not _exchange_works(tmp_path):
        pytest.skip("renameat2(RENAME_EXCHANGE) is unavailable on this filesystem; save is not atomic here")
    dest = tmp_path / "model"
    artifact.save(read_manifest(sources[0][0]), sources[0][0], dest)
    rng = random.Random(0)
    finished = 0
    for _ in range(KILLS):
        finished += _kill_mid_save(dest, [s for s, _ in sources], rng.uniform(0.0, 0.6))
        _assert_whole(dest, sources)
        strays = [p.name for p in tmp_path.iterdir() if p.name not in ("a", "b", "model")]
        assert all(name.startswith(".model.partial-") for name in strays), strays
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".model.partial-")]
    assert finished >= 1, "no save ever completed: the kills never replaced the artifact"
    assert leftovers, f"none of {KILLS} kills landed mid-save"
    for leftover in leftovers:  # a leftover is never mistaken for an artifact
        try:
            fxdeploy.load(leftover)
        except fxdeploy.ArtifactError:
            continue
        _assert_whole(leftover, sources)  # only a complete previous copy may load
    print(f"\n{KILLS} kills, {finished} saves completed, {len(leftovers)} staging leftovers")
    artifact.save(read_manifest(sources[1][0]), sources[1][0], dest)  # leftovers do not block a save
    _assert_whole(dest, sources)
    assert torch.equal(fxdeploy.load(dest)(torch.ones(1, 2048)), sources[1][1])
