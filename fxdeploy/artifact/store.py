"""Artifacts: a directory of data files plus manifest.json. Saved atomically, loaded as data only."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import reprlib
import secrets
import shutil
from pathlib import Path
from typing import Any

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.errors import ArtifactError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 * 2**20
REQUIRED = {
    "schema_version": int,
    "fxdeploy_version": str,
    "target": str,
    "runtime_version": (str, type(None)),
    "inputs": list,
    "outputs": list,
    "output_leaves": list,
    "output_tree": dict,
    "input_tree": dict,
    "dims": dict,
    "settings": dict,
    "files": dict,
    "info": dict,
}
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
"""The input dtypes a Deployed accepts; a manifest naming another one is refused on load."""
LEAF_KINDS = ("tensor", "hidden", "constant", "scalar")
SCALAR_TYPES = ("int", "float", "bool")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(manifest: dict[str, Any], source_dir: Path, dest: str | os.PathLike[str]) -> Path:
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
        _write_synced(staging / MANIFEST, json.dumps(written, indent=2, sort_keys=True).encode())
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


def read_manifest(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """Parse and validate manifest.json, and check every file's hash. Never unpickles."""
    root = Path(directory).absolute()
    path = root / MANIFEST
    if not root.is_dir():
        raise ArtifactError(f"no artifact at {root}: not a directory")
    if not path.is_file():
        raise ArtifactError(f"no artifact at {root}: {MANIFEST} is missing")
    if path.resolve().parent != root.resolve():
        raise ArtifactError(f"{path}: {MANIFEST} is a link to a file outside the artifact directory")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, huge int literals, deep nesting
        raise ArtifactError(f"{path}: manifest is not valid JSON ({str(exc)[:200]})") from exc
    validate(manifest, path)
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


def validate(manifest: Any, where: Path) -> None:
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{where}: manifest must be a JSON object, got {type(manifest).__name__}")
    version = manifest.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise ArtifactError(
            f"{where}: schema_version {version} is newer than this fxdeploy reads "
            f"({SCHEMA_VERSION}); upgrade fxdeploy"
        )
    for key, kind in REQUIRED.items():
        if key not in manifest:
            raise ArtifactError(f"{where}: manifest has no {key!r}")
        value = manifest[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise ArtifactError(f"{where}: manifest {key!r} has the wrong type {type(value).__name__}")
    if version != SCHEMA_VERSION:
        raise ArtifactError(f"{where}: schema_version {version} is not supported ({SCHEMA_VERSION})")
    for name, digest in manifest["files"].items():
        if not isinstance(name, str) or not isinstance(digest, str) or len(digest) != 64:
            raise ArtifactError(f"{where}: files entry {name!r} must map a name to a sha256 hex digest")
    for spec in manifest["inputs"] + manifest["outputs"]:
        _validate_tensor_spec(spec, where)
    for kind in ("inputs", "outputs"):
        names = [spec["name"] for spec in manifest[kind]]
        if len(set(names)) != len(names):
            raise ArtifactError(f"{where}: {kind} names are not unique: {reprlib.repr(names)}")
    for spec in manifest["inputs"]:
        if spec["dtype"] not in DTYPE_NAMES:
            raise ArtifactError(f"{where}: input {spec['name']!r} has unknown dtype {reprlib.repr(spec['dtype'])}")
        for entry in spec["shape"]:
            if isinstance(entry, str):
                try:
                    dims_mod.parse(entry)
                except ValueError as exc:
                    raise ArtifactError(f"{where}: input {spec['name']!r}: {exc}") from exc
    _validate_dims(manifest["dims"], where)
    _validate_guards(manifest, where)
    _validate_leaves(manifest, where)


def _validate_guards(manifest: dict[str, Any], where: Path) -> None:
    """Guards are size arithmetic over the inputs' shapes; anything else is refused, unevaluated."""
    from fxdeploy.capture import guards

    listed = manifest.get("guards", [])
    if not isinstance(listed, list) or not all(isinstance(g, str) for g in listed):
        raise ArtifactError(f"{where}: manifest 'guards' must be a list of strings")
    ranks = {spec["name"]: len(spec["shape"]) for spec in manifest["inputs"]}
    for guard in listed:
        try:
            read = guards.sizes_read(guard)
        except ValueError as exc:
            raise ArtifactError(f"{where}: {exc}") from None
        unknown = [f"{name}.shape[{axis}]" for name, axis in read if axis >= ranks.get(name, 0)]
        if unknown:
            raise ArtifactError(f"{where}: guard {guard!r} reads {', '.join(unknown)}, which no input has")


def _validate_tensor_spec(spec: Any, where: Path) -> None:
    ok = (
        isinstance(spec, dict)
        and isinstance(spec.get("name"), str)
        and isinstance(spec.get("dtype"), str)
        and isinstance(spec.get("shape"), list)
        and all(isinstance(d, (int, str)) and not isinstance(d, bool) for d in spec["shape"])
    )
    if not ok:
        raise ArtifactError(f"{where}: malformed tensor spec {reprlib.repr(spec)}; need name, dtype and shape")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_dims(dims: dict[str, Any], where: Path) -> None:
    for name, bounds in dims.items():
        ok = isinstance(bounds, dict) and _is_int(bounds.get("min")) and _is_int(bounds.get("max"))
        if not ok or bounds["min"] > bounds["max"] or ("opt" in bounds and not _is_int(bounds["opt"])):
            raise ArtifactError(
                f"{where}: dims {name!r} must be {{min, opt, max}} integers, got {reprlib.repr(bounds)}"
            )


def _validate_leaves(manifest: dict[str, Any], where: Path) -> None:
    """Deployed rebuilds outputs from these on every call; check them once here instead."""
    outputs = [spec["name"] for spec in manifest["outputs"]]
    leaves = manifest["output_leaves"]
    for leaf in leaves:
        ok = isinstance(leaf, dict) and leaf.get("kind") in LEAF_KINDS and isinstance(leaf.get("name"), str)
        if ok and leaf["kind"] == "scalar":
            ok = leaf.get("type") in SCALAR_TYPES
        if ok and leaf["kind"] == "constant":
            ok = "value" in leaf
        if ok and "trim" in leaf:
            trim = leaf["trim"]
            ok = isinstance(trim, dict) and _is_int(trim.get("dim")) and trim.get("count") in outputs
        if not ok:
            raise ArtifactError(f"{where}: malformed output leaf {reprlib.repr(leaf)}")
    engine = [leaf["name"] for leaf in leaves if leaf["kind"] != "constant"]
    if engine != outputs:
        raise ArtifactError(
            f"{where}: output_leaves name engine outputs {reprlib.repr(engine)}, but outputs are "
            f"{reprlib.repr(outputs)}"
        )
    visible = sum(leaf["kind"] != "hidden" for leaf in leaves)
    if _tree_leaves(manifest["output_tree"], where) != visible:
        raise ArtifactError(f"{where}: output_tree does not hold the {visible} visible output leaves")


def _tree_leaves(tree: Any, where: Path) -> int:
    """Count a structure description's leaves without recursion (a file may nest deeply)."""
    count, stack = 0, [tree]
    while stack:
        node = stack.pop()
        kind = node.get("kind") if isinstance(node, dict) else None
        if kind == "leaf":
            count += 1
            continue
        container = kind in ("tuple", "list", "dict")
        children, keys = (node.get("children"), node.get("keys", [])) if container else (None, None)
        keys_ok = isinstance(keys, list) and all(isinstance(k, str) for k in keys)
        if not isinstance(children, list) or not keys_ok or (kind == "dict" and len(keys) != len(children)):
            raise ArtifactError(f"{where}: malformed output_tree node {reprlib.repr(node)}")
        stack.extend(children)
    return count


def _confined(root: Path, name: str, where: Path) -> Path:
    """A manifest may only name files directly inside its own directory."""
    if os.sep in name or "\x00" in name or name in ("", ".", ".."):
        raise ArtifactError(f"{where}: file name {name!r} points outside the artifact directory")
    candidate = (root / name).resolve()
    if candidate.parent != root.resolve():
        raise ArtifactError(f"{where}: file name {name!r} points outside the artifact directory")
    return candidate
