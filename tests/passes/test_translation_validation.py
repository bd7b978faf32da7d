"""Translation validation: every pass of every pipeline keeps the values of generated programs
(``translation_validation`` says what "keeps" means), within a fixed, deterministic budget.

The programs are drawn by hypothesis with ``derandomize=True`` and no example database, so each run
validates the same programs in the same order; a failure prints the program and the pass. The
hand-written programs beside them are the constructs that broke a pass before: a clone that is
then written in place (YOLOv5's ``xywh2xyxy``), and views of tensors a permute or transpose made
non-contiguous (Swin's window partition, attention heads merged back).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from fxdeploy.capture.vmap_views import simplify
from fxdeploy.passes.base import PassResult
from fxdeploy.passes.pipelines import ONNX
from fxdeploy.passes.scatters_as_slices import slice_scatters_as_cats
from fxdeploy.settings import Settings
from tests.passes.translation_validation import FP16, REASSOCIATING, Outcome, validate
from tests.passes.tv_grammar import DECISION_FREE, FAMILIES, programs
from tests.passes.tv_programs import Input, Program

BUDGET = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
"""A program costs about 0.5 to 1 s of CPU (capture and its functionalization are most of it)."""
FIRES: dict[str, set[str]] = {
    "aliasing": {"remove_noops", "strided_slices"},
    "detection": {"remove_asserts", "remove_noops", "pad_compactions", "exact_score_sigmoid", "host_postprocess_split",
                  "fold_constants", "unit_selects"},
    # its one attention mask is a constant of one value, which vacuous_masks now proves and drops
    # (float_attention_mask has its own tests: tests/passes/ncnn/test_float_attention_mask.py)
    "layers": {"remove_dropout", "whole_input_pool", "pool_divisors", "vacuous_masks", "fold_constants",
               "strided_slices", "unit_selects"},
    "dynamic_batch": {"contiguous_reshapes", "pad_compactions", "whole_input_pool", "remove_noops"},
    "composites": {"composite_ops", "unfused_activations", "dynamic_slices", "comparisons_as_arithmetic"},
}
"""What each family's programs must make fire: a check of passes that never rewrite anything checks nothing."""


class Coverage:
    """What the generated programs exercised."""

    def __init__(self) -> None:
        self.programs = self.captured = self.feeds = 0
        self.fired: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.uncaptured: Counter[str] = Counter()

    def add(self, outcome: Outcome) -> None:
        self.programs += 1
        self.captured += outcome.captured
        if not outcome.captured:
            self.uncaptured[outcome.reason.splitlines()[0][:160]] += 1
        self.feeds += outcome.feeds
        self.fired.update(outcome.fired())
        self.refused.update(outcome.refused())

    def __str__(self) -> str:
        return (f"{self.captured}/{self.programs} captured, {self.feeds} inputs; fired {dict(self.fired)}; "
                f"refused {dict(self.refused)}; not captured: {dict(self.uncaptured)}")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_pass_keeps_the_values_of_generated_programs(family: str) -> None:
    kinds, dynamic = FAMILIES[family]
    coverage = Coverage()

    @BUDGET
    @given(programs(kinds, dynamic))
    def check(program: Program) -> None:
        outcome = validate(program)
        coverage.add(outcome)
        assert not outcome.failures, outcome.report()

    check()
    print(f"{family}: {coverage}")  # noqa: T201 - what the budget covered, shown with -rP
    assert coverage.captured >= 0.8 * coverage.programs, coverage
    assert coverage.feeds >= 3 * coverage.captured, coverage
    missing = FIRES[family] - set(coverage.fired)
    assert not missing, f"never fired: {sorted(missing)}; {coverage}"


def test_precision_policy_in_fp16_stays_within_its_tolerance() -> None:
    """fp16 moves every value a little, so only programs whose values decide nothing (no mask, sort,
    comparison or integer cast, which a rounding can flip) are compared, within ``FP16``."""
    coverage = Coverage()

    @settings(BUDGET, max_examples=20)
    @given(programs(kinds=DECISION_FREE, dynamic=False))
    def check(program: Program) -> None:
        assert not program.decisions
        outcome = validate(program, pipelines={"tensorrt": ONNX}, settings=Settings(precision="fp16"),
                           closeness={**REASSOCIATING, "precision_policy": FP16})
        coverage.add(outcome)
        assert not outcome.failures, outcome.report()

    check()
    print(f"fp16: {coverage}")  # noqa: T201 - what the budget covered, shown with -rP
    assert coverage.fired["precision_policy"] >= 10, coverage


YOLO_XYWH2XYXY = Program(
    body=(
        "x = x0.sigmoid() * 64",
        "y = x.clone()",
        "y[..., 0] = x[..., 0] - x[..., 2] / 2",
        "y[..., 1] = x[..., 1] - x[..., 3] / 2",
        "y[..., 2] = x[..., 0] + x[..., 2] / 2",
        "y[..., 3] = x[..., 1] + x[..., 3] / 2",
        "return (y,)",
    ),
    inputs=(Input("x0", (2, 12, 6), dynamic=True),),
)
"""YOLOv5's xywh2xyxy on a computed tensor: dropping the clone writes the corners into ``x``, and
the third column then reads the first one written."""

DETECTOR_TAIL = Program(
    body=(
        "p = x0.sigmoid()",
        "p = p[p[:, 4] > 0.5]",
        "p[:, 5:] *= p[:, 4:5]",
        "box = p[:, :4] * 64",
        "y = box.clone()",
        "y[:, 0] = box[:, 0] - box[:, 2] / 2",
        "y[:, 1] = box[:, 1] - box[:, 3] / 2",
        "y[:, 2] = box[:, 0] + box[:, 2] / 2",
        "y[:, 3] = box[:, 1] + box[:, 3] / 2",
        "score, label = p[:, 5:].max(1)",
        "keep = ops.batched_nms(y, score, label, 0.45)[:20]",
        "return (y[keep], score[keep], label[keep])",
    ),
    inputs=(Input("x0", (40, 7)),),
    detections=((0, "boxes"), (1, "scores"), (2, "labels")),
    decisions=True,
)
"""YOLOv5's NMS for one image: a confidence filter, class scores scaled in place, the clone and its
writes on the selected rows, a batched NMS and ``[:max_det]``."""

DETECTOR_TAIL_DYNAMIC_ROWS = dataclasses.replace(DETECTOR_TAIL, inputs=(Input("x0", (6, 7), dynamic=True),))
"""The same with a dynamic number of candidate rows (a detector's grid cells at a dynamic H/W): the
confidence filter is padded to the rows' largest size."""

SWIN_WINDOWS = Program(
    body=(
        "b = x0.shape[0]",
        "x = x0 * 2",
        "w = x.view(b, 2, 4, 2, 4, 3).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, 16, 3)",
        "back = w.view(b, 2, 2, 4, 4, 3).permute(0, 1, 3, 2, 4, 5).contiguous().view(b, 8, 8, 3)",
        "return (w, back)",
    ),
    inputs=(Input("x0", (2, 8, 8, 3), dynamic=True),),
)
"""Swin's window partition and its reverse: views of what a permute made non-contiguous, at a
dynamic batch."""

ATTENTION_HEADS = Program(
    body=(
        "b = x0.shape[0]",
        "qkv = x0.reshape(b, 49, 3, 3, 16).permute(2, 0, 3, 1, 4)",
        "q, k, v = qkv[0], qkv[1], qkv[2]",
        "attn = ((q * 0.25) @ k.transpose(-2, -1)).softmax(-1)",
        "out = (attn @ v).transpose(1, 2).reshape(b, 49, 48)",
        "return (out,)",
    ),
    inputs=(Input("x0", (2, 49, 144), dynamic=True),),
)
"""Attention heads merged back: ``[b, 49, 3, 16]`` with strides ``(2352, 16, 784, 1)`` reshaped
to ``(b, 49, 48)`` at a dynamic batch (what ``contiguous_reshapes`` is for)."""

PERMUTE_THEN_VIEW = Program(
    body=(
        "b = x0.shape[0]",
        "t = x0.permute(0, 2, 3, 1)",
        "v = t.view(b, -1, 4)",
        "y = x0 * 1",
        "y.transpose(1, 2)[:, 0] += 1",
        "return (v * 2, y.reshape(b, 4, -1), t.reshape(b, 4, -1))",
    ),
    inputs=(Input("x0", (2, 4, 3, 5), dynamic=True),),
)
"""A view of a permuted tensor (strides that still allow it), a write through a transposed view,
reshapes of both."""

EVAL_DROPOUT_WRITES = Program(
    body=(
        "v0 = F.dropout(x0, 0.25, self.training)",
        "v0[v0 > -0.5] = 0.0",
        "v1 = F.dropout2d(x1, 0.5, self.training)",
        "v1.mul_(2.0)",
        "return (v0, x0.sum(1), x1 + 1)",
    ),
    inputs=(Input("x0", (5, 6)), Input("x1", (2, 3, 4, 4))),
)
"""Writes through eval-mode dropout: eager's dropout returns its input itself, so the writes reach
``x0`` and ``x1`` (torch.export's graph treated dropout as a copy, and lower()'s check ran eager on
the example it had already written into)."""

CLIP_HEAD = Program(
    body=(
        "t = x1 * 1",
        "q = t / torch.linalg.norm(t, dim=-1, keepdim=True)",
        "c = t.pow(3) + t.pow(2.0)",
        "t[:, 0] += 1.0",
        "s = torch.einsum('...pd,...qd->...pq', x0, q)",
        "return (s, c, t, torch.einsum('bqd,bpd->bpq', q, x0))",
    ),
    inputs=(Input("x0", (2, 5, 8), dynamic=True), Input("x1", (2, 3, 8), dynamic=True)),
)
"""OWL-ViT's scoring: queries divided by their norm, scored against patches by einsum; a square and a
cube of a tensor written in place after them (the ncnn spellings: the norm, the products, matmul)."""

EMPTY_CAT_INPUTS = Program(
    body=(
        "b = x0.shape[0]",
        "y = torch.cat([x0[:, :0], x0 * 2], 1)",
        "y[:, 0] += 1.0",
        "rows = torch.zeros(b, 0, 5)",
        "rows = torch.cat([rows, x0[:, :1]], 1)",
        "rows = torch.cat([rows, x0[:, 1:2] + y[:, :1]], 1)",
        "codes = torch.cat([torch.zeros(0), x0[0, 0].long()]) + 1",
        "return (y, rows, codes)",
    ),
    inputs=(Input("x0", (2, 4, 5), dynamic=True),),
)
"""A cat's empty inputs (a slice of none, rows collected from ``zeros(b, 0, 5)``), a write into a
cat's result, and an empty float input that makes an integer cat a float one (which must stay)."""

KEY_PADDING_ATTENTION = Program(
    body=(
        "b = x0.shape[0]",
        "q = x0.view(b, 6, 2, 4).transpose(1, 2)",
        "keep = x1 < 0.5",
        "keep[:, 0] = True",
        "bias = torch.zeros(b, 6).masked_fill(keep.logical_not(), float('-inf')).view(b, 1, 1, 6)",
        "a = F.scaled_dot_product_attention(q, q * 2, q + 1, attn_mask=keep.view(b, 1, 1, 6))",
        "c = F.scaled_dot_product_attention(q, q, q, attn_mask=bias.expand(b, 2, 1, 6))",
        "bias.mul_(2.0)",
        "return (a, c, bias)",
    ),
    inputs=(Input("x0", (2, 6, 8), dynamic=True), Input("x1", (2, 6), dynamic=True)),
)
"""nn.MultiheadAttention's key padding: one mask row per image, broadcast over the queries (bool,
and additive with -inf), which ONNX Runtime's Attention kernel refuses (``query_sized_masks``); the
additive mask written into after the attention."""

REAL_FFTS = Program(
    body=(
        "s = torch.fft.rfft(x0, dim=-1)",
        "t = torch.fft.rfft(x0 * 2, n=5, dim=1, norm='ortho')",
        "return (torch.view_as_real(s), s.abs(), torch.view_as_real(t))",
    ),
    inputs=(Input("x0", (2, 6, 8), dynamic=True),),
)
"""Real FFTs, one-sided, over the last dim and over another one cut to n = 5 (an odd size's half),
which OpenVINO imports with a unit dim too many (``full_spectrum_rffts``)."""

ANTIALIASED_RESIZES = Program(
    body=(
        "a = F.interpolate(x0, size=(3, 5), mode='bilinear', antialias=True)",
        "b = F.interpolate(x0 * 2, scale_factor=0.6, mode='bicubic', antialias=True)",
        "return (a, b, F.interpolate(x0, size=(11, 9), mode='bilinear', antialias=True, align_corners=True))",
    ),
    inputs=(Input("x0", (2, 3, 8, 10), dynamic=True),),
)
"""Antialiased resizes down and up, by size and by factor, as gathered taps (``antialiased_resizes``)."""

HALF_COMPARISONS = Program(
    body=(
        "h = x0.half()",
        "a = (h >= 0.1).float()",
        "b = (h * 3 > x1.half()).float() + (h.t().reshape(-1) <= torch.tensor(0.3)).float().sum()",
        "return (a, b, h.float())",
    ),
    inputs=(Input("x0", (3, 5)), Input("x1", (3, 5))),
)
"""A model that compares in half itself: a number and a 0-d tensor rounded to half
(``half_comparison_scalars``), and every half value compared rounded in float32 ops (``half_rounding``)."""

MASKED_MAXES = Program(
    body=(
        "y = x0.masked_fill(x1 > 0.3, float('-inf'))",
        "p = F.max_pool2d(y, 3, 1, 1)",
        "m = y.amax(-1)",
        "n = (-y).amin(-1)",
        "return (torch.where(torch.isinf(p), torch.zeros_like(p), p), m, y.max(-1).values, F.max_pool2d(y, 2, 2), n)",
    ),
    inputs=(Input("x0", (2, 3, 4, 4), dynamic=True), Input("x1", (2, 3, 4, 4), dynamic=True)),
)
"""Max pools and reductions over a -inf mask, then an ``isinf`` guard, and a min over its negation
(``infinite_windows``)."""

LOOKUPS = Program(
    body=(
        "v0 = torch.searchsorted(torch.tensor([-1.0, 0.0, 0.0, 0.5]), x0.contiguous(), right=True)",
        "v1 = torch.bucketize(x0, torch.tensor([-0.5, 0.5])) + torch.searchsorted(torch.tensor([0.0, 1.0]), x0)",
        "v2 = torch.isin((x0 * 2).round(), torch.tensor([0.0, 1.0]), invert=True)",
        "return (v0, v1, v2)",
    ),
    inputs=(Input("x0", (3, 8), dynamic=True),),
)
"""Searches over constant edges (a repeated one) and a class-style membership test (``value_lookups``)."""

ORDER_STATISTICS = Program(
    body=("v0 = x0.median(dim=1).values", "v1 = x0.kthvalue(2, dim=0, keepdim=True)[0]", "v2 = x0.median()",
          "return (x0 > v0[:, None], v1, v2)"),
    inputs=(Input("x0", (5, 6)),),
)
"""Medians and a k-th value whose indices nothing reads (``order_statistics``)."""

DISTANCES = Program(
    body=("return (torch.cdist(x0, x1), torch.cdist(x0, x1, p=1.0), torch.cdist(x0, x1, p=float('inf')))",),
    inputs=(Input("x0", (4, 3)), Input("x1", (5, 3))),
)
"""Pairwise distances in three norms (``pairwise_distances``)."""

BYTES = Program(
    body=("v0 = (x0.abs() * 100).to(torch.uint8)", "v1 = (v0 + 200) * 3 - v0",
          "v2 = -(x0 * 50).to(torch.int8) * 3 + 100", "return (v1, v2)"),
    inputs=(Input("x0", (2, 7), dynamic=True),),
)
"""Byte arithmetic that wraps (``wrapping_bytes``)."""

POOL_DIVISORS = Program(
    body=("return (F.avg_pool2d(x0, 3, 2, 1, divisor_override=4), F.avg_pool2d(x0, 2, divisor_override=1),",
          "        F.avg_pool2d(x0, 3, 2, ceil_mode=True, divisor_override=5))"),
    inputs=(Input("x0", (2, 3, 8, 8), dynamic=True),),
)
"""Average pools with a divisor override, one whose ceil-mode window hangs past the input (``pool_divisors``)."""

CEIL_POOL_COUNTS = Program(
    body=("return (F.avg_pool2d(x0, 2, ceil_mode=True), F.avg_pool2d(x0, 3, 2, 1, ceil_mode=True),",
          "        F.avg_pool2d(x0, (3, 2), (2, 2), (1, 0), ceil_mode=True))"),
    inputs=(Input("x0", (2, 3, 7, 9), dynamic=True),),
)
"""Ceil-mode average pools counting the padding whose last windows hang past it (``ceil_pool_counts``)."""

FUNCTIONAL_FILLS = Program(
    body=("v0 = x0 * 1", "v0[:, 1:3].zero_()", "v0[:, 4].fill_(-0.0)", "return (1 / v0,)"),
    inputs=(Input("x0", (3, 6), dynamic=True),),
)
"""Writes of one value through views, functionalized into a zero and a fill (``functional_fills``)."""

SELECTED_REDUCTIONS = Program(
    body=(
        "p = x0.sigmoid()",
        "p = p[p[:, 4] > 0.5]",
        "b = torch.cat([p[:, :2] * 64, p[:, :2] * 64 + p[:, 2:4] * 16 + 1], 1)",
        "s = p[:, 4]",
        "s *= p[:, 5]",
        "keep = ops.nms(b, s, 0.5)[:10]",
        "w = s[keep, None] * s[None] * (p[keep, None, 6] > p[None, :, 6])",
        "return (torch.mm(w, b) / (w.sum(1, keepdim=True) + 1), s.softmax(0), s.cumsum(0), b.amax(0), s.mean())",
    ),
    inputs=(Input("x0", (40, 7)),),
)
"""Reductions and a product across selected rows (YOLOv5's merge NMS), a score scaled in place
first (``pad_compactions``' ``reductions``)."""

FLIPPED_BOXES = Program(
    body=("b = x0[:, :4] * 16 + torch.tensor([0.0, 0.0, 12.0, 12.0])", "keep = ops.nms(b, x0[:, 4], 0.5)",
          "return (b[keep], keep)"),
    inputs=(Input("x0", (40, 5)),),
)
"""Boxes a raw decode can flip (x2 < x1 in about a third of them): torchvision's NMS takes the corners
as given, ``multiclass_nms`` normalizes them (``pad_compactions``' ``nms`` collapses flipped axes)."""

FIXED_BUFFER = Program(
    body=(
        "p = x0.sigmoid()",
        "p = p[p[:, 4] > 0.5]",
        "b = torch.cat([p[:, :2] * 64, p[:, :2] * 64 + p[:, 2:4] * 16 + 1], 1)",
        "keep = ops.nms(b, p[:, 4], 0.5)[:8]",
        "out = torch.full((8, 5), -1.0)",
        "n = keep.numel()",
        "out[:n, :4] = b[keep]",
        "out[:n, 4] = p[keep, 4]",
        "return (out, torch.tensor(n))",
    ),
    inputs=(Input("x0", (40, 7)),),
)
"""Kept rows written into a fixed-size buffer, and their count (``pad_compactions``' ``writes``)."""

SHARED_OUTPUTS = Program(
    body=("v = x0[:, :2] * 3", "return (x0, v, v)"),
    inputs=(Input("x0", (3, 4), dynamic=True),),
)
"""An input returned as it is, and one value returned twice (``distinct_outputs``)."""

RUNNING_EXTREMA = Program(
    body=("v0 = x0.round().cummax(1)", "v1 = torch.cummin(x0, -1)",
          "return (v0.values, v0.indices, v1.values, v1.indices)"),
    inputs=(Input("x0", (3, 8), dynamic=True),),
)
"""Running maxima with ties (rounded values) and running minima (``running_extrema``)."""

REGRESSIONS: dict[str, tuple[Program, set[str]]] = {
    "masked_maxes": (MASKED_MAXES, {"infinite_windows"}),
    "half_comparisons": (HALF_COMPARISONS, {"half_comparison_scalars", "half_rounding"}),
    "real_ffts": (REAL_FFTS, {"full_spectrum_rffts"}),
    "antialiased_resizes": (ANTIALIASED_RESIZES, {"antialiased_resizes"}),
    "key_padding_attention": (KEY_PADDING_ATTENTION, {"query_sized_masks"}),
    "empty_cat_inputs": (EMPTY_CAT_INPUTS, {"empty_cat_inputs"}),
    "clip_head": (CLIP_HEAD, {"functional_spellings", "einsum_products", "integer_powers"}),
    "eval_dropout_writes": (EVAL_DROPOUT_WRITES, set()),
    "yolo_xywh2xyxy": (YOLO_XYWH2XYXY, {"remove_noops"}),
    "detector_tail": (DETECTOR_TAIL, {"remove_noops", "pad_compactions", "host_postprocess_split"}),
    "detector_tail_dynamic_rows": (DETECTOR_TAIL_DYNAMIC_ROWS, {"pad_compactions"}),
    "swin_windows": (SWIN_WINDOWS, set()),
    "attention_heads": (ATTENTION_HEADS, {"contiguous_reshapes"}),
    "permute_then_view": (PERMUTE_THEN_VIEW, set()),
    "lookups": (LOOKUPS, {"value_lookups"}),
    "order_statistics": (ORDER_STATISTICS, {"order_statistics"}),
    "distances": (DISTANCES, {"pairwise_distances"}),
    "bytes": (BYTES, {"wrapping_bytes"}),
    "pool_divisors": (POOL_DIVISORS, {"pool_divisors"}),
    "ceil_pool_counts": (CEIL_POOL_COUNTS, {"ceil_pool_counts"}),
    "functional_fills": (FUNCTIONAL_FILLS, {"functional_fills"}),
    "selected_reductions": (SELECTED_REDUCTIONS, {"pad_compactions"}),
    "fixed_buffer": (FIXED_BUFFER, {"pad_compactions"}),
    "flipped_boxes": (FLIPPED_BOXES, {"pad_compactions"}),
    "shared_outputs": (SHARED_OUTPUTS, {"distinct_outputs"}),
    "running_extrema": (RUNNING_EXTREMA, {"running_extrema"}),
}
"""Each program and the passes that must rewrite it (a check of a pass that did not fire checks nothing)."""


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_known_hazards(name: str) -> None:
    program, rewritten_by = REGRESSIONS[name]
    outcome = validate(program)
    assert outcome.captured, outcome.reason
    assert not outcome.failures, outcome.report()
    assert outcome.feeds == 4 and not outcome.refused(), outcome.steps
    assert rewritten_by <= outcome.fired(), f"{sorted(rewritten_by - outcome.fired())} did not fire: {outcome.steps}"


TYPE_AS_OF_A_VIEW = Program(
    body=("v0 = x0 * 1", "v1 = v0.transpose(0, 1).type_as(v0)", "v0[:, 1:4] *= -2.0", "return (v1,)"),
    inputs=(Input("x0", (5, 6)),),
)
"""A view returned by ``type_as``, then a write into its base: eager's result holds the write."""


@pytest.mark.xfail(strict=True, reason=(
    "torch 2.13's run_decompositions({}) (fxdeploy/capture/functional.py) drops a write into the base of a view "
    "that type_as returned, so the captured graph differs from eager (lower()'s own check refuses the artifact)"))
def test_type_as_of_a_view_then_a_write_into_its_base() -> None:
    outcome = validate(TYPE_AS_OF_A_VIEW, pipelines={})
    assert outcome.captured and not outcome.failures, outcome.report()


def _vmap_views(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    return PassResult(gm, simplify(gm) > 0)


def _slice_scatters(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    return PassResult(gm, slice_scatters_as_cats(gm))


VECTORIZED_CLEANUP = (_slice_scatters, _vmap_views)
"""What fxdeploy.capture.vectorize runs on a vectorized program, here as passes on any program:
their rules must hold wherever they fire, not only on vmap's graphs."""


CLEANUP_FIRES = {"aliasing": {"_slice_scatters", "_vmap_views"}, "detection": {"_slice_scatters"}}


@pytest.mark.parametrize("family", sorted(CLEANUP_FIRES))
def test_the_vectorized_graph_cleanup_keeps_the_values_of_generated_programs(family: str) -> None:
    kinds, dynamic = FAMILIES[family]
    coverage = Coverage()

    @BUDGET
    @given(programs(kinds, dynamic))
    def check(program: Program) -> None:
        outcome = validate(program, pipelines={"vectorized": VECTORIZED_CLEANUP})
        coverage.add(outcome)
        assert not outcome.failures, outcome.report()

    check()
    print(f"{family}: {coverage}")  # noqa: T201 - what the budget covered, shown with -rP
    assert coverage.captured >= 0.8 * coverage.programs, coverage
    missing = CLEANUP_FIRES[family] - set(coverage.fired)
    assert not missing, f"never fired: {sorted(missing)}; {coverage}"
