"""Property: any mutation of a valid manifest.json loads or raises an FxDeployError; nothing else.

Mutations: a key deleted, a value replaced by random JSON (wrong types, unicode, huge and
non-finite numbers, nested garbage), a key added, or the raw text cut or spliced. The hashed
model file is left alone, so the manifest parser, not the hash check, is what is exercised.

Out of the fuzz, on purpose (each has its own strict-xfail test in test_load_gaps.py): values
under "settings" (a huge thread count reaches the runtime's thread pool before any fxdeploy
check) and "target" renamed to another registered target (its loader reads keys this
artifact does not have).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import fxdeploy
from tests.reliability.conftest import require

EXAMPLES = 200
SKIPPED_PATHS = (("settings",), ("target",))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from([10**300, -(2**63), 2**64])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
    | st.sampled_from(["", "../../etc/passwd", "float32", "batch", "model.onnx", "\x00", "é\u202e🚀"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the manifest a mutation can hit."""
    found: list[tuple[Any, ...]] = [prefix] if prefix else []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        found += _paths(child, (*prefix, key))
    return [p for p in found if p[:1] not in SKIPPED_PATHS]


def _mutate(manifest: dict[str, Any], draw: st.DrawFn) -> bytes:
    paths = _paths(manifest)
    path = draw(st.sampled_from(paths))
    parent: Any = manifest
    for key in path[:-1]:
        parent = parent[key]
    kind = draw(st.sampled_from(["delete", "replace", "replace", "add_key", "raw"]))
    event(f"{kind} {path[0]}")
    if kind == "delete":
        del parent[path[-1]]
    elif kind == "replace":
        parent[path[-1]] = draw(json_values)
    elif kind == "add_key" and isinstance(parent, dict):
        parent[draw(st.text(max_size=8))] = draw(json_values)
    text = json.dumps(manifest).encode()
    if kind == "raw":
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.binary(max_size=16)) + text[cut + draw(st.integers(0, 8)) :]
    return text


@pytest.fixture(scope="module")
def artifact(convnet, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A private copy of the saved convnet, and its valid manifest text."""
    require("onnxruntime")
    root = tmp_path_factory.mktemp("fuzz") / "art"
    shutil.copytree(convnet("onnxruntime").saved, root)
    return root, (root / "manifest.json").read_text()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_manifest_loads_or_raises_fxdeploy_error(artifact: tuple[Path, str], data: st.DataObject) -> None:
    root, valid = artifact
    (root / "manifest.json").write_bytes(_mutate(json.loads(valid), data.draw))
    try:
        deployed = fxdeploy.load(root)
    except fxdeploy.FxDeployError as exc:
        assert str(exc), f"{type(exc).__name__} without a message"
        event(type(exc).__name__)
    else:
        assert isinstance(deployed, fxdeploy.Deployed) and deployed.target == "onnxruntime"
        event("loaded")
