"""Translation validation of fxdeploy's passes (DESIGN.md, "Sound by construction").

A program (``tv_programs``, drawn from ``tv_grammar``) is captured as ``lower()`` captures it; then
every pipeline of ``PIPELINES`` runs one pass at a time, each on a copy of the graph the passes
before it left. After every pass that changed the graph, the graph before and the graph after run
on the same inputs (the example, and inputs drawn afresh at other batch sizes where the batch is
dynamic) and must agree; so must the captured graph and each pipeline's last graph with the eager
module itself.

"Agree" is what the host sees: each graph's outputs are read through its record
(``fxdeploy.passes.record``) as ``Deployed`` reads an artifact's: hidden counts dropped, padded
outputs trimmed to their count, constants put back. Then tensors must be equal: same dtype, same
shape, the same values bit for bit (NaN where NaN), except where a pass in ``REASSOCIATING`` ran,
whose rewrite may round differently. The outputs that are an NMS's kept rows compare as a set
(``fxdeploy.parity.match``): NMS orders only by score, and two equal scores may come in either order.

A pass may refuse a program (``CompactionError`` or an ``FxDeployError`` with its reason): that is
recorded, and the rest of that pipeline is skipped, as ``lower()`` stops there. Any other exception
from a pass, a graph that fails to run where the graph before it ran, or a difference, is a failure,
reported with the program's source and the pass.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import dims as dims_mod
from fxdeploy.capture import Captured, capture
from fxdeploy.errors import FxDeployError
from fxdeploy.parity import Detections, Rules, Tolerance, match_image
from fxdeploy.passes.base import Pass
from fxdeploy.passes.padding import CompactionError
from fxdeploy.passes.pipelines import PIPELINES
from fxdeploy.passes.record import record, update
from fxdeploy.settings import Settings
from tests.passes.tv_programs import Program

SEEDS = (0, 1, 2, 3)
"""Input seeds: 0 is the example the program was captured on."""


@dataclasses.dataclass(frozen=True)
class Closeness:
    """How far a float value may move: ``atol * s + rtol * |want|``, ``s`` the largest finite
    |want| of that output (at least 1). Zero for both: bit for bit."""

    atol: float = 0.0
    rtol: float = 0.0

    def __or__(self, other: Closeness) -> Closeness:
        return Closeness(max(self.atol, other.atol), max(self.rtol, other.rtol))


EXACT = Closeness()
REASSOCIATING: dict[str, Closeness] = {
    # A reduction along the columns of padded rows runs over [bound, C], not [n, C]: another size may
    # take another vectorized kernel on another CPU, which adds in another order (bit-exact here).
    "pad_compactions": Closeness(1e-6, 1e-6),
    # sigmoid(x) as 1 / (1 + exp(-x)): the same function, rounded in three steps instead of one
    # kernel's (bit-exact here; torch's own kernel may differ per CPU).
    "exact_score_sigmoid": Closeness(1e-6, 1e-6),
    # avg_pool2d over the whole input as mean(x, [-2, -1]): the same sum over the same area, added in
    # another order (seen: 1 ulp).
    "whole_input_pool": Closeness(1e-6, 1e-6),
    # an average pool with a divisor override as the plain pool times prod(kernel) / divisor: two
    # roundings instead of one.
    "pool_divisors": Closeness(1e-6, 1e-6),
    # cdist as the norm of broadcast differences: the same sums, in another order than torch's kernel.
    "pairwise_distances": Closeness(1e-6, 1e-6),
    # rfft as the first half of a complex fft: the same sums, by another FFT plan (seen: 2.4e-7).
    "full_spectrum_rffts": Closeness(1e-6, 1e-6),
    # an antialiased resize as gathered taps times torch's own weights, summed per axis by a reduction
    # rather than torch's loop (seen: 6e-8).
    "antialiased_resizes": Closeness(1e-6, 1e-6),
    # var as the mean of squared deviations (two passes; torch: Welford's running form), std its root,
    # and huber/smooth_l1 without a branch: other roundings of the same values.
    "composite_ops": Closeness(1e-5, 1e-5),
}
"""Passes whose rewrite may round a float differently, and by how much. Every other pass is exact."""
FP16 = Closeness(1e-2, 1e-2)
"""precision_policy with Settings(precision="fp16"): fp16 keeps 11 significant bits (a rounding
error of 2**-11 relative per op); a program of at most a dozen light ops then moves a value by
less than 1e-2 of the largest value it is computed from, which the output's largest |value| bounds
for the decision-free programs the fp16 check runs (fxdeploy's own fp16 preset: atol 1e-2)."""


@dataclasses.dataclass
class Outcome:
    """What validating one program found."""

    program: Program
    captured: bool = False
    reason: str = ""
    feeds: int = 0
    steps: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    """(pipeline, pass, "modified" | "unchanged" | "refused: <reason>")."""
    failures: list[str] = dataclasses.field(default_factory=list)

    def fired(self) -> set[str]:
        return {name for _, name, status in self.steps if status == "modified"}

    def refused(self) -> set[str]:
        return {name for _, name, status in self.steps if status.startswith("refused")}

    def report(self) -> str:
        shapes = ", ".join(f"{i.name}: {list(i.shape)}{' (dim 0 dynamic)' if i.dynamic else ''}"
                           for i in self.program.inputs)
        return "\n".join([*self.failures[:3], "", "program:", self.program.source, f"inputs: {shapes}"])


def fork(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` for a pass to rewrite: new nodes (their meta copied, its fake values shared,
    as passes replace them rather than change them), the same weights, its own record."""
    copied = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    copied.meta = dict(gm.meta)
    return copied


def visible(gm: torch.fx.GraphModule, outputs: Any) -> list[Any]:
    """``gm``'s outputs as the host returns them: by its record, hidden counts dropped, padded
    outputs trimmed to their counts, constants put back (``Deployed._leaf_values`` on an artifact)."""
    flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    known = record(gm)
    if known.output_leaves is not None:
        leaves = [dict(leaf) for leaf in known.output_leaves]
        values = iter(flat)
        by_name = {leaf["name"]: next(values) for leaf in leaves if leaf["kind"] != "constant"}
    else:
        names = known.names_for(len(flat))
        by_name = dict(zip(names, flat, strict=True))
        leaves = [{"name": n, "kind": "hidden" if n in known.hidden else "tensor"} for n in names]
        for leaf in leaves:
            if leaf["name"] in known.trim:
                leaf["trim"] = known.trim[leaf["name"]].to_dict()
    shown = []
    for leaf in leaves:
        if leaf["kind"] == "hidden":
            continue
        if leaf["kind"] == "constant":
            shown.append(leaf["value"])
        elif "trim" in leaf:
            count = int(by_name[leaf["trim"]["count"]].reshape(-1)[0])
            shown.append(by_name[leaf["name"]].narrow(leaf["trim"]["dim"], 0, count))
        elif leaf["kind"] == "scalar":
            shown.append({"int": int, "float": float, "bool": bool}[leaf["type"]](by_name[leaf["name"]].item()))
        else:
            shown.append(by_name[leaf["name"]])
    return shown


def run(gm: torch.fx.GraphModule, feed: Sequence[torch.Tensor]) -> list[Any]:
    with torch.no_grad():
        return visible(gm, gm(*[x.clone() for x in feed]))


def eager(model: torch.nn.Module, feed: Sequence[torch.Tensor]) -> list[Any]:
    with torch.no_grad():
        return pytree.tree_leaves(model(*[x.clone() for x in feed]))


def differences(want: list[Any], got: list[Any], program: Program, closeness: Closeness) -> list[str]:
    """What differs between two hosts' views of the outputs; empty when they agree."""
    if len(want) != len(got):
        return [f"{len(got)} outputs, expected {len(want)}"]
    found: list[str] = []
    rows = dict(program.detections)
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        if index not in rows:
            found += [f"output {index}: {d}" for d in _tensor_differences(w, g, closeness)]
    if rows:
        found += _detection_differences(want, got, rows, closeness)
    return found


def _tensor_differences(want: Any, got: Any, closeness: Closeness) -> list[str]:
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return [] if want == got else [f"{got!r}, expected {want!r}"]
    if want.dtype != got.dtype or want.shape != got.shape:
        return [f"{got.dtype} {tuple(got.shape)}, expected {want.dtype} {tuple(want.shape)}"]
    if not want.is_floating_point():
        wrong = (want != got).nonzero()
        return [] if not len(wrong) else [f"{len(wrong)} element(s) differ, first at {wrong[0].tolist()}: "
                                          f"{got[tuple(wrong[0])].item()} vs {want[tuple(wrong[0])].item()}"]
    w, g = want.double(), got.double()
    same_special = (w.isnan() == g.isnan()) & ((w == g) | ~torch.isinf(w) & ~torch.isinf(g))
    finite = torch.isfinite(w) & torch.isfinite(g)
    scale = max(1.0, float(w[finite].abs().max())) if finite.any() else 1.0
    bound = closeness.atol * scale + closeness.rtol * w.abs()
    bad = ~same_special | finite & ((w - g).abs() > bound)
    if not bad.any():
        return []
    first = tuple(bad.nonzero()[0].tolist())
    worst = float((w - g)[finite].abs().max()) if finite.any() else float("nan")
    return [f"{int(bad.sum())} of {w.numel()} value(s) differ (max |diff| {worst:.3g}), first at {list(first)}: "
            f"{got[first].item()!r} vs {want[first].item()!r}"]


def _detection_differences(want: list[Any], got: list[Any], rows: dict[int, str], closeness: Closeness) -> list[str]:
    def detections(values: list[Any]) -> Detections:
        roles = {role: values[i] for i, role in rows.items()}
        fields = {role: t for role, t in roles.items() if role not in ("boxes", "scores", "labels")}
        return Detections(roles.get("boxes"), roles.get("scores"), roles.get("labels"), fields)

    bound = Tolerance(closeness.atol, closeness.rtol, of_largest=True)
    rules = Rules(iou=0.999, scores=bound, fields=bound, boxes=bound)
    return [f"detections: {p}" for p in match_image(0, detections(want), detections(got), rules).problems]


def captured_program(program: Program, settings: Settings) -> tuple[torch.nn.Module, Captured] | str:
    """The program captured as ``lower()`` captures it, or why capture refused it."""
    model = program.module()
    try:
        with warnings.catch_warnings():  # a dim torch.export fixes is warned about; fine here
            warnings.simplefilter("ignore")
            captured = capture(model, program.example(0), dynamic_shapes=program.dynamic_shapes(), settings=settings)
    except FxDeployError as exc:
        return f"{type(exc).__name__}: {exc}"
    update(captured.graph_module, output_names=tuple(captured.output_names))
    return model, captured


def feeds(program: Program, captured: Captured, seeds: Sequence[int] = SEEDS) -> list[tuple[torch.Tensor, ...]]:
    """Inputs for each seed: the example's shapes first, then other sizes of each dynamic dim."""
    shapes = captured.input_shapes
    made = []
    for number, seed in enumerate(seeds):
        sizes = {}
        for name, r in captured.dims.items():
            sizes[name] = [r.opt, r.min, min(r.max, 3), min(r.max, r.min + 1)][number % 4]
        made.append(program.example(seed, [tuple(dims_mod.size_of(d, sizes) for d in shape) for shape in shapes]))
    return made


def validate(
    program: Program, pipelines: dict[str, Sequence[Pass]] | None = None, settings: Settings | None = None,
    seeds: Sequence[int] = SEEDS, closeness: dict[str, Closeness] | None = None,
) -> Outcome:
    """Capture ``program``, run every pipeline one pass at a time and check each pass; see the module."""
    settings = settings or Settings()
    closeness = REASSOCIATING if closeness is None else closeness
    outcome = Outcome(program)
    found = captured_program(program, settings)
    if isinstance(found, str):
        outcome.reason = found
        return outcome
    model, captured = found
    gm = captured.graph_module
    inputs, wants, reference = [], [], []
    for feed in feeds(program, captured, seeds):
        try:
            want, graph_out = eager(model, feed), run(gm, feed)
        except Exception:  # noqa: BLE001 - eager or torch.export's own runtime checks refuse this input
            continue
        inputs.append(feed)
        wants.append(want)
        reference.append(graph_out)
    outcome.captured, outcome.feeds = True, len(inputs)
    for want, got in zip(wants, reference, strict=True):
        found_diff = differences(want, got, program, EXACT)
        if found_diff:
            outcome.failures.append(f"capture: the captured graph differs from eager: {found_diff[0]}")
            return outcome
    done: dict[tuple[str, ...], tuple[torch.fx.GraphModule, list[list[Any]], Closeness] | str] = {
        (): (gm, reference, EXACT)}
    for target, passes in (PIPELINES if pipelines is None else pipelines).items():
        names: tuple[str, ...] = ()
        for p in passes:
            name = getattr(p, "__name__", repr(p))
            key = (*names, name)
            if key not in done:
                done[key] = _step(outcome, target, names, p, done[names], inputs, program, settings, closeness)
            names = key
            if isinstance(done[key], str):
                break
        else:
            last = done[names]
            assert not isinstance(last, str)
            for want, got in zip(wants, last[1], strict=True):
                diff = differences(want, got, program, last[2])
                if diff:
                    outcome.failures.append(f"{target} pipeline: its last graph differs from eager: {diff[0]}")
                    break
    return outcome


def _step(
    outcome: Outcome, target: str, ran: tuple[str, ...], p: Pass,
    state: tuple[torch.fx.GraphModule, list[list[Any]], Closeness] | str, inputs: list[tuple[torch.Tensor, ...]],
    program: Program, settings: Settings, closeness: dict[str, Closeness],
) -> tuple[torch.fx.GraphModule, list[list[Any]], Closeness] | str:
    """Run pass ``p`` on a copy of the graph ``ran`` left, and check it against that graph."""
    assert not isinstance(state, str)
    before, before_out, allowed = state
    name = getattr(p, "__name__", repr(p))
    where = f"pass {name!r} ({target} pipeline, after {', '.join(ran) or 'capture'})"
    text = str(before.graph)
    try:
        result = p(fork(before), settings)
    except (CompactionError, FxDeployError) as exc:
        outcome.steps.append((target, name, f"refused: {exc}"))
        return f"refused: {exc}"
    except Exception as exc:  # noqa: BLE001 - a pass that crashes is a failure, reported as one
        outcome.failures.append(f"{where} raised {type(exc).__name__}: {exc}")
        return "crashed"
    after = result.graph_module
    if not result.modified:
        outcome.steps.append((target, name, "unchanged"))
        if str(after.graph) != text:
            outcome.failures.append(f"{where} says modified=False but changed the graph")
        return after, before_out, allowed
    outcome.steps.append((target, name, "modified"))
    try:
        after.graph.lint()
        after.recompile()
        after_out = [run(after, feed) for feed in inputs]
    except Exception as exc:  # noqa: BLE001 - the graph before ran on these inputs
        outcome.failures.append(f"{where}: its graph fails to run: {type(exc).__name__}: {exc}")
        return "crashed"
    step = closeness.get(name, EXACT)
    for feed, want, got in zip(inputs, before_out, after_out, strict=True):
        diff = differences(want, got, program, step)
        if diff:
            shapes = [tuple(x.shape) for x in feed]
            outcome.failures.append(f"{where} changed the values on inputs of shapes {shapes}: {diff[0]}")
            return "wrong"
    return after, after_out, allowed | step
