"""The grammar of generated programs (``tv_programs``): one function per kind of statement.

Each returns the statement's lines and the variables it makes, or None where the program holds
nothing it applies to; ``Builder.apply`` then runs it on the probe and drops what eager refuses.
Variables whose dim 0 is a data-dependent selection (``rows``) take only what is valid at any
count of rows: row-wise work, columns, ``topk(x, min(n, k))``, ``x[:k]``, gathers, cats, NMS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from tests.passes.tv_composites import composite
from tests.passes.tv_programs import (
    THRESHOLDS,
    Builder,
    New,
    Program,
    Statement,
    Var,
    index_expr,
    inputs_strategy,
    shape_text,
)


def static(v: Var) -> bool:
    return v.rows is None


def floats(v: Var) -> bool:
    return v.float and v.value.dim() >= 1


def keyed(v: Var) -> bool:
    """Whether ``v`` has a key over its rows: it is 1-D, or 2-D with a column."""
    return v.float and v.det is None and (v.value.dim() == 1 or v.value.dim() == 2 and v.shape[1] > 0)


def key_of(v: Var, b: Builder) -> str:
    """A 1-D key over ``v``'s rows: ``v`` itself, or one of its columns."""
    if v.value.dim() == 1:
        return v.name
    return f"{v.name}[:, {b.integer(0, v.shape[1] - 1)}]"


# -- views -------------------------------------------------------------------------------------
def reshape(b: Builder) -> Statement | None:
    t = b.pick(lambda v: static(v) and v.value.dim() >= 1)
    if t is None:
        return None
    shape, name = list(t.shape), b.new_name()
    how = b.one_of(["merge", "split", "flat", "flatten", "unflatten"])
    rank = len(shape)
    if how == "flatten" and rank >= 2:
        start = b.integer(0, rank - 2)
        line = f"{name} = {t.name}.flatten({start}, {b.integer(start + 1, rank - 1)})"
    elif how in ("split", "unflatten") and any(s >= 4 for s in shape):
        dim = b.one_of([d for d, s in enumerate(shape) if s >= 4])
        factor = b.one_of([f for f in range(1, shape[dim] + 1) if shape[dim] % f == 0])
        if how == "unflatten":
            line = f"{name} = {t.name}.unflatten({dim}, ({factor}, -1))"
        else:
            new = shape[:dim] + [factor, shape[dim] // factor] + shape[dim + 1 :]
            line = f"{name} = {t.name}.{b.one_of(['view', 'reshape'])}({shape_text(new, _free(b, new))})"
    elif how == "merge" and rank >= 2:
        dim = b.integer(0, rank - 2)
        new = shape[:dim] + [shape[dim] * shape[dim + 1]] + shape[dim + 2 :]
        line = f"{name} = {t.name}.{b.one_of(['view', 'reshape'])}({shape_text(new, _free(b, new))})"
    else:
        line = f"{name} = {t.name}.{b.one_of(['view', 'reshape'])}(-1)"
    return [line], [New(name, alias=t.name, smooth=t.smooth, index=t.index if t.value.dim() == 1 else None)]


def _free(b: Builder, shape: list[int]) -> int | None:
    """Which size to write as -1; a dynamic batch's dim 0 mostly, so the view keeps it dynamic."""
    if any(i.dynamic for i in b.inputs):
        return 0
    return b.one_of([None, *range(len(shape))])


def permute(b: Builder) -> Statement | None:
    t = b.pick(lambda v: v.value.dim() >= 2)
    if t is None:
        return None
    rank, name = t.value.dim(), b.new_name()
    if rank - bool(t.rows) < 2:
        return None
    if b.draw(st.booleans()):
        i, j = b.draw(st.lists(st.integers(1 if t.rows else 0, rank - 1), min_size=2, max_size=2, unique=True))
        return [f"{name} = {t.name}.transpose({i}, {j})"], [New(name, alias=t.name, rows=t.rows, smooth=t.smooth)]
    order = list(b.draw(st.permutations(range(rank))))
    if t.rows:
        order = [0, *[d for d in order if d]]
    if order == sorted(order):
        return None
    return [f"{name} = {t.name}.permute({shape_text(order)})"], [New(name, alias=t.name, rows=t.rows, smooth=t.smooth)]


def unsqueeze(b: Builder) -> Statement | None:
    t = b.pick(lambda v: True)
    if t is None:
        return None
    rank, name = t.value.dim(), b.new_name()
    dim = b.integer(1, rank) if t.rows else b.integer(-rank - 1, rank)
    spelt = "..., None" if dim == -1 else "None"
    line = b.one_of([f"{name} = {t.name}.unsqueeze({dim})", f"{name} = {t.name}[{spelt}]"])
    if "None" in line and dim != -1 and t.rows:
        return None
    return [line], [New(name, alias=t.name, rows=t.rows, smooth=t.smooth)]


def select(b: Builder) -> Statement | None:
    t = b.pick(lambda v: v.value.dim() >= (2 if v.rows else 1) and v.value.numel() > 0)
    if t is None:
        return None
    rank, name = t.value.dim(), b.new_name()
    dim = b.integer(1 if t.rows else 0, rank - 1)
    size = t.shape[dim]
    if size == 0:
        return None
    index = b.integer(-size, size - 1)
    how = b.one_of(["index", "select", "unbind", "narrow"])
    if how == "select":
        line = f"{name} = {t.name}.select({dim}, {index})"
    elif how == "unbind":
        line = f"{name} = {t.name}.unbind({dim})[{index}]"
    elif how == "narrow":
        start = index % size
        line = f"{name} = {t.name}.narrow({dim}, {start}, {b.integer(1, size - start)})"
    else:
        line = f"{name} = {index_expr(t.name, dim, str(index), rank)}"
    return [line], [New(name, alias=t.name, rows=t.rows, smooth=t.smooth)]


def slice_(b: Builder) -> Statement | None:
    t = b.pick(lambda v: v.value.dim() >= 1)
    if t is None:
        return None
    rank, name = t.value.dim(), b.new_name()
    dim = b.integer(0, rank - 1)
    if t.rows and dim == 0:  # valid at any count; the count becomes another selection's
        item = b.one_of([f":{b.integer(1, 6)}", "1:", f"-{b.integer(1, 4)}:", "::2", ":-1"])
        new = New(name, alias=t.name, rows=next(b.selections), smooth=t.smooth)
        return [f"{name} = {t.name}[{item}]"], [new]
    size = t.shape[dim]
    start = b.one_of(["", *map(str, range(-size, size))])
    stop = b.one_of(["", *map(str, range(-size, size + 1))])
    step = b.one_of([1, 2, 3])
    item = f"{start}:{stop}" + (f":{step}" if step > 1 else "")
    chunk = b.integer(1, max(1, size))
    line = b.one_of([f"{name} = {index_expr(t.name, dim, item, rank)}"] * 2 + [
        f"{name} = {t.name}.chunk(2, {dim})[0]", f"{name} = {t.name}.split({chunk}, {dim})[-1]"])
    return [line], [New(name, alias=t.name, rows=t.rows, smooth=t.smooth)]


def expand(b: Builder) -> Statement | None:
    t = b.pick(lambda v: static(v) and 1 in v.shape)
    if t is None:
        return None
    shape, name = list(t.shape), b.new_name()
    dim = b.one_of([d for d, s in enumerate(shape) if s == 1])
    new = [b.integer(2, 4) if d == dim else -1 for d in range(len(shape))]
    line = b.one_of([f"{name} = {t.name}.expand({shape_text(new)})", f"{name} = {t.name}.squeeze({dim})"])
    return [line], [New(name, alias=t.name, smooth=t.smooth and "squeeze" in line)]


def copy(b: Builder) -> Statement | None:
    t = b.pick(lambda v: True)
    if t is None:
        return None
    name = b.new_name()
    # No type_as: torch.export's functionalization loses a write into the base of a view that
    # type_as returned (test_translation_validation.py, "type_as_of_a_view"), a capture bug, not a pass's.
    how = b.one_of(["clone()", "clone()", "contiguous()", "detach()", "clone(memory_format=torch.contiguous_format)",
                    f"to({t.value.dtype})"])
    fresh = how.startswith("clone")
    new = New(name, alias=None if fresh else t.name, rows=t.rows, smooth=t.smooth, det=None, index=t.index)
    return [f"{name} = {t.name}.{how}"], [new]


# -- values ------------------------------------------------------------------------------------
SMOOTH_UNARY = ["sigmoid()", "tanh()", "neg()", "exp()", "abs()", "* 2.5", "+ 0.75", "/ 3", "- 1.5", "pow(3)"]
TIED_UNARY = ["relu()", "clamp(min=0.2)", "clamp(-0.5, 0.5)", "round()", "floor()", "sign()"]
"""Continuous first: the last three jump, so a rounding in fp16 may move a value across a jump."""


def unary(b: Builder) -> Statement | None:
    t = b.pick(floats)
    if t is None:
        return None
    op, name = b.one_of(SMOOTH_UNARY * 2 + (TIED_UNARY if b.decide else TIED_UNARY[:3])), b.new_name()
    text = f"{t.name}.{op}" if op[0].isalpha() else f"{t.name} {op}"
    return [f"{name} = {text}"], [New(name, rows=t.rows, smooth=t.smooth and op in SMOOTH_UNARY)]


def binary(b: Builder) -> Statement | None:
    t = b.pick(floats)
    if t is None:
        return None
    u = b.pick(lambda v: v.float and v.rows == t.rows and _broadcasts(t, v))
    if u is None:
        return None
    op, name = b.one_of(["+", "-", "*", "maximum", "minimum", "@"]), b.new_name()
    if op == "@":
        if t.rows or u.rows or t.value.dim() < 2 or u.value.dim() < 2:
            return None
        u_text = f"{u.name}.transpose(-1, -2)" if u.shape[-1] == t.shape[-1] else u.name
        line = f"{name} = {t.name} @ {u_text}"
    elif op in ("maximum", "minimum"):
        line = f"{name} = torch.{op}({t.name}, {u.name})"
    else:
        line = f"{name} = {t.name} {op} {u.name}"
    return [line], [New(name, rows=t.rows, smooth=t.smooth and u.smooth and t.root != u.root)]


def _broadcasts(t: Var, u: Var) -> bool:
    try:
        torch.broadcast_shapes(t.shape, u.shape)
    except RuntimeError:
        return False
    return u.value.dim() <= t.value.dim() or not t.rows


def reduce(b: Builder) -> Statement | None:
    """Along any dim; along selected rows too, now and then, which the padding must refuse."""
    t = b.pick(floats)
    if t is None:
        return None
    rank, name = t.value.dim(), b.new_name()
    across = bool(t.rows) and (rank == 1 or b.integer(0, 3) == 0)
    dim = 0 if across else b.integer(1, rank - 1) if t.rows else b.integer(-rank, rank - 1)
    op = b.one_of(["sum", "mean", "amax", "amin", "softmax", "log_softmax", "cumsum", "logsumexp"])
    along = op in ("softmax", "log_softmax", "cumsum")
    keep = "" if along else f", keepdim={b.draw(st.booleans())}"
    rows = t.rows if not across or along else None
    line = f"{name} = {t.name}.{op}({dim}{keep})"
    return [line], [New(name, rows=rows, smooth=t.smooth and op not in ("amax", "amin"))]


def max_dim(b: Builder) -> Statement | None:
    t = b.pick(lambda v: floats(v) and v.smooth and v.value.dim() >= (2 if v.rows else 1) and v.value.numel() > 0)
    if t is None:
        return None
    rank = t.value.dim()
    dim = b.integer(1, rank - 1) if t.rows else b.integer(-rank, rank - 1)
    if t.shape[dim] == 0:
        return None
    values, index = b.new_name(), b.new_name()
    b.decisions = True
    if b.draw(st.booleans()):
        return [f"{index} = {t.name}.argmax({dim})"], [New(index, rows=t.rows, smooth=False)]
    made = [New(values, rows=t.rows), New(index, rows=t.rows, smooth=False)]
    return [f"{values}, {index} = {t.name}.max({dim})"], made


def cast(b: Builder) -> Statement | None:
    t = b.pick(lambda v: v.value.dim() >= 1)
    if t is None:
        return None
    name = b.new_name()
    if t.value.dtype == torch.bool:
        reduced = "any(-1)" if t.value.dim() > 1 + bool(t.rows) else "float()"
        op = b.one_of(["float()", "long()", "logical_not()", reduced])
    elif t.float:
        b.decisions = True
        op = b.one_of([f"gt({b.one_of(THRESHOLDS)})", f"lt({b.one_of(THRESHOLDS)})", "mul(3).long()", "to(torch.int32)",
                       "half().float()", "to(torch.float32)", "float()"])
        if op in ("half().float()",):
            b.decisions = True
    else:
        op = b.one_of(["float()", "add(1)", "remainder(3)", "to(torch.int32)", "long()"])
    smooth = op in ("to(torch.float32)", "float()") and t.float and t.smooth
    alias = t.name if op in ("to(torch.float32)", "float()") and t.float else None
    return [f"{name} = {t.name}.{op}"], [New(name, alias=alias, rows=t.rows, smooth=smooth)]


def where(b: Builder) -> Statement | None:
    t = b.pick(floats)
    if t is None:
        return None
    name = b.new_name()
    m = b.pick(lambda v: v.value.dtype == torch.bool and v.rows == t.rows and _broadcasts(t, v))
    cond = m.name if m is not None and b.draw(st.booleans()) else f"{t.name} > {b.one_of(THRESHOLDS)}"
    u = b.pick(lambda v: v.float and v.rows == t.rows and _broadcasts(t, v))
    other = u.name if u is not None and b.draw(st.booleans()) else b.one_of(["0.0", "-1.0", "float('-inf')"])
    b.decisions = True
    return [f"{name} = torch.where({cond}, {t.name}, {other})"], [New(name, rows=t.rows, smooth=False)]


def cat(b: Builder) -> Statement | None:
    t = b.pick(lambda v: v.value.dim() >= 1)
    if t is None:
        return None
    name, rank = b.new_name(), t.value.dim()
    dim = b.integer(0, rank - 1)

    def fits(v: Var) -> bool:
        same = v.value.dim() == rank and v.value.dtype == t.value.dtype
        if not same or any(v.shape[d] != t.shape[d] for d in range(1, rank) if d != dim):
            return False
        if dim == 0:
            return True  # selected rows of any count join on dim 0
        return v.rows == t.rows and v.shape[0] == t.shape[0]

    u = b.pick(fits)
    if u is None:
        return None
    how = "stack" if dim and u.shape == t.shape and not t.rows and b.draw(st.booleans()) else "cat"
    rows = next(b.selections) if dim == 0 and (t.rows or u.rows) else t.rows
    smooth = t.smooth and u.smooth and t.root != u.root
    return [f"{name} = torch.{how}([{t.name}, {u.name}], {dim})"], [New(name, rows=rows, smooth=smooth)]


def sort(b: Builder) -> Statement | None:
    t = b.pick(lambda v: floats(v) and v.smooth and static(v))
    if t is None:
        return None
    rank, values, index = t.value.dim(), b.new_name(), b.new_name()
    dim = b.integer(-rank, rank - 1)
    b.decisions = True
    unique = t.value.dim() == 1
    how = b.one_of(["sort", "argsort", "topk", "gather"])
    if how == "argsort":
        return [f"{index} = {t.name}.argsort({dim}, descending={b.draw(st.booleans())})"], [
            New(index, smooth=False, index=t.shape[0] if unique else None)]
    if how == "topk":
        k = b.integer(1, t.shape[dim]) if t.shape[dim] else 0
        line = f"{values}, {index} = {t.name}.topk({k}, {dim}, largest={b.draw(st.booleans())})"
        return [line], [New(values, smooth=True), New(index, smooth=False, index=t.shape[0] if unique else None)]
    if how == "gather":
        u = b.pick(lambda v: v.float and static(v) and v.shape == t.shape)
        source = u.name if u is not None else t.name
        return [f"{values} = torch.gather({source}, {dim}, {t.name}.argsort({dim}))"], [New(values, smooth=False)]
    line = f"{values}, {index} = {t.name}.sort({dim}, descending={b.draw(st.booleans())}, stable=True)"
    return [line], [New(values, smooth=True), New(index, smooth=False, index=t.shape[0] if unique else None)]


def take(b: Builder) -> Statement | None:
    """``t[i]`` by a 1-D index of distinct values: a permutation or a selection of rows."""
    i = b.pick(lambda v: v.index is not None and v.value.dim() == 1)
    if i is None:
        return None
    t = b.pick(lambda v: v.value.dim() >= 1 and static(v) and v.shape[0] >= (i.index or 0))
    if t is None:
        return None
    name = b.new_name()
    line = b.one_of([f"{name} = {t.name}[{i.name}]", f"{name} = {t.name}.index_select(0, {i.name})"])
    return [line], [New(name, rows=i.rows, smooth=t.smooth)]


# -- writes ------------------------------------------------------------------------------------
def write(b: Builder) -> Statement | None:
    """An in-place write into a fresh tensor or a view of one (never into an input)."""
    y = b.pick(lambda v: b.writable(v) and v.value.dim() >= 1 and v.value.numel() > 0)
    if y is None:
        return None
    how = b.one_of(["item", "item", "method", *(["index", "mask"] if b.decide else [])])
    lines = {"item": _write_item, "method": _write_method, "index": _write_index, "mask": _write_mask}[how](b, y)
    if lines is None:
        return None
    b.wrote(y)
    return lines, []


def clone_write(b: Builder) -> Statement | None:
    """YOLOv5's xywh2xyxy: a clone, then columns of it written from columns of its source, which
    the later writes read again (a clone dropped as a no-op moves the writes onto the source)."""
    t = b.pick(lambda v: floats(v) and v.value.dim() >= (2 if v.rows else 1) and v.shape[-1] >= 2)
    if t is None:
        return None
    name, rank, size = b.new_name(), t.value.dim(), t.shape[-1]
    lines = [f"{name} = {t.name}.clone()"]
    for _ in range(b.integer(1, 4)):
        i, j, k = (b.integer(0, size - 1) for _ in range(3))
        column = index_expr(t.name, rank - 1, "{}", rank)
        value = f"{column.format(j)} {b.one_of(['-', '+'])} {column.format(k)} / 2"
        lines.append(f"{index_expr(name, rank - 1, str(i), rank)} = {value}")
    if b.draw(st.booleans()):
        lines.append(f"{name}.{b.one_of(['add_(1.0)', 'mul_(0.5)', 'clamp_(min=0.0)'])}")
    return lines, [New(name, rows=t.rows, smooth=False)]


def _value_for(b: Builder, y: Var, shape: tuple[int, ...]) -> str:
    """A value that broadcasts to ``shape``: a constant, or an expression of variables."""
    fits = [v for v in b.vars.values() if v.det is None and v.rows == y.rows and v.value.dtype == y.value.dtype
            and v.value.dim() <= len(shape) and _broadcast_to(v.shape, shape)]
    if not fits or not b.draw(st.booleans()):
        return b.one_of(["0.0", "1.5", "-2.0"]) if y.float else b.one_of(["0", "1"])
    u = b.draw(st.sampled_from(fits))
    if not y.float:
        return u.name
    w = b.draw(st.sampled_from(fits))
    return b.one_of([u.name, f"{u.name} * 2", f"{u.name} - {w.name} / 2", f"{u.name} + {w.name} / 2"])


def _broadcast_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


def _write_item(b: Builder, y: Var) -> list[str] | None:
    """``y[:, i] = ...``, ``y[a:b] += ...``: a select or a slice of ``y`` written."""
    rank, across = y.value.dim(), bool(y.rows) or any(i.dynamic for i in b.inputs)  # not along a batch
    dim = b.integer(1 if across else 0, rank - 1) if rank > 1 or not across else None
    if dim is None or y.shape[dim] == 0:
        return None
    size = y.shape[dim]
    if b.draw(st.booleans()):
        item = str(b.integer(-size, size - 1))
        shape = y.shape[:dim] + y.shape[dim + 1 :]
    else:
        start = b.integer(0, size - 1)
        item = f"{start}:{b.integer(start + 1, size)}"
        shape = y.shape[:dim] + (len(range(size)[slice(start, int(item.split(':')[1]))]),) + y.shape[dim + 1 :]
    op = b.one_of(["=", "=", "+=", "*="])
    return [f"{index_expr(y.name, dim, item, rank)} {op} {_value_for(b, y, shape)}"]


def _write_method(b: Builder, y: Var) -> list[str] | None:
    u = b.pick(lambda v: v.rows == y.rows and v.value.dtype == y.value.dtype and _broadcast_to(v.shape, y.shape))
    other = u.name if u is not None else "1.0"
    ops = [f"add_({other})", f"copy_({other})", "mul_(0.5)", "zero_()", "fill_(2.0)"]
    if y.float:
        ops += ["clamp_(min=-0.2)", "sigmoid_()", f"sub_({other}, alpha=0.5)"]
    op = b.one_of(ops)
    if op.startswith("add_") and b.draw(st.booleans()):
        return [f"{y.name} += {other}"]
    return [f"{y.name}.{op}"]


def _write_index(b: Builder, y: Var) -> list[str] | None:
    """``y[idx] = ...``, ``y[idx] += ...``, ``index_put_`` at computed indices of distinct values."""
    i = b.pick(lambda v: v.index is not None and v.value.dim() == 1 and v.index <= y.shape[0])
    if i is None or y.rows is not None:  # the rows y has at other inputs may be fewer than i's bound
        return None
    b.decisions = True
    source = f"{y.name}[{i.name}]"
    value = b.one_of([f"{source} * 2", f"{source} + 1", b.one_of(["0.0", "3.0"]) if y.float else "0"])
    if not y.float:
        value = source.replace("* 2", "+ 1") if "* 2" in value else value
    how = b.one_of(["set", "add", "put", "accumulate"])
    if how == "set":
        return [f"{y.name}[{i.name}] = {value}"]
    if how == "add":
        return [f"{y.name}[{i.name}] += {value}"]
    accumulate = how == "accumulate"
    full = f"{value} + torch.zeros_like({source})" if value[0].isdigit() else value
    return [f"{y.name}.index_put_(({i.name},), {full}, accumulate={accumulate})"]


def _write_mask(b: Builder, y: Var) -> list[str] | None:
    m = b.pick(lambda v: v.value.dtype == torch.bool and v.rows == y.rows and 1 <= v.value.dim() <= y.value.dim()
               and v.shape == y.shape[: v.value.dim()])
    b.decisions = True
    if m is None:
        if not y.float:
            return None
        return [f"{y.name}[{y.name} > {b.one_of(THRESHOLDS)}] = {b.one_of(['0.0', '-1.0'])}"]
    how = b.one_of(["set", "scale", "fill"])
    if how == "fill" and m.shape == y.shape:
        return [f"{y.name}.masked_fill_({m.name}, {b.one_of(['0', '1']) if not y.float else '-3.0'})"]
    if how == "scale":
        return [f"{y.name}[{m.name}] *= 2" if y.float else f"{y.name}[{m.name}] += 1"]
    return [f"{y.name}[{m.name}] = {'0.5' if y.float else '7'}"]


# -- selections (data-dependent sizes) -----------------------------------------------------------
def selection(b: Builder) -> Statement | None:
    """Rows kept by a mask: ``t[mask]``, ``nonzero``, ``where(cond)[0]``, ``masked_select``."""
    t = b.pick(lambda v: v.value.dim() in (1, 2) and (v.rows is not None or v.shape[0] >= 4))
    if t is None:
        return None
    keys = [v for v in b.vars.values()
            if keyed(v) and v.rows == t.rows and (v.rows is not None or v.shape[0] == t.shape[0])]
    if not keys:
        return None
    key = key_of(b.draw(st.sampled_from(keys)), b)
    cond = f"{key} {b.one_of(['>', '<'])} {b.one_of(THRESHOLDS)}"
    name, index, rows = b.new_name(), b.new_name(), next(b.selections)
    b.decisions = True
    how = b.one_of(["mask", "mask", "where", "nonzero", "masked_select", "mask_var"])
    if how == "where" or how == "nonzero" and t.rows is None:
        found = f"torch.where({cond})[0]" if how == "where" else f"torch.nonzero({cond}).squeeze(1)"
        bound = t.shape[0] if t.rows is None else None
        gather = b.one_of([f"{t.name}[{index}]", f"{t.name}.index_select(0, {index})"])
        return [f"{index} = {found}", f"{name} = {gather}"], [
            New(index, rows=rows, smooth=False, index=bound), New(name, rows=rows, smooth=t.smooth)]
    if how == "masked_select" and t.float:
        return [f"{name} = {t.name}.masked_select({t.name} > {b.one_of(THRESHOLDS)})"], [
            New(name, rows=rows, smooth=t.smooth)]
    if how == "mask_var":
        return [f"{index} = {cond}", f"{name} = {t.name}[{index}]"], [
            New(index, rows=t.rows, smooth=False), New(name, rows=rows, smooth=t.smooth)]
    return [f"{name} = {t.name}[{cond}]"], [New(name, rows=rows, smooth=t.smooth)]


def top_rows(b: Builder) -> Statement | None:
    """``topk(key, min(n, k))`` over selected rows, then their gather."""
    t = b.pick(lambda v: v.rows is not None and v.value.dim() in (1, 2))
    if t is None:
        return None
    keys = [v for v in b.vars.values() if keyed(v) and v.rows == t.rows and v.smooth]
    if not keys:
        return None
    key = key_of(b.draw(st.sampled_from(keys)), b)
    values, index, name, rows = b.new_name(), b.new_name(), b.new_name(), next(b.selections)
    k = b.integer(1, 12)
    b.decisions = True
    return [f"{values}, {index} = {key}.topk(min({t.name}.shape[0], {k}), largest={b.draw(st.booleans())})",
            f"{name} = {t.name}[{index}]"], [
        New(values, rows=rows), New(index, rows=rows, smooth=False), New(name, rows=rows, smooth=t.smooth)]


def nms(b: Builder) -> Statement | None:
    """Boxes and scores from the columns of ``t``, an NMS, its kept rows (once per program)."""
    if b.detections:
        return None
    t = b.pick(lambda v: v.float and v.value.dim() == 2 and v.shape[1] >= 5 and v.smooth)
    if t is None:
        return None
    boxes, scores, labels, keep = (b.new_name() for _ in range(4))
    kept = {role: b.new_name() for role in ("boxes", "scores", "labels", "keep")}
    iou = b.one_of([0.3, 0.5, 0.7])
    lines = [
        f"{boxes} = torch.cat([{t.name}[:, 0:2] * 4, {t.name}[:, 0:2] * 4 + {t.name}[:, 2:4].abs() * 3 + 0.5], 1)",
        f"{scores} = {t.name}[:, 4]{b.one_of(['.sigmoid()', '', ' * 2'])}",
    ]
    batched = t.shape[1] >= 6 and b.draw(st.booleans())
    if batched:
        lines.append(f"{labels} = {b.one_of([f'({t.name}[:, 5] > 0).long()', f'{t.name}[:, 4:].argmax(1)'])}")
        lines.append(f"{keep} = ops.batched_nms({boxes}, {scores}, {labels}, {iou})")
    else:
        lines.append(f"{keep} = ops.nms({boxes}, {scores}, {iou})")
    if b.draw(st.booleans()):
        lines.append(f"{keep} = {keep}[:{b.integer(1, 10)}]")
    roles = ["boxes", "scores"] + (["labels"] if batched else []) + (["keep"] if b.draw(st.booleans()) else [])
    sources = {"boxes": boxes, "scores": scores, "labels": labels, "keep": keep}
    for role in roles:
        lines.append(f"{kept[role]} = {keep}" if role == "keep" else f"{kept[role]} = {sources[role]}[{keep}]")
    b.decisions = True
    made = [New(boxes, rows=t.rows), New(scores, alias=t.name, rows=t.rows), New(keep, rows=next(b.selections))]
    return lines, made + [
        New(kept[r], det=r) for r in roles]


# -- layers and what the ncnn respellings look for -----------------------------------------------
def layer(b: Builder) -> Statement | None:
    how = b.one_of(["linear", "conv", "pool", "pool", "attention", "attention", "dropout"])
    t = b.pick(lambda v: floats(v) and static(v) and (how in ("linear", "dropout") or v.value.dim() == 4))
    if t is None:
        return None
    name, rank = b.new_name(), t.value.dim()
    if how == "linear":
        line = f"{name} = F.linear({t.name}, {b.weight((b.one_of([3, 4, 6]), t.shape[-1]))})"
    elif how == "conv" and rank == 4:
        line = f"{name} = F.conv2d({t.name}, {b.weight((b.one_of([2, 4]), t.shape[1], 3, 3))}, padding=1)"
    elif how == "pool" and rank == 4:
        h, w = t.shape[-2:]
        line = f"{name} = " + b.one_of([
            f"F.avg_pool2d({t.name}, ({h}, {w}))", f"F.avg_pool2d({t.name}, ({h + 2}, {w + 1}), ceil_mode=True)",
            f"F.adaptive_avg_pool2d({t.name}, 1)", f"F.max_pool2d({t.name}, 2)",
            f"F.avg_pool2d({t.name}, 2, divisor_override=3)"])
    elif how == "attention" and rank == 4:
        length = t.shape[2]
        mask = b.one_of(["None", f"torch.ones({length}, {length}, dtype=torch.bool)",
                         f"torch.arange({length})[None, :] >= 0", f"torch.zeros({length}, {length})",
                         *([f"({t.name}[..., :1] > 0) | torch.eye({length}, dtype=torch.bool)"] if b.decide else [])])
        line = f"{name} = F.scaled_dot_product_attention({t.name}, {t.name} * 0.5, {t.name}, attn_mask={mask})"
    elif how == "dropout":
        line = f"{name} = F.dropout({t.name}, 0.25, self.training)"
    else:
        return None
    if how == "dropout":  # eval-mode dropout returns its input itself: a write through it writes the input
        return [line], [New(name, alias=t.name, smooth=t.smooth)]
    return [line], [New(name, smooth=False)]


def padded_copy(b: Builder) -> Statement | None:
    """A buffer filled, then an image copied into its top-left corner (torchvision's batch_images)."""
    t = b.pick(lambda v: floats(v) and static(v) and v.value.dim() >= 2)
    if t is None:
        return None
    name = b.new_name()
    bigger = [s + b.integer(0, 2) for s in t.shape]
    make = b.one_of([f"{t.name}.new_zeros(({shape_text(bigger)}))", f"{t.name}.new_full(({shape_text(bigger)}), 0.5)",
                     f"torch.zeros({shape_text(bigger)})"])
    corner = ", ".join(f":{s}" for s in t.shape)
    return [f"{name} = {make}", f"{name}[{corner}].copy_({t.name})"], [New(name, smooth=False)]


def constant(b: Builder) -> Statement | None:
    """Values made in forward from sizes alone (an anchor grid), added to a variable."""
    t = b.pick(lambda v: floats(v) and static(v))
    if t is None:
        return None
    name, size = b.new_name(), t.shape[-1]
    grid = b.one_of([f"torch.arange({size}, dtype=torch.float32)", f"torch.arange({size}).float() * 0.5",
                     f"torch.full(({size},), 0.25)", f"torch.linspace(0, 1, {size})"])
    if t.value.dim() >= 2 and b.draw(st.booleans()):
        rows = t.shape[-2]
        grid = (f"torch.stack(torch.meshgrid(torch.arange({rows}), torch.arange({size}), indexing='ij'), 0)"
                f".float().sum(0)")
    return [f"{name} = {t.name} + {grid}"], [New(name, smooth=False)]


STATEMENTS: dict[str, Callable[[Builder], Statement | None]] = {
    "reshape": reshape, "permute": permute, "unsqueeze": unsqueeze, "select": select, "slice": slice_,
    "expand": expand, "copy": copy, "unary": unary, "binary": binary, "reduce": reduce, "max": max_dim,
    "cast": cast, "where": where, "cat": cat, "sort": sort, "take": take, "write": write,
    "selection": selection, "top_rows": top_rows, "nms": nms, "layer": layer, "padded_copy": padded_copy,
    "constant": constant, "clone_write": clone_write, "composite": composite,
}
WEIGHTS = {"write": 6, "copy": 4, "reshape": 3, "permute": 3, "select": 2, "slice": 3, "selection": 3, "top_rows": 3,
           "nms": 3, "unary": 2, "binary": 2, "layer": 2}
VIEWS = ("reshape", "permute", "unsqueeze", "select", "slice", "expand", "copy")
VALUES = ("unary", "binary", "reduce", "max", "cast", "where", "cat", "sort", "take")
FAMILIES: dict[str, tuple[tuple[str, ...], bool | None]] = {
    "aliasing": ((*VIEWS, *VALUES, "write", "clone_write"), None),
    "detection": (("selection", "top_rows", "nms", "write", "clone_write", "slice", "select", "copy", "unary", "binary",
                   "reduce", "cat", "cast", "where", "take", "max"), False),
    "layers": (("layer", "layer", "layer", "padded_copy", "constant", *VIEWS, "unary", "binary", "max", "write"),
               False),
    "dynamic_batch": ((*VIEWS, *VALUES, "write", "clone_write", "layer", "constant", "selection", "nms"), True),
    "composites": (("composite", "composite", "composite", "slice", "select", "unary", "binary", "reduce"), None),
}
"""Kinds of statements and whether the batch is dynamic: one family a test, so that each draws
programs dense in what its passes rewrite (views and writes; selections, top-k and NMS; layers,
attention masks and constant grids; reshapes at a dynamic batch)."""
DECISION_FREE = ("reshape", "permute", "unsqueeze", "select", "slice", "expand", "copy", "unary", "binary", "reduce",
                 "cat", "layer", "padded_copy", "constant", "write")
"""Statements for fp16 (``Program.decisions`` stays False: writes by index or mask are left out)."""


@st.composite
def programs(draw: Callable[[Any], Any], kinds: tuple[str, ...] = tuple(STATEMENTS), dynamic: bool | None = None,
             steps: tuple[int, int] = (4, 10)) -> Program:
    """A program of ``steps`` statements drawn from ``kinds`` (more of those in ``WEIGHTS``)."""
    b = Builder(draw, draw(inputs_strategy(dynamic)))
    b.decide = kinds != DECISION_FREE
    pool = [k for k in kinds for _ in range(WEIGHTS.get(k, 1))]
    wanted = draw(st.integers(*steps))
    made = 0
    for _ in range(wanted * 3):
        if made == wanted:
            break
        made += b.apply(STATEMENTS[draw(st.sampled_from(pool))](b))
    return b.finish()
