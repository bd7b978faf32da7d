"""ncnn executor: one shared Net, one Extractor per image, and the host tail after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fxdeploy.errors import ArtifactError
from fxdeploy.jit_warnings import quiet_jit
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings


class NcnnExecutor(Executor):
    """Thread-safe: an ncnn Net may be shared, and each call makes its own extractors.

    ncnn blobs have no batch axis, so the net runs once per image and the outputs are stacked;
    the lowering only accepts graphs whose inputs and outputs all lead with the batch.
    """

    thread_safe = True

    def __init__(self, directory: Path, manifest: dict[str, Any], settings: Settings) -> None:
        import ncnn

        super().__init__()
        self._ncnn = ncnn
        plan = manifest["info"]["ncnn"]
        self.net = ncnn.Net()
        configure(self.net.opt, settings)
        for kind, name, loader in (("param", "model.ncnn.param", self.net.load_param),
                                   ("model", "model.ncnn.bin", self.net.load_model)):
            code = loader(str(directory / name))
            if code != 0:
                raise ArtifactError(f"ncnn: load_{kind}({directory / name}) failed with code {code}")
        self.inputs = [(spec["name"], spec["blob"]) for spec in plan["inputs"]]
        self.head = [(s["blob"], tuple(s["shape"]), _dtype(s["dtype"])) for s in plan["head_outputs"]]
        with quiet_jit():
            self.tail = torch.jit.load(str(directory / plan["host_tail"])) if plan["host_tail"] else None
        self.tail_inputs = [tuple(source) for source in plan["tail_inputs"]]
        self.sources = [tuple(source) for source in plan["outputs"]]
        self.output_names = [o["name"] for o in manifest["outputs"]]

    def _run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        head = self._run_net([feeds[name].numpy() for name, _ in self.inputs])
        values: dict[str, list[torch.Tensor]] = {"input": list(feeds.values()), "head": head, "tail": []}
        if self.tail is not None:
            args = [values[part][k] for part, k in self.tail_inputs]
            with torch.inference_mode():
                values["tail"] = list(self.tail(*args))
        pairs = zip(self.output_names, self.sources, strict=True)
        return {name: values[part][k] for name, (part, k) in pairs}

    def _run_net(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        batch = arrays[0].shape[0]
        rows: list[list[np.ndarray]] = [[] for _ in self.head]
        for b in range(batch):
            extractor = self.net.create_extractor()
            mats = [self._ncnn.Mat(array[b]) for array in arrays]  # kept alive: Mat borrows the buffer
            for (name, blob), mat in zip(self.inputs, mats, strict=True):
                if extractor.input(blob, mat) != 0:
                    raise RuntimeError(f"ncnn: cannot set input {name!r} (blob {blob}) for image {b}")
            for k, (blob, shape, _) in enumerate(self.head):
                code, mat = extractor.extract(blob)
                if code != 0:
                    raise RuntimeError(f"ncnn: extracting blob {blob} failed with code {code} for image {b}")
                rows[k].append(_per_image(np.array(mat), shape, blob))
        dtypes = [dtype for _, _, dtype in self.head]
        return [torch.from_numpy(_stack(r)).to(d) for r, d in zip(rows, dtypes, strict=True)]


def configure(opt: Any, settings: Settings) -> None:
    """Every precision switch set explicitly: ncnn's defaults enable fp16 storage and arithmetic."""
    opt.num_threads = settings.threads
    opt.use_vulkan_compute = False
    fp16 = bool(settings.ncnn.fp16 or settings.precision == "fp16")  # the precision policy, engine-wide
    opt.use_fp16_packed = fp16
    opt.use_fp16_storage = fp16
    opt.use_fp16_arithmetic = fp16
    opt.use_bf16_storage = False
    opt.use_bf16_packed = False


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
           "bool": torch.bool}


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
