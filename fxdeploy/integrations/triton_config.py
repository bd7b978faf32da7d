"""Triton ``config.pbtxt`` from an fxdeploy manifest: a pure function of the manifest's data.

Triton batches only along a leading dim that every input and output shares. fxdeploy's manifest
names dynamic dims, so "batchable" is decided from names: every tensor must start with the same
named dim, whose range starts at 1 (Triton may form a batch of one). Then ``max_batch_size`` is
that dim's max (capped at ``DEFAULT_MAX_BATCH``, since an unbounded ONNX dim records 2**31-1) and
``dims`` leave it out. Otherwise ``max_batch_size`` is 0 and ``dims`` are full shapes, -1 where a
dim is dynamic. A tensor left with no dims (a per-image count [B], or a scalar) is written as
``dims: [1]`` with ``reshape { shape: [] }``, which is how Triton spells rank 0.

Outputs padded by ``multiclass_nms`` keep their fixed K. Hidden outputs (the NMS counts) are real
engine outputs and are listed; the host-side trimming that ``Deployed`` does is recorded as
parameters and comments, because a Triton client has to do it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.errors import ArtifactError

DEFAULT_MAX_BATCH = 64
"""Cap for max_batch_size when the artifact's batch range is wider (ORT records 2**31-1)."""

DATA_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "int8": "TYPE_INT8", "int16": "TYPE_INT16",
    "int32": "TYPE_INT32", "int64": "TYPE_INT64", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16",
    "float32": "TYPE_FP32", "float64": "TYPE_FP64",
}


@dataclass(frozen=True)
class Layout:
    """How the artifact's tensors map onto Triton's batching."""

    max_batch_size: int
    batch_dim: str | None
    reason: str
    """Why batching is on or off, written into the config as a comment."""


def batch_dim(manifest: Manifest) -> tuple[str | None, str]:
    """The named dim that leads every input and output, or None and the reason why not."""
    tensors = [("input", t) for t in manifest["inputs"]] + [("output", t) for t in manifest["outputs"]]
    first = tensors[0][1]["shape"][:1] if tensors else []
    name = first[0] if first and isinstance(first[0], str) else None
    for kind, spec in tensors:
        lead = spec["shape"][0] if spec["shape"] else None
        if name is None or lead != name:
            return None, f"{kind} {spec['name']!r} (shape {spec['shape']}) does not start with a shared named batch dim"
    bounds = manifest["dims"].get(name)
    if bounds is None:
        return None, f"dim {name!r} has no recorded range in the manifest"
    if bounds["min"] > 1:
        return None, f"dim {name!r} has min {bounds['min']}; Triton may send a batch of 1"
    return name, f"every tensor starts with dim {name!r} (range [{bounds['min']}, {bounds['max']}])"


def layout(manifest: Manifest, max_batch_size: int | None = None) -> Layout:
    """Resolve max_batch_size: the artifact's batch range bounds it, the caller may lower it."""
    name, reason = batch_dim(manifest)
    if max_batch_size is not None and max_batch_size < 0:
        raise ValueError(f"max_batch_size must be >= 0, got {max_batch_size}")
    if name is None:
        if max_batch_size:
            raise ValueError(f"max_batch_size {max_batch_size} needs a batch dim, but {reason}")
        return Layout(0, None, f"no Triton batching: {reason}")
    limit = manifest["dims"][name]["max"]
    if max_batch_size == 0:
        return Layout(0, None, "no Triton batching: max_batch_size 0 was asked for")
    if max_batch_size is None:
        return Layout(min(limit, DEFAULT_MAX_BATCH), name, reason)
    if max_batch_size > limit:
        raise ValueError(
            f"max_batch_size {max_batch_size} exceeds the artifact's batch range: dim {name!r} max is {limit}"
        )
    return Layout(max_batch_size, name, reason)


def triton_config(
    manifest: Manifest,
    *,
    model_name: str,
    model_format: dict[str, str],
    io_names: dict[str, str],
    layout_: Layout,
    instance_count: int = 1,
    dynamic_batching: bool = True,
) -> str:
    """config.pbtxt text. ``model_format`` holds platform or backend (plus default_model_filename)
    and kind; ``io_names`` maps manifest names to the names Triton must use (TorchScript)."""
    lines = _header(manifest, layout_, io_names)
    lines.append(f"name: {_quote(model_name)}")
    for key in ("platform", "backend", "default_model_filename"):
        if key in model_format:
            lines.append(f"{key}: {_quote(model_format[key])}")
    lines.append(f"max_batch_size: {layout_.max_batch_size}")
    for section, specs in (("input", manifest["inputs"]), ("output", manifest["outputs"])):
        blocks = [_tensor(spec, io_names.get(spec["name"], spec["name"]), layout_) for spec in specs]
        lines.append(f"{section} [\n" + ",\n".join(blocks) + "\n]")
    if dynamic_batching and layout_.max_batch_size > 0:
        lines.append("dynamic_batching { }")
    lines.append(f"instance_group [ {{ count: {instance_count} kind: {model_format['kind']} }} ]")
    lines.extend(_parameter(key, value) for key, value in _parameters(manifest, io_names).items())
    return "\n".join(lines) + "\n"


def _tensor(spec: dict[str, Any], name: str, layout_: Layout) -> str:
    dtype = DATA_TYPES.get(spec["dtype"])
    if dtype is None:
        raise ArtifactError(f"tensor {spec['name']!r}: dtype {spec['dtype']!r} has no Triton data type")
    shape = spec["shape"][1:] if layout_.batch_dim is not None else spec["shape"]
    dims = [d if isinstance(d, int) else -1 for d in shape]
    body = [f"    name: {_quote(name)}", f"    data_type: {dtype}"]
    if dims:
        body.append(f"    dims: [ {', '.join(str(d) for d in dims)} ]")
    else:  # Triton needs at least one dim; [1] reshaped to [] is its rank-0 tensor
        body += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
    return "  {\n" + "\n".join(body) + "\n  }"


def _header(manifest: Manifest, layout_: Layout, io_names: dict[str, str]) -> list[str]:
    info = manifest["info"]
    lines = [
        f"# Generated by fxdeploy {manifest['fxdeploy_version']} from an artifact for target "
        f"{manifest['target']!r} (runtime {manifest['runtime_version']}).",
        f"# Batching: {layout_.reason}.",
    ]
    if "onnx_opset" in info:
        lines.append(
            f"# ONNX opset {info['onnx_opset']}, IR version {info.get('onnx_ir_version')}: the server's runtime "
            "must read both."
        )
    if manifest["target"] == "tensorrt":
        lines.append("# model.plan runs only under the TensorRT version and GPU model it was built with.")
    for leaf in manifest["output_leaves"]:
        if "trim" in leaf:
            trim = leaf["trim"]
            lines.append(
                f"# Output {leaf['name']!r} is padded: the client keeps the first N entries along dim "
                f"{trim['dim']}, N = the value of output {trim['count']!r}."
            )
        elif leaf["kind"] == "hidden":
            lines.append(f"# Output {leaf['name']!r} is a hidden NMS count: padded outputs are valid up to it.")
    subs = info.get("substitutions") or []
    if subs:
        lines.append(
            f"# Substitution(s) {', '.join(subs)} ran at capture; their host-side unpack (e.g. slicing padded "
            "detections by num_dets) is not in the engine and must be done by the client."
        )
    renamed = [f"{theirs}={ours}" for ours, theirs in io_names.items() if ours != theirs]
    if renamed:
        lines.append(f"# Names follow the pytorch_libtorch convention: {', '.join(renamed)}.")
    return lines


def _parameters(manifest: Manifest, io_names: dict[str, str]) -> dict[str, str]:
    params = {
        "fxdeploy_version": str(manifest["fxdeploy_version"]),
        "fxdeploy_target": str(manifest["target"]),
        "fxdeploy_runtime_version": str(manifest["runtime_version"]),
    }
    hidden = [leaf["name"] for leaf in manifest["output_leaves"] if leaf["kind"] == "hidden"]
    if hidden:
        params["fxdeploy_hidden_outputs"] = ",".join(io_names.get(n, n) for n in hidden)
    for leaf in manifest["output_leaves"]:
        if "trim" in leaf:
            count = leaf["trim"]["count"]
            params[f"fxdeploy_trim_{io_names.get(leaf['name'], leaf['name'])}"] = (
                f"dim={leaf['trim']['dim']} count={io_names.get(count, count)}"
            )
    if any(ours != theirs for ours, theirs in io_names.items()):
        params["fxdeploy_names"] = ",".join(f"{theirs}={ours}" for ours, theirs in io_names.items())
    return params


def _parameter(key: str, value: str) -> str:
    return f"parameters {{ key: {_quote(key)} value: {{ string_value: {_quote(value)} }} }}"


def _quote(text: str) -> str:
    """A protobuf text-format string literal; names come from files, so escape, never trust."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ArtifactError(f"{text!r}: control characters cannot go into a Triton config")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
