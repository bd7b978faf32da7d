"""torch's real-tensor propagation, without the guards its own cross-check adds.

Where Python branches on a data-dependent size, capture exports again with the example's real
values beside the fake ones (``exporting._decided_by_example``). torch then cross-checks every
op's fake output against its real one (``fake_utils._check_fake_real_tensors``), and compares
their storage offsets with ``!=``. A view at a symbolic offset (the second half of a channel
``chunk`` at a dynamic H and W, in every YOLO C2f/C3k2 block) turns that comparison into a
guard which fixes the area at the example's (``16*((H-1)//4 + 1)*((W-1)//4 + 1) == 102400``),
though no code of the model branched: the artifact then refuses every other H and W.

The same comparison fixes the number of entries a ``nonzero`` found: its [n, 2] result is
column-major, so its second column (``i, j = torch.where(scores > t)``, ``nonzero().T``, every
multi-label NMS) is a view at offset ``n``, and ``n != 746`` asserts the example's count. The
padding then finds that selection's rows fixed ("the capture fixed the number of rows selected
here"), or torch itself fails (``PendingUnbackedSymbolNotFound``) where the view is made inside
the op (``where``'s ``unbind``).

For the duration of that export only (``offsets_unguarded``), the check compares an offset made
of input sizes only where the shape environment already knows the answer, and raises where it
knows they differ; an offset made of input sizes and such counts (symbols torch made for a size)
it compares with the example's values substituted, which asserts nothing. Everything else it
checks as torch does (an offset that data decides, such as a slice by a box's values, still stops
the trace there, naming its line). torch's own check is put back on exit, error or not; eager
PyTorch never runs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses import fake_utils
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, statically_known_true


@contextlib.contextmanager
def offsets_unguarded() -> Iterator[None]:
    original = fake_utils._check_fake_real_tensors

    def check(real_out: torch.Tensor, fake_out: Any, context: str = "", sizes: bool = True,
              strides: bool = False, storage_offset: bool = True, requires_grad: bool = True) -> None:
        offset = fake_out.storage_offset()
        counted = isinstance(offset, torch.SymInt) and _counts_only(offset)
        sized = isinstance(offset, torch.SymInt) and not free_unbacked_symbols(offset)
        if not (sized or counted) or not torch._C._has_storage(real_out):
            return original(real_out, fake_out, context, sizes, strides, storage_offset, requires_grad)
        if requires_grad and real_out.requires_grad != fake_out.requires_grad:
            raise fake_utils.MetadataMismatchError(f"{context} mismatched requires_grad-ness of outputs")
        differs = _differs(offset, real_out.storage_offset()) if counted else statically_known_true(
            offset != real_out.storage_offset())
        if storage_offset and differs:
            raise fake_utils.MetadataMismatchError(f"{context} mismatched storage offset")
        torch._prims.utils.compare_tensor_meta(
            real_out, fake_out, check_sizes=sizes, check_strides=strides, allow_rhs_unbacked=True
        )
        return None

    fake_utils._check_fake_real_tensors = check
    try:
        yield
    finally:
        fake_utils._check_fake_real_tensors = original


def _counts_only(offset: torch.SymInt) -> bool:
    """Whether the offset's data-dependent symbols are all sizes (a ``nonzero``'s count), none a value."""
    unbacked = free_unbacked_symbols(offset)
    return bool(unbacked) and unbacked <= offset.node.shape_env.size_like


def _differs(offset: torch.SymInt, real: int) -> bool:
    """``offset != real`` with the example's values put in for its symbols, asserting nothing;
    False where a value is unknown."""
    env = offset.node.shape_env
    known = {**env.backed_var_to_val, **env.real_tensor_prop_unbacked_vals}
    expr = offset.node.expr
    if not expr.free_symbols <= known.keys():
        return False
    return int(expr.xreplace({s: known[s] for s in expr.free_symbols})) != real
