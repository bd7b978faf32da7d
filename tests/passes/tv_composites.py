"""Statements of composite ops, respelled activations and slices to a negative end, for the
translation validation's ``composites`` family: what ``composite_ops``, ``unfused_activations``,
``dynamic_slices`` and the reductions of ``comparisons_as_arithmetic`` rewrite on ncnn."""

from __future__ import annotations

from tests.passes.tv_programs import Builder, New, Statement, Var


def _ok(v: Var) -> bool:
    return v.float and v.rows is None and v.value.dim() >= 1 and v.value.numel() > 0


def composite(b: Builder) -> Statement | None:
    t = b.pick(_ok)
    if t is None:
        return None
    rank, name = t.value.dim(), b.new_name()
    d = b.integer(0, rank - 1)
    other = b.integer(0, rank - 1)
    forms = {
        "softsign": (f"F.softsign({t.name}) + F.tanhshrink({t.name})", True),
        "neighbours": (f"{t.name}.narrow({d}, 1, {t.name}.shape[{d}] - 1) - {t.name}.narrow({d}, 0, "
                       f"{t.name}.shape[{d}] - 1)", True),
    }
    if b.decide:
        forms["any"] = (f"({t.name} > 0.5).any({d}).float() + ({t.name} < 0.9).all({d}).float()", False)
        forms["count"] = (f"torch.count_nonzero({t.name} > 0.25, dim={d}).float()", False)
    forms.update({
        "softmin": (f"F.softmin({t.name}, {d})", True),
        "std": (f"{t.name}.std({d})", False), "var": (f"{t.name}.var({d}, correction=0)", True),
        "var_mean": (f"torch.var_mean({t.name}, {d}, keepdim=True)[{b.integer(0, 1)}]", True),
        "aminmax": (f"{t.name}.aminmax(dim={d})[{b.integer(0, 1)}]", False),
        "diff": (f"torch.diff({t.name}, dim={d})", True),
        "tile": (f"{t.name}.tile(({b.integer(1, 2)}, 2))", True),
        "interleave": (f"{t.name}.repeat_interleave(2, dim={d})", True),
        "addcmul": (f"torch.addcmul({t.name}, {t.name}, {t.name}.sigmoid(), value=0.5)", True),
        "l1": (f"F.l1_loss({t.name}, {t.name}.flip({d}), reduction='none')", True),
        "huber": (f"F.huber_loss({t.name}, {t.name}.flip({d}) * 2, reduction='none', delta=0.5)", False),
    })
    if rank >= 2 and d != other:  # noqa: PLR2004 - a plane to turn in
        forms["rot90"] = (f"torch.rot90({t.name}, {b.integer(1, 3)}, ({d}, {other}))", True)
    form = b.one_of(list(forms))  # hypothesis draws the first ones most: those of passes with one form first
    text, smooth = forms[form]
    if form in ("any", "count"):
        b.decisions = True
    return [f"{name} = {text}"], [New(name, smooth=smooth and t.smooth)]
