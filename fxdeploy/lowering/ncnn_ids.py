"""Integer engine inputs on ncnn: token ids and attention masks.

ncnn's blobs are 32-bit. The lowering gives an engine stage its integer and bool inputs as float32
(cast back to their type first), which holds every integer below 2**24 exactly, so mask arithmetic
runs in the engine on their values. pnnx leaves those casts as ``Tensor.to``, which ncnn has no
layer for: ``exact_casts_as_noops`` makes them ``Noop`` layers where they change no value.

ncnn's ``Embed`` (an embedding lookup) reads its input's 32 bits as an int32 id instead, and
clamps an id outside its table into it where PyTorch raises. ``id_inputs`` finds the inputs that
only Embed layers read: the executor feeds those as int32 and refuses an id outside the smallest
table that reads it. An input read both ways, or an Embed of ids the engine computes, is refused.
"""

from __future__ import annotations

from pathlib import Path

from fxdeploy.errors import LoweringError

_INTEGER = ("i8", "i16", "i32", "i64", "u8")
_PASS_THROUGH = ("Split", "Noop", "Squeeze", "ExpandDims", "Reshape", "Flatten")
"""Layers whose tops are their bottom's values, moved but not computed on (an int32 id's bits pass
through them as they are): readers are looked for behind them. lower()'s check runs the ids through."""


def exact_casts_as_noops(param: Path, pnnx_graph: str, exact: set[int]) -> list[str]:
    """Rewrite, as ncnn ``Noop`` layers, the casts that are no-ops on ncnn's float32 blobs; returns
    their names. A cast is a no-op where the value is an integer that float32 holds exactly: the
    cast of an input the lowering took as float32 (``exact``: input indices, integers by
    construction, checked below 2**24 at call time) back to its integer type, and a cast from an
    integer type to a float or wider integer one. A float-to-integer cast of any other value
    truncates, and stays (refused)."""
    inputs, noops = {}, set()
    for line in pnnx_graph.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        if fields[0] == "pnnx.Input":
            inputs[fields[4]] = int(fields[1].rsplit("_", 1)[1])
        elif fields[0] == "Tensor.to" and fields[2] == "1" and fields[3] == "1":
            source, target = fields[4], fields[5]
            types = {t.split("=", 1)[0][1:]: t.rsplit(")", 1)[1] for t in fields if t.startswith("#")}
            from_integer = types.get(source, "") in _INTEGER
            to_kept = types.get(target, "") in ("f32", "f16", "i32", "i64")
            back_from_input = inputs.get(source) in exact and types.get(target, "") in _INTEGER
            if (from_integer and to_kept) or back_from_input:
                noops.add(fields[1])
    if noops:
        lines = [line.split() for line in param.read_text().splitlines()]
        lines = [["Noop", *f[1:]] if len(f) > 1 and f[1] in noops else f for f in lines]
        param.write_text("\n".join(" ".join(f) for f in lines) + "\n")
    return sorted(noops)


def id_inputs(param: Path, exact: set[int], labels: list[str]) -> dict[int, int]:
    """The engine inputs that ncnn's Embed layers read, each with the row count of the smallest
    table that reads it (ids must lie in [0, rows)). ``exact``: the integer inputs; ``labels``:
    every input's name, for the errors."""
    producer: dict[str, tuple[str, str]] = {}
    readers: dict[str, list[tuple[str, str, int]]] = {}
    for fields in (line.split() for line in param.read_text().splitlines()[2:]):
        if len(fields) < 4:
            continue
        kind, name, bottoms = fields[0], fields[1], fields[4:4 + int(fields[2])]
        for top in fields[4 + int(fields[2]):4 + int(fields[2]) + int(fields[3])]:
            producer[top] = (kind, bottoms[0] if bottoms else "")
        if kind not in _PASS_THROUGH:
            rows = next((int(f[2:]) for f in fields if f.startswith("1=")), 0) if kind == "Embed" else 0
            for bottom in bottoms:
                readers.setdefault(_root(bottom, producer), []).append((kind, name, rows))
    found: dict[int, int] = {}
    for blob, reads in readers.items():
        embeds = [(name, rows) for kind, name, rows in reads if kind == "Embed"]
        if not embeds:
            continue
        k = int(blob[2:]) if blob.startswith("in") and blob[2:].isdigit() else None
        if k is None or k not in exact:
            raise LoweringError(
                f"ncnn: the embedding lookup {embeds[0][0]} reads ids that the engine computes (blob {blob}); "
                "ncnn's Embed takes its ids as int32 only from an integer input of the engine. Pass the ids to "
                "the model as an input, or lower to onnxruntime or openvino"
            )
        others = [f"{kind} {name}" for kind, name, _ in reads if kind != "Embed"]
        if others:
            raise LoweringError(
                f"ncnn: input {labels[k]!r} is read as ids by the embedding lookup {embeds[0][0]} and as numbers "
                f"by {', '.join(others[:3])}; ncnn takes an input one way only. Pass the ids twice (two inputs), "
                "or lower to onnxruntime or openvino"
            )
        found[k] = min(rows for _, rows in embeds)
    return found


def _root(blob: str, producer: dict[str, tuple[str, str]]) -> str:
    """The blob whose values ``blob`` carries, behind Split and Noop layers."""
    while blob in producer and producer[blob][0] in _PASS_THROUGH and producer[blob][1]:
        blob = producer[blob][1]
    return blob
