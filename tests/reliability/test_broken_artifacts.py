"""Broken artifacts are refused on load with an ArtifactError that names what is wrong.

tests/artifact/test_store.py covers the ONNX Runtime artifact; here every file of every target's
artifact is damaged in turn, and the manifest gets the malformed values the loader used to
crash on (KeyError, TypeError, ValueError at load or at the first call).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fxdeploy
from fxdeploy import artifact
from tests.reliability.artifact_edits import copy_artifact, edit_manifest, read_manifest
from tests.reliability.conftest import TARGETS

HASH = "sha256 does not match the manifest (file changed or truncated); re-export the artifact"


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _link_outside(path: Path) -> None:
    """Same bytes, so the hash matches: only the path check can refuse it."""
    outside = path.parent.parent / f"outside-{path.name}"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


DAMAGE: dict[str, tuple[Callable[[Path], None], Callable[[Path, str], str]]] = {
    "missing": (
        Path.unlink, lambda root, name: f"{root}/manifest.json: file {name!r} listed in the manifest is missing"
    ),
    "truncated": (_truncate, lambda root, name: f"{root}/{name}: {HASH}"),
    "flipped_byte": (_flip, lambda root, name: f"{root}/{name}: {HASH}"),
    "symlink_outside": (
        _link_outside,
        lambda root, name: f"{root}/manifest.json: file name {name!r} points outside the artifact directory",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("target", TARGETS)
def test_every_damaged_file_is_refused_by_name(convnet, tmp_path: Path, target: str, damage: str) -> None:
    saved = convnet(target).saved
    names = sorted(read_manifest(saved)["files"])
    assert names, f"{target} artifact lists no files"
    apply, message = DAMAGE[damage]
    for name in names:
        root = copy_artifact(saved, tmp_path / f"{damage}-{name}")
        apply(root / name)
        with pytest.raises(fxdeploy.ArtifactError) as info:
            fxdeploy.load(root)
        assert str(info.value) == message(root, name)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(manifest: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = manifest
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return edit


MANIFEST_CASES = {
    "schema_version_str": (_set("schema_version", "1"), "manifest 'schema_version' has the wrong type str"),
    "schema_version_bool": (_set("schema_version", True), "manifest 'schema_version' has the wrong type bool"),
    "schema_version_nan": (_set("schema_version", float("nan")), "manifest 'schema_version' has the wrong type float"),
    "files_list": (_set("files", ["model.onnx"]), "manifest 'files' has the wrong type list"),
    "inputs_dict": (_set("inputs", {"x": 1}), "manifest 'inputs' has the wrong type dict"),
    "runtime_version_int": (_set("runtime_version", 3), "manifest 'runtime_version' has the wrong type int"),
    "short_digest": (
        lambda m: m["files"].update({"model.onnx": "abc"}),
        "files entry 'model.onnx' must map a name to a sha256 hex digest",
    ),
    "bool_dim": (
        _set("inputs/0/shape", [True, 3]), re.escape("malformed tensor spec {'dtype': 'float32', 'name': 'x'")
    ),
    "unknown_dtype": (_set("inputs/0/dtype", "float99"), "input 'x' has unknown dtype 'float99'"),
    "duplicate_input": (
        lambda m: m["inputs"].append(m["inputs"][0]), re.escape("inputs names are not unique: ['x', 'x']")
    ),
    "dims_str": (_set("dims/batch", "x"), "dims 'batch' must be {min, opt, max} integers, got 'x'"),
    "dims_inverted": (_set("dims/batch", {"min": 4, "opt": 2, "max": 1}), "dims 'batch' must be {min, opt, max}"),
    "leaf_kind": (_set("output_leaves/0/kind", "weird"), "malformed output leaf {'kind': 'weird', 'name': 'output'}"),
    "output_renamed": (
        _set("outputs/0/name", "renamed"),
        re.escape("output_leaves name engine outputs ['output'], but outputs are ['renamed']"),
    ),
    "tree_empty": (_set("output_tree", {"kind": "tuple", "children": []}), "output_tree does not hold the 1 visible"),
    "tree_garbage": (_set("output_tree", {"kind": "dict", "children": [1]}), "malformed output_tree node"),
    "absolute_path": (lambda m: m["files"].update({"/etc/passwd": "0" * 64}), "file name '/etc/passwd' points outside"),
    "nested_path": (lambda m: m["files"].update({"sub/x": "0" * 64}), "file name 'sub/x' points outside"),
    "dot_dot": (lambda m: m["files"].update({"..": "0" * 64}), "file name '..' points outside"),
    "nul_byte": (lambda m: m["files"].update({"a\x00b": "0" * 64}), re.escape("file name 'a\\x00b' points outside")),
    "unknown_setting": (_set("settings/colour", "red"), r"settings: (settings: )?unknown setting\(s\) \['colour'\]"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_malformed_manifest_is_refused_naming_the_field(convnet, tmp_path: Path, case: str) -> None:
    edit, message = MANIFEST_CASES[case]
    root = copy_artifact(convnet("onnxruntime").saved, tmp_path / "art")
    edit_manifest(root, edit)
    with pytest.raises(fxdeploy.ArtifactError, match=f"^{re.escape(str(root / 'manifest.json'))}: {message}"):
        fxdeploy.load(root)


RAW_CASES = {
    "json_array": (b"[1, 2]", "manifest must be a JSON object, got list"),
    "deep_nesting": (b"[" * 100_000 + b"]" * 100_000, "manifest is not valid JSON"),
    "huge_int_literal": (b'{"schema_version": ' + b"9" * 5000 + b"}", "manifest is not valid JSON"),
    "not_utf8": (b'{"target": "\xff"}', "manifest is not valid JSON"),
    "empty": (b"", "manifest is not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_unparsable_manifest_is_refused(convnet, tmp_path: Path, case: str) -> None:
    data, message = RAW_CASES[case]
    root = copy_artifact(convnet("onnxruntime").saved, tmp_path / "art")
    (root / "manifest.json").write_bytes(data)
    with pytest.raises(fxdeploy.ArtifactError, match=f"^{re.escape(str(root / 'manifest.json'))}: {message}"):
        fxdeploy.load(root)


def test_missing_directory_manifest_and_oversized_manifest_are_refused(convnet, tmp_path: Path) -> None:
    with pytest.raises(fxdeploy.ArtifactError, match=f"^no artifact at {re.escape(str(tmp_path / 'none'))}: not a dir"):
        fxdeploy.load(tmp_path / "none")
    root = copy_artifact(convnet("onnxruntime").saved, tmp_path / "art")
    with (root / "manifest.json").open("r+b") as handle:  # sparse: large on paper, instant to write
        handle.truncate(artifact.MAX_MANIFEST_BYTES + 1)
    with pytest.raises(fxdeploy.ArtifactError, match="manifest is larger than 16777216 bytes"):
        fxdeploy.load(root)
    (root / "manifest.json").unlink()
    missing = f"^no artifact at {re.escape(str(root))}: manifest.json is missing"
    with pytest.raises(fxdeploy.ArtifactError, match=missing):
        fxdeploy.load(root)


def test_manifest_linked_from_outside_is_refused(convnet, tmp_path: Path) -> None:
    """A valid manifest elsewhere must not vouch for this directory's files."""
    saved = convnet("onnxruntime").saved
    root = copy_artifact(saved, tmp_path / "art")
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to(saved / "manifest.json")
    with pytest.raises(fxdeploy.ArtifactError, match="manifest.json is a link to a file outside the artifact"):
        fxdeploy.load(root)


def test_saved_artifact_gets_the_umask_mode_not_a_private_one(convnet, tmp_path: Path) -> None:
    """A service user other than the one who saved must be able to read it, as with mkdir."""
    (tmp_path / "plain").mkdir()
    saved = convnet("onnxruntime").deployed.save(tmp_path / "art")
    assert oct(saved.stat().st_mode & 0o777) == oct((tmp_path / "plain").stat().st_mode & 0o777)
    assert os.access(saved / "manifest.json", os.R_OK)
