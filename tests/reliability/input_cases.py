"""Bad and unusual runtime inputs for the convnet (x: float32[batch, 3, 64, 64], batch in 1..4).

Each case builds the call's arguments and says what must happen: an exact InputError message, or
a result equal to eager. One table serves every target, so "the same outcome on every target" is
checked against one expected value, not target by target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

RESULT = "result"
"""Outcome of a case that must run and match eager."""
SHAPE = "[batch, 3, 64, 64]"


def _x(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 64, 64)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class Case:
    name: str
    args: Callable[[], tuple[Any, ...]]
    outcome: str
    """RESULT, or the exact InputError message."""


CALL_CASES = [
    # wrong count
    Case("no_inputs", lambda: (), "expected 1 input(s) (x), got 0"),
    Case("two_inputs", lambda: (_x(), _x()), "expected 1 input(s) (x), got 2"),
    # wrong dtype
    Case("float64", lambda: (_x().double(),), "input 'x': expected dtype float32, got float64"),
    Case("float16", lambda: (_x().half(),), "input 'x': expected dtype float32, got float16"),
    Case("int64", lambda: (torch.ones(2, 3, 64, 64, dtype=torch.int64),),
         "input 'x': expected dtype float32, got int64"),
    Case("bool", lambda: (torch.ones(2, 3, 64, 64, dtype=torch.bool),), "input 'x': expected dtype float32, got bool"),
    # wrong rank
    Case("rank0", lambda: (torch.tensor(1.0),), f"input 'x': expected rank 4 (shape {SHAPE}), got rank 0 (shape ())"),
    Case("rank3", lambda: (torch.randn(3, 64, 64),),
         f"input 'x': expected rank 4 (shape {SHAPE}), got rank 3 (shape (3, 64, 64))"),
    Case("rank5", lambda: (torch.randn(1, 2, 3, 64, 64),),
         f"input 'x': expected rank 4 (shape {SHAPE}), got rank 5 (shape (1, 2, 3, 64, 64))"),
    # dims outside the manifest's ranges, static dims that differ
    Case("empty_batch", lambda: (_x(0),), "input 'x': dim 0 (batch) must be in [1, 4], got 0"),
    Case("batch_above_max", lambda: (_x(5),), "input 'x': dim 0 (batch) must be in [1, 4], got 5"),
    Case("channels", lambda: (torch.randn(2, 4, 64, 64),), f"input 'x': dim 1 must be 3 (shape {SHAPE}), got 4"),
    Case("width", lambda: (torch.randn(2, 3, 64, 63),), f"input 'x': dim 3 must be 64 (shape {SHAPE}), got 63"),
    # not a tensor, or a tensor without ordinary data
    Case("string", lambda: ("x",), "input 'x': expected a tensor, got str"),
    Case("none", lambda: (None,), "input 'x': expected a tensor, got NoneType"),
    Case("numpy_scalar", lambda: (np.float32(1.0),), "input 'x': expected a tensor, got float32"),
    Case("sparse", lambda: (_x().to_sparse(),),
         "input 'x': expected a dense tensor with data, got a sparse_coo tensor"),
    Case("meta", lambda: (torch.empty(2, 3, 64, 64, device="meta"),),
         "input 'x': expected a dense tensor with data, got a meta tensor"),
    # numpy arrays: converted when torch can read them, named when it cannot
    Case("numpy_float64", lambda: (np.zeros((2, 3, 64, 64)),), "input 'x': expected dtype float32, got float64"),
    Case("numpy_big_endian", lambda: (_x().numpy().astype(">f4"),),
         "input 'x': expected dtype float32, got a numpy array of dtype '>f4', which torch cannot read"),
    Case("numpy_object", lambda: (np.empty((2, 3, 64, 64), dtype=object),),
         "input 'x': expected dtype float32, got a numpy array of dtype '|O', which torch cannot read"),
    Case("numpy_rank0", lambda: (np.array(1.0, dtype=np.float32),),
         f"input 'x': expected rank 4 (shape {SHAPE}), got rank 0 (shape ())"),
    # accepted layouts and containers: same numbers as eager
    Case("min_batch", lambda: (_x(1),), RESULT),
    Case("max_batch", lambda: (_x(4),), RESULT),
    Case("permuted_view", lambda: (torch.randn(2, 64, 64, 3).permute(0, 3, 1, 2),), RESULT),
    Case("channels_last", lambda: (_x().contiguous(memory_format=torch.channels_last),), RESULT),
    Case("expanded_stride0", lambda: (torch.randn(1, 3, 64, 64).expand(3, 3, 64, 64),), RESULT),
    Case("storage_offset", lambda: (torch.randn(6, 3, 64, 64)[3:5],), RESULT),
    Case("strided_slice", lambda: (torch.randn(2, 3, 64, 128)[..., ::2],), RESULT),
    Case("requires_grad", lambda: (_x().requires_grad_(),), RESULT),
    Case("numpy_float32", lambda: (_x().numpy(),), RESULT),
    Case("numpy_transposed", lambda: (np.random.randn(2, 64, 64, 3).astype(np.float32).transpose(0, 3, 1, 2),), RESULT),
    Case("numpy_negative_strides", lambda: (_x().numpy()[:, :, ::-1],), RESULT),
    Case("numpy_read_only", lambda: (_read_only(_x().numpy()),), RESULT),
]

EXECUTE_CASES = [
    Case("wrong_name", lambda: ({"y": _x()},),
         "execute() inputs: expected names ['x']; missing ['x'], unknown ['y']"),
    Case("extra_name", lambda: ({"x": _x(), "y": _x()},),
         "execute() inputs: expected names ['x']; missing [], unknown ['y']"),
    Case("empty_dict", lambda: ({},), "execute() inputs: expected names ['x']; missing ['x'], unknown []"),
    Case("case_differs", lambda: ({"X": _x()},),
         "execute() inputs: expected names ['x']; missing ['x'], unknown ['X']"),
    Case("mixed_key_types", lambda: ({"y": _x(), 0: _x()},),
         "execute() inputs: expected names ['x']; missing ['x'], unknown ['y', 0]"),
    Case("not_a_dict", lambda: ([_x()],), "execute() takes a dict of input name to tensor, got list"),
    Case("bad_value", lambda: ({"x": _x().double()},), "input 'x': expected dtype float32, got float64"),
    Case("good", lambda: ({"x": _x()},), RESULT),
]


def eager_input(value: Any) -> torch.Tensor:
    """What eager PyTorch is given for an accepted input."""
    return torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value.detach()
