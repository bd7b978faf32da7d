"""ncnn executor: the stages in order, one shared Net per engine stage and one Extractor per image."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.artifact.manifest import Manifest
from fxdeploy.artifact.ncnn_net import SPIN_MS, as_ids, load_net
from fxdeploy.artifact.ncnn_net import configure as configure_options
from fxdeploy.errors import ArtifactError, InputError
from fxdeploy.partition import Engine, Host, Plan, Source
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings

Run = Callable[[list[torch.Tensor]], list[torch.Tensor]]


class NcnnExecutor(Executor):
    """Thread-safe: an ncnn Net may be shared, and each call makes its own extractors.

    The plan is a list of stages, run in order: engine stages on ncnn, host stages (NMS, a top-k
    query selection) as TorchScript. ncnn blobs have no batch axis, so each engine stage runs once
    per image and its outputs are stacked; the lowering only accepts engine stages whose inputs and
    outputs all lead with the batch.
    """

    thread_safe = True

    def __init__(self, directory: Path, manifest: Manifest, settings: Settings) -> None:
        import ncnn

        super().__init__()
        self._ncnn = ncnn
        try:
            self.plan = Plan.from_dict(manifest["info"].get("ncnn"), [spec["name"] for spec in manifest["inputs"]])
        except ArtifactError as exc:  # which artifact, too
            raise ArtifactError(f"{directory}: {exc}") from None
        self.nets: list[Any] = []
        """One ncnn Net per engine stage, in order."""
        self._spin_ms = 0 if any(isinstance(stage.work, Host) for stage in self.plan.stages) else SPIN_MS
        """No spinning after a layer where host stages run between engine stages (ncnn_net.configure)."""
        self.stages: list[tuple[Run, tuple[Source, ...]]] = []
        names = [spec["name"] for spec in manifest["inputs"]]
        for s, stage in enumerate(self.plan.stages):
            work = stage.work
            labels = [names[src.index] if src.stage is None else f"stage {s} input #{k}"
                      for k, src in enumerate(stage.sources)]
            run = (
                self._engine(directory, work, settings, labels) if isinstance(work, Engine)
                else _host(directory, work) if isinstance(work, Host)
                else _nothing
            )
            self.stages.append((run, stage.sources))
        self.output_names = [o["name"] for o in manifest["outputs"]]

    def _engine(self, directory: Path, engine: Engine, settings: Settings, labels: list[str]) -> Run:
        net = load_net(directory / engine.param, directory / engine.bin, threads=settings.threads,
                       fp16=_fp16(settings), error=ArtifactError, spin_ms=self._spin_ms)
        self.nets.append(net)
        copied = _overwritten(net, engine.blobs)
        blobs = [(blob, blob in copied) for blob in engine.blobs]
        shared = set(engine.shared_inputs)
        outputs = [(o.blob, o.shape, _dtype(o.dtype)) for o in engine.outputs]
        axes = [o.batch_axis for o in engine.outputs]
        ids, groups = dict(engine.id_inputs), dict(engine.grouped_inputs)

        def run(args: list[torch.Tensor]) -> list[torch.Tensor]:
            args = [_as_engine_input(x, labels[k], ids.get(k)) for k, x in enumerate(args)]
            arrays = [x.numpy()[None] if k in shared else _grouped(x.numpy(), groups[k], labels[k]) if k in groups
                      else x.numpy() for k, x in enumerate(args)]
            results = self._run_net(net, blobs, outputs, arrays, engine.batched_inputs, shared)
            return [y.movedim(0, axis) if axis else y for y, axis in zip(results, axes, strict=True)]

        return run

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        values = {Source.graph_input(i): x for i, x in enumerate(feeds.values())}
        for s, (run, sources) in enumerate(self.stages):
            values.update((Source(s, k), v) for k, v in enumerate(run([values[source] for source in sources])))
        return {name: values[source] for name, source in zip(self.output_names, self.plan.outputs, strict=True)}

    def _run_net(
        self, net: Any, blobs: list[tuple[str, bool]], outputs: list[tuple[str, tuple[int, ...], torch.dtype]],
        arrays: list[np.ndarray], batched: bool, shared: set[int] = frozenset(),
    ) -> list[torch.Tensor]:
        """``batched``: the engine takes each image with a leading 1 (see the lowering's _input_layout).
        ``shared``: inputs given once (with a leading 1) for every image."""
        batch = next(a.shape[0] for k, a in enumerate(arrays) if k not in shared)
        rows: list[list[np.ndarray]] = [[] for _ in outputs]
        for b in range(batch):
            extractor = net.create_extractor()
            # kept alive: a Mat borrows its buffer
            images = [np.ascontiguousarray(array[i : i + 1] if batched else array[i])
                      for array, i in ((a, 0 if k in shared else b) for k, a in enumerate(arrays))]
            mats = [self._ncnn.Mat(image) for image in images]
            mats = [mat.clone() if copy or _unaligned(mat) else mat for mat, (_, copy) in zip(mats, blobs, strict=True)]
            for (blob, _), mat in zip(blobs, mats, strict=True):
                if extractor.input(blob, mat) != 0:
                    raise RuntimeError(f"ncnn: cannot set input blob {blob} for image {b}")
            for k, (blob, shape, _) in enumerate(outputs):
                code, mat = extractor.extract(blob)
                if code != 0 or mat.dims == 0:  # numpy of an empty Mat would segfault
                    raise RuntimeError(f"ncnn: extracting blob {blob} failed with code {code} for image {b}")
                rows[k].append(_per_image(np.array(mat), shape, blob))
        return [torch.from_numpy(_stack(r)).to(dtype) for r, (_, _, dtype) in zip(rows, outputs, strict=True)]


def _unaligned(mat: Any) -> bool:
    """A Mat that wraps a numpy array has its channels packed tight (a step of w * h values); ncnn's
    own Mats start each channel 16 bytes aligned, and some layers assume so where they read a
    channel range of an input (Crop or Slice on channels, then PixelShuffle, Interp or MaxPool: wrong
    values at every image with w * h not a multiple of 4, in ncnn 1.0.20261020). Such inputs are
    copied into a Mat of ncnn's own (``clone``), whose channels are aligned."""
    return mat.dims >= 3 and mat.w * mat.h * getattr(mat, "d", 1) * mat.elemsize % 16 != 0


EXACT = 2**24
"""ncnn's blobs hold float32: integers (token ids, masks) are exact below 2**24."""


def _as_engine_input(x: torch.Tensor, label: str, rows: int | None) -> torch.Tensor:
    """``x`` as the engine takes it: float32 as it is; integers and bools as float32 numbers, exact
    below 2**24; ids an Embed reads (``rows``: its table's) as int32 bits, each in [0, rows)."""
    if x.dtype == torch.float32:
        return x
    if rows is not None:
        low, high = (int(x.min()), int(x.max())) if x.numel() else (0, 0)
        if low < 0 or high >= rows:
            raise InputError(
                f"input {label!r}: ids index an embedding table of {rows} rows, so each must be in [0, {rows}); "
                f"got {low if low < 0 else high}"
            )
        return torch.from_numpy(as_ids(x.numpy()))
    if not x.is_floating_point() and x.dtype != torch.bool and x.numel():
        largest = int(x.abs().max())
        if largest >= EXACT:
            raise InputError(
                f"input {label!r}: ncnn takes integer inputs as float32, exact only below 2**24 = {EXACT}; "
                f"got a value of magnitude {largest}. Lower to onnxruntime or openvino for larger integers"
            )
    return x.float()


def _grouped(array: np.ndarray, rows: int, label: str) -> np.ndarray:
    """An input with ``rows`` rows per image as [images, rows, ...]: image i's rows lead its entry."""
    if array.shape[0] % rows:
        raise InputError(f"input {label!r}: dim 0 must be a multiple of {rows} (rows per image), got {array.shape[0]}")
    return array.reshape(array.shape[0] // rows, rows, *array.shape[1:])


_SHARING = frozenset({"Split", "Squeeze", "Reshape", "Flatten", "ExpandDims", "Noop"})
"""Layers whose outputs may share their input's data (views, and Split's copies of it): an in-place layer after
one writes the input."""


def _overwritten(net: Any, inputs: tuple[str, ...]) -> set[str]:
    """Input blobs that a layer works on in place (an activation, a scalar BinaryOp, as the first
    op of a stage after a host stage often is), directly or through views of them (the squeeze that
    takes a grouped input's rows). ncnn then writes into the input Mat itself, and with a Mat that
    wraps a numpy array it crashes (a segfault, in ncnn 1.0.20261020): those inputs are copied into
    a Mat of ncnn's own on each call. Others are passed without a copy."""
    layers, blobs = net.layers(), net.blobs()
    index = {blob.name: k for k, blob in enumerate(blobs)}

    def written(blob: int) -> bool:
        consumer = blobs[blob].consumer
        if consumer < 0:
            return False
        layer = layers[consumer]
        return layer.support_inplace or (layer.type in _SHARING and any(written(top) for top in layer.tops))

    return {name for name in inputs if written(index[name])}


def _nothing(args: list[torch.Tensor]) -> list[torch.Tensor]:
    """An empty stage: the split left an engine stage with no work."""
    return []


def _host(directory: Path, host: Host) -> Run:
    with quiet_jit():
        module = torch.jit.load(str(directory / host.file))

    def run(args: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.inference_mode():
            return list(module(*args))

    return run


def configure(opt: Any, settings: Settings) -> None:
    """The switches ``ncnn_net.configure`` sets, from the settings (benchmarks use it directly)."""
    configure_options(opt, threads=settings.threads, fp16=_fp16(settings))


def _fp16(settings: Settings) -> bool:
    """The precision policy, engine-wide."""
    return bool(settings.ncnn.fp16 or settings.precision == "fp16")


def _stack(images: list[np.ndarray]) -> np.ndarray:
    """Batch 1, the common deployment case, needs no copy."""
    return images[0][np.newaxis] if len(images) == 1 else np.stack(images)


def _per_image(array: np.ndarray, shape: tuple[int, ...], blob: str) -> np.ndarray:
    """ncnn drops size-1 dims and the batch axis; the lowering recorded the shape to restore, with
    -1 for a dim that follows the input size (taken from the blob, in order)."""
    if -1 not in shape:
        if array.size != int(np.prod(shape)):
            raise RuntimeError(
                f"ncnn: blob {blob} holds {array.size} values ({array.shape}), expected shape {list(shape)}"
            )
        return array.reshape(shape)
    kept = [d for d in array.shape if d != 1]
    wanted = [d for d in shape if d != 1]
    if len(kept) == len(wanted) and all(w in (-1, k) for w, k in zip(wanted, kept, strict=True)):
        sizes = iter(kept)
        return array.reshape([1 if d == 1 else next(sizes) for d in shape])
    if array.ndim == len(shape) and all(w in (-1, a) for w, a in zip(shape, array.shape, strict=True)):
        return array  # a dynamic dim that happens to be 1 here
    raise RuntimeError(f"ncnn: blob {blob} has shape {list(array.shape)}, which does not fit {list(shape)}")


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64, "int32": torch.int32,
           "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}


def _dtype(name: str) -> torch.dtype:
    """ncnn computes in float; integer outputs (labels, argmax) are cast back to what PyTorch gave."""
    if name not in _DTYPES:
        raise ArtifactError(f"ncnn: output dtype {name!r} is not one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def version() -> str | None:
    try:
        import ncnn
    except ImportError:
        return None
    return ncnn.__version__
