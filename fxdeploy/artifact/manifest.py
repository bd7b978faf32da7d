"""The manifest: its schema, typed, in one place, with the one schema version. ``read`` parses and
validates a manifest.json as data (never code, never a pickle); ``dumps`` writes one. Saving the
artifact around it is ``artifact.store``; building one from a capture is ``fxdeploy.api``.
"""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import Any, Literal, TypedDict

from typing_extensions import NotRequired

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.artifact import guards
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


class TensorSpec(TypedDict):
    name: str
    dtype: str
    shape: list[int | str]
    """Each dim an int, or a named dim (``batch``) or one derived from it (``32*h``)."""


class DimBounds(TypedDict):
    min: int
    max: int
    opt: NotRequired[int]


class Trim(TypedDict):
    dim: int
    count: str
    """The hidden output holding the number of valid rows."""


class OutputLeaf(TypedDict):
    kind: Literal["tensor", "hidden", "constant", "scalar"]
    name: str
    value: NotRequired[Any]
    """A constant's value."""
    type: NotRequired[Literal["int", "float", "bool"]]
    """A scalar's Python type."""
    trim: NotRequired[Trim]
    detections: NotRequired[bool]
    """Rows compared as a set by lower()'s check (fxdeploy.passes.output_rows says which)."""
    rows: NotRequired[Literal["nms", "selected", "ranked", "count"]]
    rows_dim: NotRequired[int]
    nms: NotRequired[int]
    """Which NMS of the graph (0: the last) its rows or its count come from."""
    iou_threshold: NotRequired[float]
    score_thresholds: NotRequired[list[float]]
    rank_key: NotRequired[str]
    """A ranked leaf's keys: the name of the output that holds them."""


class PerImage(TypedDict):
    dim: str
    min: int
    max: int
    opt: int
    join: dict[str, Any]
    engine: NotRequired[str]
    """"batch": the engine takes the whole batch (the graph vectorized); "image": one image a call."""
    why: NotRequired[str]
    """why the engine takes one image a call"""


class Manifest(TypedDict):
    schema_version: int
    fxdeploy_version: str
    target: str
    runtime_version: str | None
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    output_leaves: list[OutputLeaf]
    output_tree: dict[str, Any]
    """The model's output structure over the visible leaves (``artifact.structure.describe``)."""
    input_tree: dict[str, Any]
    dims: dict[str, DimBounds]
    settings: dict[str, Any]
    """fxdeploy's settings and the target's own sections, as ``Settings.to_dict`` gives them."""
    files: dict[str, str]
    """File name -> sha256 hex digest."""
    info: dict[str, Any]
    """What the target and lower() report (plan, precision, shape checks, ...); free-form."""
    guards: NotRequired[list[str]]
    per_image: NotRequired[PerImage]


def read(path: Path) -> Manifest:
    """Parse and validate ``path`` (a manifest.json) as JSON data."""
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, huge int literals, deep nesting
        raise ArtifactError(f"{path}: manifest is not valid JSON ({str(exc)[:200]})") from exc
    validate(manifest, path)
    return manifest


def dumps(manifest: Manifest) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True).encode()


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
