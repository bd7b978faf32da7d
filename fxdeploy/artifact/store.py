"""An artifact on disk: a directory of data files plus manifest.json, saved atomically and read
back as data only, every file's hash checked. The manifest's schema is ``artifact.manifest``."""

from __future__ import annotations

import ctypes
import hashlib
import os
import secrets
import shutil
from pathlib import Path

from fxdeploy.artifact import manifest as schema
from fxdeploy.artifact.manifest import MANIFEST, Manifest
from fxdeploy.errors import ArtifactError


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(manifest: Manifest, source_dir: Path, dest: str | os.PathLike[str]) -> Path:
    """Copy the artifact's files and manifest to ``dest`` so that ``dest`` is never half-written.

    Everything is written into a sibling temporary directory first; then the directories are
    swapped atomically (renameat2 RENAME_EXCHANGE), or renamed into place if ``dest`` is new.
    """
    dest = Path(dest).absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = _make_staging(dest)
    try:
        files: dict[str, str] = {}
        for name in manifest["files"]:
            target = staging / name
            shutil.copyfile(source_dir / name, target)
            files[name] = sha256(target)
        written = dict(manifest, files=files)
        _write_synced(staging / MANIFEST, schema.dumps(written))
        for name in files:
            _fsync(staging / name)
        _fsync(staging)
        _swap_into_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def _make_staging(dest: Path) -> Path:
    """A fresh sibling directory. mkdir (not mkdtemp's 0700) so the artifact gets the umask's mode."""
    while True:
        staging = dest.with_name(f".{dest.name}.partial-{secrets.token_hex(6)}")
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        return staging


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_into_place(staging: Path, dest: Path) -> None:
    if not dest.exists():
        os.rename(staging, dest)
        _fsync(dest.parent)
        return
    if not (dest / MANIFEST).is_file() and any(dest.iterdir()):
        raise ArtifactError(f"refusing to replace {dest}: it exists and is not an fxdeploy artifact")
    if exchange(staging, dest):
        shutil.rmtree(staging)  # staging now holds the previous artifact
    else:  # no renameat2 here: move the old one aside, then put the new one in place
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.rename(dest, old)
        os.rename(staging, dest)
        shutil.rmtree(old)
    _fsync(dest.parent)


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2). False where the call is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return result == 0


def read_manifest(directory: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """Parse and validate manifest.json, and check every file's hash. Never unpickles."""
    root = Path(directory).absolute()
    path = root / MANIFEST
    if not root.is_dir():
        raise ArtifactError(f"no artifact at {root}: not a directory")
    if not path.is_file():
        raise ArtifactError(f"no artifact at {root}: {MANIFEST} is missing")
    if path.resolve().parent != root.resolve():
        raise ArtifactError(f"{path}: {MANIFEST} is a link to a file outside the artifact directory")
    manifest = schema.read(path)
    for name, expected in manifest["files"].items():
        file = _confined(root, name, path)
        if not file.is_file():
            raise ArtifactError(f"{path}: file {name!r} listed in the manifest is missing")
        if sha256(file) != expected:
            raise ArtifactError(
                f"{file}: sha256 does not match the manifest (file changed or truncated); "
                "re-export the artifact"
            )
    return root, manifest


def _confined(root: Path, name: str, where: Path) -> Path:
    """A manifest may only name files directly inside its own directory."""
    if os.sep in name or "\x00" in name or name in ("", ".", ".."):
        raise ArtifactError(f"{where}: file name {name!r} points outside the artifact directory")
    candidate = (root / name).resolve()
    if candidate.parent != root.resolve():
        raise ArtifactError(f"{where}: file name {name!r} points outside the artifact directory")
    return candidate
