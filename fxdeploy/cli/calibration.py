"""``fxdeploy lower --precision int8 --calibration SPEC``: the calibration data, from

- ``file.py:factory`` or ``package.module:factory``: the factory returns an iterable of
  example-input tuples, or a ``fxdeploy.Calibration``;
- ``data.npz``: one array per model input, in the inputs' order, each holding the samples along
  a new leading axis (``[samples, *input_shape]``). Read with ``allow_pickle=False``: no code runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fxdeploy.cli.checks import UsageError, model_spec


def calibration_spec(text: str) -> str:
    """A .npz file that exists, or a factory spec (the model spec's rules)."""
    if text.endswith(".npz"):
        if not Path(text).is_file():
            raise argparse.ArgumentTypeError(f"{text!r}: the calibration file does not exist")
        return text
    return model_spec(text)


def load_calibration(spec: str | None, precision: str) -> Any:
    """The data ``lower(calibration=...)`` takes; None where none was given (and none is needed)."""
    if precision != "int8":
        if spec is not None:
            raise UsageError(f"argument --calibration: given, but --precision is {precision!r}; "
                             "calibration data is read only for --precision int8")
        return None
    if spec is None:
        raise UsageError("argument --calibration: missing; --precision int8 needs calibration data: "
                         "file.py:factory (returning an iterable of example-input tuples) or a .npz of input arrays")
    return _npz_samples(spec) if spec.endswith(".npz") else _factory_samples(spec)


def _npz_samples(path: str) -> list[tuple[Any, ...]]:
    import numpy as np
    import torch

    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = [data[name] for name in data.files]
    except (OSError, ValueError) as exc:
        raise UsageError(f"argument --calibration: {path}: not a readable .npz ({exc})") from exc
    counts = {a.shape[0] if a.ndim else None for a in arrays}
    if not arrays or len(counts) != 1 or None in counts:
        shapes = [list(a.shape) for a in arrays]
        raise UsageError(f"argument --calibration: {path}: expected one array per input, each [samples, ...] with "
                         f"the same number of samples; got arrays of shapes {shapes}")
    return [tuple(torch.from_numpy(np.ascontiguousarray(a[i])) for a in arrays) for i in range(arrays[0].shape[0])]


def _factory_samples(spec: str) -> Any:
    from fxdeploy.cli.model_spec import call_factory

    try:
        return call_factory(spec, "calibration")
    except (ValueError, ImportError, OSError) as exc:
        raise UsageError(f"argument --calibration: {exc}") from exc
