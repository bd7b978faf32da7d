"""Calibration data for INT8: what the user gives, checked sample by sample against the signature
the model was captured with, and flattened to the engine's named inputs.

``data`` is an iterable of example-input tuples (one tensor alone is a one-input tuple), in the
model's own call form. Its batch is its own: it need not be the export example's, only within
the artifact's dims. Each sample is checked as it is read, and a failure names its index.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.errors import CalibrationWarning, FxDeployError, user_stacklevel

Method = Literal["minmax", "entropy", "percentile"]
MIN_SAMPLES = 8
"""Fewer calibration samples than this give activation ranges from too few values (Ultralytics'
users' near-zero mAP after INT8); the refusal says how many were given."""
DEFAULT_SAMPLES = 64


@dataclass(frozen=True)
class Calibration:
    """``data``: an iterable of example-input tuples; ``samples``: how many to read from it (all of
    it up to ``DEFAULT_SAMPLES`` when None); ``method``: how activation ranges are taken from them
    ("minmax", "entropy" or "percentile")."""

    data: Iterable[Any]
    samples: int | None = None
    method: Method = "minmax"

    def __post_init__(self) -> None:
        if self.method not in ("minmax", "entropy", "percentile"):
            raise FxDeployError(
                f"Calibration.method: expected 'minmax', 'entropy' or 'percentile', got {self.method!r}")
        if self.samples is not None and (not isinstance(self.samples, int) or self.samples < MIN_SAMPLES):
            raise FxDeployError(
                f"Calibration.samples: expected an int >= {MIN_SAMPLES}, got {self.samples!r}")

    def materialized(self) -> Calibration:
        """The samples read into a list (at most ``samples``), so that they can be read twice (the
        cache key, then the quantizer); an iterable that raises is named with the sample's index."""
        wanted = self.samples or DEFAULT_SAMPLES
        items: list[Any] = []
        iterator = iter(self.data)
        while len(items) < wanted:
            try:
                items.append(next(iterator))
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - the user's iterable raised: say where
                raise FxDeployError(
                    f"calibration: reading sample #{len(items)} raised {type(exc).__name__}: {exc}") from exc
        return Calibration(items, self.samples, self.method)

    def fingerprint(self) -> str:
        """A digest of the samples' values and the method (the artifact cache's key); materialized first."""
        digest = hashlib.sha256(f"{self.method}:{self.samples}".encode())
        for leaf in pytree.tree_leaves(list(self.data)):
            if isinstance(leaf, torch.Tensor):
                digest.update(f"{leaf.dtype}{tuple(leaf.shape)}".encode())
                digest.update(leaf.detach().cpu().contiguous().numpy().tobytes())
            else:
                digest.update(repr(leaf).encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class Calibrated:
    """What a target's lowering gets for INT8 (``LoweringJob.calibration``): the user's
    Calibration, and its samples read as the engine's named input arrays."""

    calibration: Calibration
    samples: list[dict[str, np.ndarray]]


def as_calibration(value: Any) -> Calibration:
    """``lower(calibration=...)``: a Calibration, or a bare iterable of samples."""
    if isinstance(value, Calibration):
        return value.materialized()
    if isinstance(value, (torch.Tensor, str, bytes)) or not isinstance(value, Iterable):
        raise FxDeployError(
            "calibration: expected an iterable of example-input tuples or a fxdeploy.Calibration, "
            f"got {type(value).__name__}"
        )
    return Calibration(value).materialized()


def calibration_for(settings: Any, calibration: Any, target: str) -> Calibration | None:
    """INT8 needs calibration data, and only INT8 reads it: either without the other is refused."""
    if target == "auto" and calibration is not None:
        raise FxDeployError("calibration: target 'auto' lowers fp32 only; name the INT8 target "
                            "(fxdeploy.targets() lists each target's precisions)")
    if settings.precision != "int8":
        if calibration is not None:
            raise FxDeployError(f"calibration: given, but Settings.precision is {settings.precision!r}; "
                                "calibration data is read only for precision 'int8'")
        return None
    if calibration is None:
        raise FxDeployError("Settings.precision 'int8' needs calibration data: pass lower(..., calibration=...), an "
                            "iterable of example-input tuples or a fxdeploy.Calibration (never a silent fp32)")
    return as_calibration(calibration)


def read_samples(
    calibration: Calibration, in_spec: pytree.TreeSpec, names: list[str], examples: list[torch.Tensor],
    shapes: list[list[int | str]], dims: dict[str, dims_mod.DimRange],
) -> list[dict[str, np.ndarray]]:
    """The samples as the engine's named float inputs; FxDeployError naming the sample at fault."""
    samples: list[dict[str, np.ndarray]] = []
    for index, sample in enumerate(list(calibration.data)[: calibration.samples or DEFAULT_SAMPLES]):
        for flat in _one_by_one(_flatten(sample, in_spec, index, len(names)), shapes):
            samples.append({name: _checked(x, name, example, shape, dims, index)
                            for name, x, example, shape in zip(names, flat, examples, shapes, strict=True)})
    _warn_on_ranges(samples, names, examples)
    needed = max(MIN_SAMPLES, calibration.samples or 0)
    if len(samples) < needed:
        raise FxDeployError(
            f"calibration: {len(samples)} sample(s) given, {needed} needed"
            + (f" (Calibration.samples={calibration.samples})" if calibration.samples else
               f" (at least {MIN_SAMPLES}: activation ranges from fewer are not trustworthy)")
        )
    return samples


def _warn_on_ranges(samples: list[dict[str, np.ndarray]], names: list[str], examples: list[torch.Tensor]) -> None:
    """A CalibrationWarning where the example's values reach past the samples' range by more than
    a tenth of the example's span: ranges calibrated on other data clip what the example holds."""
    for name, example in zip(names, examples, strict=True):
        if not samples or not example.dtype.is_floating_point or example.numel() == 0:
            continue
        low = min(float(s[name].min()) for s in samples if s[name].size)
        high = max(float(s[name].max()) for s in samples if s[name].size)
        lo, hi = float(example.min()), float(example.max())
        margin = 0.1 * (hi - lo)
        if lo < low - margin or hi > high + margin:
            warnings.warn(
                f"calibration: input {name!r} spans [{low:.4g}, {high:.4g}] in the calibration samples but "
                f"[{lo:.4g}, {hi:.4g}] in the example; calibrate on data like what the artifact will see",
                CalibrationWarning, stacklevel=user_stacklevel(),
            )


def _flatten(sample: Any, in_spec: pytree.TreeSpec, index: int, count: int) -> list[Any]:
    args = sample if isinstance(sample, tuple) else (sample,)
    flat, spec = pytree.tree_flatten((args, {}))
    if spec != in_spec:
        raise FxDeployError(
            f"calibration sample #{index}: expected the model's inputs as lower() was given them "
            f"({count} tensor(s), structure {in_spec}), got {len(flat)} value(s), structure {spec}"
        )
    return flat


def _one_by_one(flat: list[Any], shapes: list[list[int | str]]) -> list[list[Any]]:
    """A sample of k images for an artifact that takes 1 (each input's dim 0 a static 1, each
    sample's dim 0 the same k): k samples of one image. The calibration batch need not be the
    export batch; anything else is one sample, for ``_checked`` to judge."""
    if not flat or not all(shape and shape[0] == 1 for shape in shapes):
        return [flat]
    leads = {x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else None for x in flat}
    count = leads.pop() if len(leads) == 1 else None
    if count is None or count < 2:
        return [flat]
    return [[x[i : i + 1] for x in flat] for i in range(count)]


def _checked(
    x: Any, name: str, example: torch.Tensor, shape: list[int | str], dims: dict[str, dims_mod.DimRange], index: int
) -> np.ndarray:
    where = f"calibration sample #{index}, input {name!r}"
    if not isinstance(x, torch.Tensor):
        raise FxDeployError(f"{where}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype != example.dtype:
        raise FxDeployError(f"{where}: expected dtype {example.dtype}, got {x.dtype}")
    if x.dim() != len(shape):
        raise FxDeployError(f"{where}: expected {len(shape)} dims ({shape}), got shape {list(x.shape)}")
    for axis, (have, want) in enumerate(zip(x.shape, shape, strict=True)):
        if isinstance(want, int) and have != want:
            raise FxDeployError(f"{where}: dim {axis} must be {want} (the artifact's shape {shape}), got {have}")
        if isinstance(want, str):
            base = dims_mod.parse(want)[1]
            r = dims.get(base)
            if r is not None and want == base and not r.min <= have <= r.max:
                raise FxDeployError(f"{where}: dim {axis} ({want}) must be in [{r.min}, {r.max}], got {have}")
    if x.dtype.is_floating_point and not bool(torch.isfinite(x).all()):
        raise FxDeployError(f"{where}: holds NaN or inf; calibration ranges must come from finite values")
    return x.detach().cpu().numpy()


def calibration_samples(calibration: Calibration, captured: Any, per_image_engine: bool) -> list[dict[str, np.ndarray]]:
    """The samples for a captured model's engine. A model that loops over its images was
    captured for one image (``captured.per_image``): its samples are whole batches, checked
    against the batch's range, and split into images where the engine takes one at a time."""
    info = captured.per_image
    if info is None:
        return read_samples(calibration, captured.in_spec, captured.input_names, captured.example_inputs,
                            captured.input_shapes, captured.dims)
    batch = dims_mod.DimRange(info["dim"], info["min"], info["max"], info["opt"])
    shapes = [[info["dim"], *x.shape[1:]] for x in captured.batch_inputs]
    batches = read_samples(calibration, captured.in_spec, captured.input_names, captured.batch_inputs, shapes,
                           {**captured.dims, info["dim"]: batch})
    if not per_image_engine:
        return batches
    return [{name: x[i : i + 1] for name, x in sample.items()}
            for sample in batches for i in range(next(iter(sample.values())).shape[0])]
