"""Helpers that damage a copy of a saved artifact: edit its manifest, swap its files, re-hash."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def copy_artifact(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def read_manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / "manifest.json").read_text())


def write_manifest(root: Path, manifest: Any) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest))


def edit_manifest(root: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    manifest = read_manifest(root)
    edit(manifest)
    write_manifest(root, manifest)


def replace_file(root: Path, name: str, data: bytes) -> None:
    """Swap a file's bytes and update its hash, as an attacker who can write the manifest would."""
    (root / name).write_bytes(data)
    edit_manifest(root, lambda m: m["files"].update({name: hashlib.sha256(data).hexdigest()}))


class MarkerPayload:
    """Unpickling this creates ``path``: proof that something ran a pickle from the artifact."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def pickle_payload(marker: Path) -> bytes:
    return pickle.dumps(MarkerPayload(marker), protocol=2)


def torchscript_payload(original: bytes, marker: Path) -> bytes:
    """The real TorchScript archive with its pickles (data.pkl, constants.pkl) replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(out, "w") as crafted:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith((".pkl",)):
                data = pickle_payload(marker)
            crafted.writestr(info, data)
    return out.getvalue()
