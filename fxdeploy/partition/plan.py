"""The ncnn stage plan: what the lowering wrote and the runtime runs, in order.

One definition for both sides. The lowering builds a ``Plan`` from the cut's stages and writes it
into the manifest with ``to_dict``; the runtime and the lowering report read it back with
``from_dict``. A manifest is untrusted data, so ``from_dict`` only checks types and names (a file
name is a plain name in the artifact directory, a source points at a graph input or an earlier
stage) and never imports, evaluates or opens anything. This module imports no torch, so the
runtime can read a plan without the capture and pass machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fxdeploy.errors import ArtifactError

WHERE = "manifest info.ncnn"


@dataclass(frozen=True)
class Source:
    """Where a stage's input (or a graph output) comes from: graph input ``index`` when ``stage``
    is None, else output ``index`` of stage ``stage``. In JSON: ``["input", i]`` or ``[s, k]``."""

    stage: int | None
    index: int

    @classmethod
    def graph_input(cls, index: int) -> Source:
        return cls(None, index)

    def to_json(self) -> list[str | int]:
        return ["input" if self.stage is None else self.stage, self.index]


@dataclass(frozen=True)
class EngineOutput:
    """An engine output blob and the per-image shape to restore (ncnn drops size-1 dims; -1
    marks a dim that follows the input size)."""

    blob: str
    shape: tuple[int, ...]
    dtype: str
    batch_axis: int = 0
    """Where the batch goes in the graph's value: the engine gives it first (``ncnn_checks``)."""


@dataclass(frozen=True)
class Engine:
    """An ncnn net (param/bin) and how it takes its blobs; see the lowering's ``_input_layout``
    for ``batched_inputs`` and ``_shared_inputs`` for ``shared_inputs``."""

    param: str
    bin: str
    blobs: tuple[str, ...]
    outputs: tuple[EngineOutput, ...]
    batched_inputs: bool = False
    shared_inputs: tuple[int, ...] = ()
    id_inputs: tuple[tuple[int, int], ...] = ()
    """(input, rows): inputs ncnn's Embed reads as int32 ids, each in [0, rows)."""
    grouped_inputs: tuple[tuple[int, int], ...] = ()
    """(input, k): inputs with k rows per image (dim 0 is k times the batch), each image given its own."""


@dataclass(frozen=True)
class HostOp:
    """An op a host stage runs, and why the cut put it on the host rather than in the engine."""

    op: str
    why: str


@dataclass(frozen=True)
class Host:
    """A TorchScript file run on the host between engine stages (an NMS, a top-k selection)."""

    file: str
    ops: tuple[HostOp, ...] = ()


@dataclass(frozen=True)
class Stage:
    """One step of the plan: ``work`` is None for an engine stage the cut left empty."""

    sources: tuple[Source, ...]
    work: Engine | Host | None

    @property
    def kind(self) -> str:
        return "engine" if isinstance(self.work, Engine) else "host" if isinstance(self.work, Host) else "empty"


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]
    outputs: tuple[Source, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"stages": [_stage_dict(stage) for stage in self.stages],
                "outputs": [source.to_json() for source in self.outputs]}

    @classmethod
    def from_dict(cls, data: object, input_names: list[str]) -> Plan:
        """Read a manifest's plan. Artifacts saved before stages existed hold one engine "head"
        and an optional host "tail" (keys ``head_outputs``, ``host_tail``, ``tail_inputs``);
        they are read here, and only here, as the two-stage plan they describe."""
        data = _mapping(data, WHERE)
        if "stages" not in data:
            return _head_and_tail(data, input_names)
        stages = tuple(_stage(item, s, len(input_names)) for s, item in enumerate(_list(data, "stages", WHERE)))
        outputs = tuple(_source(item, len(stages), len(input_names), f"{WHERE}.outputs")
                        for item in _list(data, "outputs", WHERE))
        return cls(stages, outputs)


def _stage_dict(stage: Stage) -> dict[str, Any]:
    sources = [source.to_json() for source in stage.sources]
    work = stage.work
    if isinstance(work, Engine):
        outputs = [{"blob": o.blob, "shape": list(o.shape), "dtype": o.dtype,
                    **({"batch_axis": o.batch_axis} if o.batch_axis else {})} for o in work.outputs]
        return {"kind": "engine", "param": work.param, "bin": work.bin, "blobs": list(work.blobs),
                "batched_inputs": work.batched_inputs, "shared_inputs": list(work.shared_inputs),
                "id_inputs": [list(pair) for pair in work.id_inputs],
                **({"grouped_inputs": [list(pair) for pair in work.grouped_inputs]} if work.grouped_inputs else {}),
                "outputs": outputs, "sources": sources}
    if isinstance(work, Host):
        ops = [{"op": op.op, "why": op.why} for op in work.ops]
        return {"kind": "host", "file": work.file, "ops": ops, "sources": sources}
    return {"kind": "empty", "sources": sources}


def _stage(data: object, position: int, inputs: int) -> Stage:
    where = f"{WHERE}.stages[{position}]"
    data = _mapping(data, where)
    sources = tuple(_source(item, position, inputs, f"{where}.sources") for item in _list(data, "sources", where))
    kind = _value(data, "kind", str, where)
    if kind == "empty":
        return Stage(sources, None)
    if kind == "host":
        ops = tuple(_host_op(item, f"{where}.ops") for item in _list(data, "ops", where, default=[]))
        return Stage(sources, Host(_file(data, "file", where), ops))
    if kind != "engine":
        raise ArtifactError(f"{where}: 'kind' must be 'engine', 'host' or 'empty', got {kind!r}")
    return Stage(sources, _engine(data, where, len(sources)))


def _engine(data: dict[str, Any], where: str, inputs: int) -> Engine:
    shared = tuple(_index(k, inputs, f"{where}.shared_inputs") for k in _list(data, "shared_inputs", where, []))
    return Engine(
        param=_file(data, "param", where), bin=_file(data, "bin", where),
        blobs=tuple(_typed(blob, str, f"{where}: a blob") for blob in _list(data, "blobs", where)),
        outputs=tuple(_engine_output(item, f"{where}.outputs") for item in _list(data, "outputs", where)),
        batched_inputs=_value(data, "batched_inputs", bool, where, default=False),
        shared_inputs=shared,
        id_inputs=tuple(_id_input(item, inputs, f"{where}.id_inputs") for item in _list(data, "id_inputs", where, [])),
        grouped_inputs=tuple(_id_input(item, inputs, f"{where}.grouped_inputs")
                             for item in _list(data, "grouped_inputs", where, [])),
    )


def _id_input(data: object, inputs: int, where: str) -> tuple[int, int]:
    if not isinstance(data, list) or len(data) != 2:
        raise ArtifactError(f"{where}: an entry must be [input, rows], got {data!r}")
    rows = _typed(data[1], int, f"{where}: rows")
    if rows < 1:
        raise ArtifactError(f"{where}: rows must be >= 1, got {rows}")
    return _index(data[0], inputs, where), rows


def _engine_output(data: object, where: str) -> EngineOutput:
    data = _mapping(data, where)
    shape = tuple(_typed(d, int, f"{where}: a dim of 'shape'") for d in _list(data, "shape", where))
    axis = _index(data.get("batch_axis", 0), len(shape) + 1, f"{where}.batch_axis")
    return EngineOutput(_value(data, "blob", str, where), shape, _value(data, "dtype", str, where), axis)


def _host_op(data: object, where: str) -> HostOp:
    """A bare op name is a host op from before the reasons were recorded."""
    if isinstance(data, str):
        return HostOp(data, "not recorded (saved by an older fxdeploy)")
    data = _mapping(data, where)
    return HostOp(_value(data, "op", str, where), _value(data, "why", str, where))


def _source(data: object, stages_before: int, inputs: int, where: str) -> Source:
    """A source names a graph input, or an output of a stage that runs earlier."""
    if not isinstance(data, list) or len(data) != 2:
        raise ArtifactError(f"{where}: a source must be [\"input\", i] or [stage, k], got {_shown(data)}")
    part, index = data
    if part == "input":
        return Source(None, _index(index, inputs, where))
    return Source(_index(part, stages_before, where), _index(index, None, where))


def _head_and_tail(data: dict[str, Any], input_names: list[str]) -> Plan:
    """The plan before stages: the engine ("head", stage 0) and the host tail (stage 1)."""
    number = {"input": "input", "head": 0, "tail": 1}

    def renamed(item: object, where: str) -> list[object]:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str) or item[0] not in number:
            raise ArtifactError(f"{where}: expected [\"input\"|\"head\"|\"tail\", k], got {_shown(item)}")
        return [number[item[0]], item[1]]

    inputs = [_mapping(spec, f"{WHERE}.inputs") for spec in _list(data, "inputs", WHERE)]
    names = [_value(spec, "name", str, f"{WHERE}.inputs") for spec in inputs]
    if any(name not in input_names for name in names):
        raise ArtifactError(f"{WHERE}.inputs: names {names} are not all among the inputs {input_names}")
    stages: list[dict[str, Any]] = [{
        "kind": "engine", "param": "model.ncnn.param", "bin": "model.ncnn.bin",
        "blobs": [spec.get("blob") for spec in inputs], "outputs": _list(data, "head_outputs", WHERE),
        "sources": [["input", input_names.index(name)] for name in names],
    }]
    tail = data.get("host_tail")
    if tail:
        sources = [renamed(item, f"{WHERE}.tail_inputs") for item in _list(data, "tail_inputs", WHERE)]
        stages.append({"kind": "host", "file": tail, "sources": sources})
    outputs = [renamed(item, f"{WHERE}.outputs") for item in _list(data, "outputs", WHERE)]
    return Plan.from_dict({"stages": stages, "outputs": outputs}, input_names)


def _mapping(data: object, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ArtifactError(f"{where}: expected a JSON object, got {_shown(data)}")
    return data


_MISSING = object()


def _value(data: dict[str, Any], key: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    """``data[key]``, of type ``kind``, or ``default`` when the key is absent."""
    if key not in data:
        if default is _MISSING:
            raise ArtifactError(f"{where}: {key!r} is missing")
        return default
    return _typed(data[key], kind, f"{where}: {key!r}")


def _typed(value: object, kind: type, what: str) -> Any:
    """``value`` when it is a ``kind``; a bool is not an int here."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ArtifactError(f"{what} must be {kind.__name__}, got {_shown(value)}")
    return value


def _list(data: dict[str, Any], key: str, where: str, default: Any = _MISSING) -> list[Any]:
    return _value(data, key, list, where, default)


def _file(data: dict[str, Any], key: str, where: str) -> str:
    """A file the runtime opens: a plain name beside the manifest, never a path out of it."""
    name = _value(data, key, str, where)
    if not name or name.startswith(".") or any(mark in name for mark in ("/", "\\", "\x00")):
        raise ArtifactError(f"{where}: {key!r} must be a file name in the artifact directory, got {name!r}")
    return name


def _index(value: object, bound: int | None, where: str) -> int:
    """An int in [0, bound) (no bound: any int >= 0)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (bound is not None and value >= bound):
        expected = "an int >= 0" if bound is None else f"an int in [0, {bound})"
        raise ArtifactError(f"{where}: expected {expected}, got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"
