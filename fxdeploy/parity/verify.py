"""After lowering: run the artifact at the min, opt and max of every dynamic dim, against eager.

Eager means the model itself (with the method substitutions that capture used) whenever the
deployed structure can be compared with it; where capture needed dynamo-only function
substitutions, the reference is the captured graph run by PyTorch. A mismatch is an error that
names the input shapes, never a silent success.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import guards as guard_mod
from fxdeploy.artifact import structure
from fxdeploy.artifact.dims import size_of
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.errors import LoweringError, user_stacklevel
from fxdeploy.parity import decision_edges
from fxdeploy.parity.closeness import check_close
from fxdeploy.parity.compare_rows import compare_rows
from fxdeploy.parity.coupled_images import coupling
from fxdeploy.parity.referee import refereed
from fxdeploy.parity.rows import RowsSpec
from fxdeploy.stages import stage

MAX_CHECKED = 4096
"""An unbounded (or huge) max is checked at min(max, 2 * opt) instead; the manifest says so."""


def check_sizes(dims: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """(label, {dim: size}) for the example shape (empty sizes), then min, opt and max."""
    if not dims:
        return [("example", {})]
    points: list[tuple[str, dict[str, int]]] = [("example", {})]
    for label in ("min", "opt", "max"):
        sizes = {}
        for name, r in dims.items():
            value = r.max if label == "max" else getattr(r, label)
            if label == "max" and value > MAX_CHECKED:
                value = max(r.min, min(2 * r.opt, MAX_CHECKED))
            sizes[name] = value
        if all(sizes != s for _, s in points):
            points.append((label, sizes))
    return points


def resized(
    examples: list[torch.Tensor], shapes: list[list[int | str]], sizes: dict[str, int], seed: int
) -> list[torch.Tensor]:
    """Random inputs at ``sizes`` made from the example (``_like``: images stay images)."""
    if not sizes:
        return examples
    generator = torch.Generator().manual_seed(seed)
    out = []
    for example, shape in zip(examples, shapes, strict=True):
        dims = [size_of(d, sizes) for d in shape]
        out.append(_like(example, dims, generator))
    return out


def _like(example: torch.Tensor, dims: list[int], generator: torch.Generator) -> torch.Tensor:
    """Floats anywhere in the example's range; integers drawn from the example's own values, as
    an integer input is often a set (a divisor that is never 0, class ids, token ids), not a range.
    A bool input, or a float one holding two values (0 and -inf, 0 and 1), is a mask: each of its
    two values is drawn about as often as in the example, but never less than 1 time in 8. A mask
    drawn half padding pads whole rows of a short sequence, where a model may refuse to run."""
    two = (False, True) if example.dtype == torch.bool else _two_values(example)
    if two is not None:
        low, high = two
        share = (example == high).double().mean().item() if example.numel() else 0.5
        drawn = torch.rand(dims, generator=generator, dtype=torch.float64) < min(max(share, 1 / 8), 7 / 8)
        return torch.where(drawn, torch.tensor(high, dtype=example.dtype), torch.tensor(low, dtype=example.dtype))
    if not example.dtype.is_floating_point:
        flat = example.flatten() if example.numel() else torch.tensor([0, 1], dtype=example.dtype)
        return flat[torch.randint(0, flat.numel(), (math.prod(dims),), generator=generator)].reshape(dims)
    low, high = (example.min().item(), example.max().item()) if example.numel() else (0, 1)
    if high <= low:
        return torch.full(dims, low, dtype=example.dtype)
    return (torch.rand(dims, generator=generator) * (high - low) + low).to(example.dtype)


def _two_values(example: torch.Tensor) -> tuple[float, float] | None:
    """(low, high) where a float tensor holds exactly two distinct values, else None; in one pass
    over it, not a sort (an image batch is millions of values)."""
    if not example.dtype.is_floating_point or example.numel() < 2:
        return None
    flat = example.flatten()
    if torch.unique(flat[:4096]).numel() > 2:  # most inputs tell at once
        return None
    others = flat[flat != flat[0]]
    if others.numel() == 0 or bool(flat[0].isnan()) or bool((others != others[0]).any()):
        return None  # one value, a NaN (never equal to itself), or a third value
    return tuple(sorted((flat[0].item(), others[0].item())))  # type: ignore[return-value]


@dataclass(frozen=True)
class Checked:
    """One check's outcome: the largest error, and how often each excuse was used
    (fxdeploy.parity.excuses: tie, score_threshold, iou_threshold; mask_iou)."""

    max_abs_error: float
    excused: dict[str, int] = field(default_factory=dict)


def compare(
    label: str, inputs: list[torch.Tensor], got: Any, want: Any, atol: float, target: str,
    rows: Sequence[RowsSpec | bool | int | None] | None = None, precision: str = "fp32",
    example_shapes: Sequence[tuple[int, ...] | None] = (),
) -> Checked:
    """Max error over tensor leaves; raise LoweringError naming the shapes on any mismatch.

    Leaves that hold rows (``rows``: per leaf its RowsSpec, from the manifest's output leaves;
    True or an int, the rows dim, for a bare flag) are compared as rows: paired per image by label
    and IoU (fxdeploy.parity.compare_rows), every field checked on the pairs, and only what float
    noise can flip excused (fxdeploy.parity.excuses). Under fp16/bf16 they are not compared here,
    since a score that crosses a threshold legitimately changes the set; the reduced-precision
    tolerance for detections is documented and tested instead. ``example_shapes``: the artifact's
    output shapes at the example, to say so when a size stayed there (fixed at capture).
    """
    shapes = [tuple(x.shape) for x in inputs]
    got_leaves, _ = pytree.tree_flatten(structure.dataclasses_to_dicts(got))
    want_leaves, _ = pytree.tree_flatten(structure.dataclasses_to_dicts(want))
    where = f"the {target} artifact at the {label} input shapes {shapes}"
    if len(got_leaves) != len(want_leaves):
        raise LoweringError(f"{where} returns {len(got_leaves)} values, eager {len(want_leaves)}")
    given = list(rows) if rows is not None and len(rows) == len(want_leaves) else [None] * len(want_leaves)
    specs = [_spec(flag, ref) for flag, ref in zip(given, want_leaves, strict=True)]
    worst = 0.0
    row_leaves: dict[int, tuple[tuple[int, ...], RowsSpec]] = {}
    counts: dict[int, RowsSpec] = {}
    for index, (have, ref, spec) in enumerate(zip(got_leaves, want_leaves, specs, strict=True)):
        if not isinstance(ref, torch.Tensor):
            if have != ref:
                raise LoweringError(f"{where}: output #{index} is {have!r}, eager gives {ref!r}")
            continue
        fixed = example_shapes[index] if index < len(example_shapes) else None
        _check_shape(have, ref, spec, f"{where}: output #{index}", fixed)
        if spec is not None and spec.kind == "count":
            counts[index] = spec
        elif spec is not None and ref.dim() > 0:
            row_leaves[index] = (tuple(ref.shape), spec)
        else:
            worst = max(worst, check_close(have, ref, atol, f"{where}: output #{index}", precision == "int8"))
    trims = _count_trims(counts, row_leaves, got_leaves, want_leaves)
    for index in set(counts) - set(trims.values()):
        worst = max(worst, check_close(got_leaves[index], want_leaves[index], atol, f"{where}: output #{index}",
                                        precision == "int8"))
    error, excused = compare_rows(got_leaves, want_leaves, row_leaves, atol, where, trims, precision == "int8")
    return Checked(max(worst, error), excused)


def entry(label: str, inputs: list[torch.Tensor], checked: Checked) -> dict[str, Any]:
    """A check as the manifest's ``info.shape_checks`` records it, with the excuses it used."""
    found = {"label": label, "shapes": [list(x.shape) for x in inputs], "max_abs_error": checked.max_abs_error}
    return found | ({"excused": checked.excused} if checked.excused else {})


def _spec(flag: RowsSpec | bool | int | None, ref: Any) -> RowsSpec | None:
    """A bare flag as a spec: True takes dim 1 of a batched leaf (a manifest from before rows_dim)."""
    if isinstance(flag, RowsSpec):
        return flag
    if flag is None or flag is False:
        return None
    if flag is True:
        return RowsSpec(1 if isinstance(ref, torch.Tensor) and ref.dim() >= 2 else 0)
    return RowsSpec(int(flag))


def _check_shape(
    have: torch.Tensor, ref: torch.Tensor, spec: RowsSpec | None, where: str, fixed: tuple[int, ...] | None = None
) -> None:
    """Equal shapes; rows may differ in number (a flip), along their dim only. A shape that
    stayed the example's (``fixed``) while eager's moved is a size torch.export fixed at capture."""
    same = tuple(have.shape) == tuple(ref.shape)
    if not same and spec is not None and spec.kind not in ("count", "ranked") and have.dim() == ref.dim():
        same = all(have.shape[d] == ref.shape[d] for d in range(ref.dim()) if d != spec.dim)
    if same:
        return
    message = f"{where} has shape {tuple(have.shape)}, eager gives {tuple(ref.shape)}"
    if fixed is not None and tuple(have.shape) == tuple(fixed) != tuple(ref.shape):
        message += (
            f". The artifact kept the size it had at the example ({tuple(fixed)}): torch.export fixes a size that "
            "the model computes through Python numbers (int(round(h * r)), math.ceil, a float ratio) at the "
            "example's value. Compute it from the input's shape with integer arithmetic (h * 64 // max(h, w)), "
            "or keep that input dim static in dynamic_shapes"
        )
    raise LoweringError(message)


def _count_trims(
    counts: dict[int, RowsSpec], rows: dict[int, tuple[tuple[int, ...], RowsSpec]], got: list[Any], want: list[Any]
) -> dict[int, int]:
    """Row leaf -> the count leaf of its NMS (num_dets) that trims its padded rows, where one count
    per image stands on each side."""
    trims = {}
    for index, (shape, spec) in rows.items():
        images = math.prod(shape[: spec.dim])
        for count, count_spec in counts.items():
            same_nms = spec.nms is not None and count_spec.nms == spec.nms
            if same_nms and want[count].numel() == images == got[count].numel():
                trims[index] = count
    return trims


def run_checks(
    target: str, dims: dict[str, Any], examples: list[torch.Tensor], shapes: list[list[int | str]],
    deployed_fn: Callable[[list[torch.Tensor]], Any], eager_fn: Callable[[list[torch.Tensor]], Any],
    atol: float, detections: Sequence[RowsSpec | None] | None = None, precision: str = "fp32", example_want: Any = None,
    names: Sequence[str] = (), guards: Sequence[str] = (),
    referee: Callable[[list[torch.Tensor]], Any] | None = None,
) -> list[dict[str, Any]]:
    """Each check: its label, the input shapes, and the max error; raises on the first mismatch.

    ``referee``: the model run in float64, asked where a tensor is past the tolerance: an artifact
    no further from it than eager itself is, element by element, is not wrong (``refereed``).

    ``example_want``: eager's outputs on the example inputs when capture already computed them.
    A check whose sizes break one of torch.export's ``guards`` (over the input ``names``) is
    skipped with a ``DimWarning``, and recorded as skipped: ``Deployed`` refuses those sizes.
    """
    results = []
    example_shapes: list[tuple[int, ...] | None] = []
    for seed, (label, sizes) in enumerate(check_sizes(dims)):
        inputs = resized(examples, shapes, sizes, seed)
        input_shapes = [list(x.shape) for x in inputs]
        broken = guard_mod.violated(guards, dict(zip(names, input_shapes, strict=True))) if guards else None
        if broken is not None:
            warnings.warn(guard_mod.warning(label, input_shapes, broken), DimWarning, stacklevel=user_stacklevel())
            results.append({"label": label, "shapes": input_shapes, "max_abs_error": None, "skipped": broken})
            continue
        with stage(f"check at {label} {input_shapes}", target):
            if label == "example" and example_want is not None:
                want = example_want
            else:
                with torch.no_grad():
                    want = eager_fn(inputs)
            got = deployed_fn(inputs)
            try:
                checked = compare(label, inputs, got, want, atol, target, detections, precision, example_shapes)
            except LoweringError as exc:
                coupled = coupling(inputs, want, eager_fn, atol) if target == "ncnn" else None
                if coupled is not None:
                    raise LoweringError(f"{exc}. {coupled}") from exc
                if precision != "fp32" or detections and any(detections):
                    raise
                checked = Checked(*refereed(exc, got, want, referee, inputs, atol, decision_edges.tilted(eager_fn)))
        if label == "example":
            leaves = pytree.tree_leaves(structure.dataclasses_to_dicts(got))
            example_shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in leaves]
        results.append(entry(label, inputs, checked))
    return results


def against_original(
    deployed: Any, model: torch.nn.Module, flat: list[torch.Tensor], in_spec: pytree.TreeSpec,
    substitutions: list[str], atol: float,
) -> dict[str, int]:
    """The artifact against the model the user gave, run eagerly with no substitution, on the
    example: a substitution that computes something else (keypoints gathered one anchor off)
    fails here, whatever the substituted reference says. Compared as the user sees the outputs:
    eager's structure, detections paired by label and IoU, every per-detection field included;
    the rows an unpack returns in plain tensors ([n, 15] per image) are found by probing it
    (``fxdeploy.parity.probe``) and compared as rows too. Returns the excuses used."""
    from fxdeploy.capture import eval_mode
    from fxdeploy.capture.nested_encoder import eager_nested_quiet
    from fxdeploy.parity.outputs import Tolerances, compare_outputs
    from fxdeploy.parity.probe import row_paths
    from fxdeploy.parity.rows import nms_context, specs

    args, kwargs = pytree.tree_unflatten([x.clone() for x in flat], in_spec)  # eager may write into them
    with torch.no_grad(), eval_mode(model), eager_nested_quiet():
        want = model(*args, **kwargs)
    result = deployed.call_flat(flat, unpack=False)
    visible = [leaf for leaf in deployed.manifest["output_leaves"] if leaf["kind"] not in ("hidden", "constant")]
    paths = row_paths(deployed.unpack, result, specs(visible), 0.0)
    tolerances = Tolerances(atol=atol, score_atol=atol, detections=nms_context(specs(visible)))
    results = compare_outputs(want, deployed.unpack(result), tolerances, rows=paths)
    wrong = [r for r in results if not r.ok]
    if wrong:
        raise LoweringError(
            f"{deployed.target}: the artifact differs from the model itself (run eagerly, without the "
            f"substitution(s) {', '.join(substitutions)}) on the example: "
            + "; ".join(f"{r.name}: {r.detail}" for r in wrong[:3])
            + ". A substitution must compute what the code it replaces computes"
        )
    excused: dict[str, int] = {}
    for image in (m for r in results for m in getattr(r, "images", [])):
        for rule, count in image.excused.items():
            excused[rule] = excused.get(rule, 0) + count
    return excused
