"""fxdeploy.load reads data only: a pickle planted in an artifact is never run.

The attacker here rewrites a model file with a pickle whose unpickling creates a marker file,
and updates the manifest's hash so the integrity check passes. Loading happens in a fresh
process, so a runtime parser crashing on the bytes fails this test instead of pytest.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

import fxdeploy
from tests.helpers import ROOT
from tests.reliability.artifact_edits import (
    copy_artifact,
    pickle_payload,
    read_manifest,
    replace_file,
    torchscript_payload,
)
from tests.reliability.conftest import AVAILABLE, TARGETS, require

LOAD_ALL = """
import json, sys, fxdeploy
results = {}
for key, path in json.loads(sys.argv[1]).items():
    try:
        fxdeploy.load(path)
        results[key] = ["loaded", ""]
    except Exception as exc:
        results[key] = [type(exc).__module__ + "." + type(exc).__qualname__, str(exc)[:300]]
print(json.dumps(results))
"""
@pytest.fixture(scope="module")
def planted(convnet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, bool]]:
    """'target/file' -> (exception type or 'loaded', message, marker created?) for every file."""
    root = tmp_path_factory.mktemp("planted")
    paths, markers = {}, {}
    for target in AVAILABLE:
        saved = convnet(target).saved
        for name in read_manifest(saved)["files"]:
            key = f"{target}/{name}"
            marker = root / f"ran-{target}-{name}"
            art = copy_artifact(saved, root / f"{target}-{name}")
            original = (art / name).read_bytes()
            data = torchscript_payload(original, marker) if name.endswith(".pt") else pickle_payload(marker)
            replace_file(art, name, data)
            paths[key], markers[key] = str(art), marker
    results = _load_in_fresh_process(paths)
    return {key: (kind, message, markers[key].exists()) for key, (kind, message) in results.items()}


def _load_in_fresh_process(paths: dict[str, str]) -> dict[str, list[str]]:
    """Runtimes log binary garbage from the bytes they reject, so stderr is decoded leniently."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ALL, json.dumps(paths)], capture_output=True, env=env, cwd=ROOT, timeout=300
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"the loading process died ({done.returncode}):\n{stderr[-3000:]}"
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("target", TARGETS)
def test_planted_pickle_never_runs_and_load_fails(planted, target: str) -> None:
    require(target)
    rows = {key: row for key, row in planted.items() if key.startswith(f"{target}/")}
    assert rows, f"no file of the {target} artifact was tried"
    for key, (kind, _, ran) in rows.items():
        assert not ran, f"{key}: the planted pickle ran"
        assert kind != "loaded", f"{key}: a pickle in place of the model loaded without error"


@pytest.mark.parametrize("target", TARGETS)
def test_planted_pickle_is_refused_as_an_artifact_error(planted, target: str, request) -> None:
    require(target)
    for key, (kind, message, _) in planted.items():
        if key.startswith(f"{target}/"):
            assert kind == "fxdeploy.errors.ArtifactError", f"{key}: {kind}: {message}"
            assert key.split("/", 1)[1] in message, f"{key}: the message does not name the file: {message}"


@pytest.mark.parametrize("target", TARGETS)
def test_load_and_call_never_unpickle(convnet, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python-side deserializer that can run code is replaced by a tripwire during load."""
    saved = convnet(target).saved
    tripped: list[str] = []

    def tripwire(name: str):
        def trip(*args: object, **kwargs: object) -> None:
            tripped.append(name)
            raise AssertionError(f"{name} called while loading a {target} artifact")

        return trip

    for owner, attribute in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load"), (np, "load")]:
        monkeypatch.setattr(owner, attribute, tripwire(f"{owner.__name__}.{attribute}"))
    deployed = fxdeploy.load(saved)
    out = deployed(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 10)
    assert tripped == []
