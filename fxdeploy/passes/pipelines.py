"""Every target's pass pipeline, in one place, in order. Each ordering constraint is commented."""

from __future__ import annotations

from fxdeploy.partition.cut import host_postprocess_split
from fxdeploy.passes.adaptive_pools import adaptive_pools
from fxdeploy.passes.antialiased_resizes import antialiased_resizes
from fxdeploy.passes.base import Pass
from fxdeploy.passes.boolean_scalars import boolean_scalars
from fxdeploy.passes.boolean_selects import boolean_selects
from fxdeploy.passes.ceil_pool_counts import ceil_pool_counts
from fxdeploy.passes.contiguous_reshapes import contiguous_reshapes
from fxdeploy.passes.dense_encoder_layers import dense_encoder_layers
from fxdeploy.passes.distinct_outputs import distinct_outputs
from fxdeploy.passes.exact_score_sigmoid import exact_score_sigmoid
from fxdeploy.passes.float_floor_divisions import float_floor_divisions
from fxdeploy.passes.fold_batch_norm import fold_batch_norm
from fxdeploy.passes.full_spectrum_rffts import full_spectrum_rffts
from fxdeploy.passes.half_comparison_scalars import half_comparison_scalars
from fxdeploy.passes.half_rounding import half_rounding
from fxdeploy.passes.infinite_windows import infinite_windows
from fxdeploy.passes.ncnn.comparisons_as_arithmetic import comparisons_as_arithmetic
from fxdeploy.passes.ncnn.composite_ops import composite_ops
from fxdeploy.passes.ncnn.constant_lookups import constant_lookups
from fxdeploy.passes.ncnn.dynamic_slices import dynamic_slices
from fxdeploy.passes.ncnn.einsum_products import einsum_products
from fxdeploy.passes.ncnn.empty_cat_inputs import empty_cat_inputs
from fxdeploy.passes.ncnn.float_attention_mask import float_attention_mask
from fxdeploy.passes.ncnn.fold_constants import fold_constants
from fxdeploy.passes.ncnn.functional_fills import functional_fills
from fxdeploy.passes.ncnn.functional_spellings import functional_spellings
from fxdeploy.passes.ncnn.identity_indexing import identity_indexing
from fxdeploy.passes.ncnn.input_attention_masks import input_attention_masks
from fxdeploy.passes.ncnn.integer_powers import integer_powers
from fxdeploy.passes.ncnn.max_indices import max_indices
from fxdeploy.passes.ncnn.padded_copies import padded_copies
from fxdeploy.passes.ncnn.size_floor_divisions import size_floor_divisions
from fxdeploy.passes.ncnn.size_operands import size_operands
from fxdeploy.passes.ncnn.strided_slices import strided_slices
from fxdeploy.passes.ncnn.uneven_chunks import uneven_chunks
from fxdeploy.passes.ncnn.unfused_activations import unfused_activations
from fxdeploy.passes.ncnn.unit_broadcasts import unit_broadcasts
from fxdeploy.passes.ncnn.unit_selects import unit_selects
from fxdeploy.passes.ncnn.vacuous_masks import vacuous_masks
from fxdeploy.passes.order_statistics import order_statistics
from fxdeploy.passes.padding import pad_compactions
from fxdeploy.passes.pairwise_distances import pairwise_distances
from fxdeploy.passes.pool_divisors import pool_divisors
from fxdeploy.passes.precision_policy import precision_policy
from fxdeploy.passes.query_sized_masks import query_sized_masks
from fxdeploy.passes.refuse_random_ops import refuse_random_ops
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.passes.remove_dropout import remove_dropout
from fxdeploy.passes.remove_noops import remove_noops
from fxdeploy.passes.running_extrema import running_extrema
from fxdeploy.passes.scatter_reductions import scatter_reductions
from fxdeploy.passes.scatters_as_slices import scatters_as_slices
from fxdeploy.passes.tensorize_outputs import tensorize_outputs
from fxdeploy.passes.topk_of_selection import topk_of_selection
from fxdeploy.passes.value_lookups import value_lookups
from fxdeploy.passes.whole_input_pool import whole_input_pool
from fxdeploy.passes.wide_indices import wide_indices
from fxdeploy.passes.wide_integer_constants import wide_integer_constants
from fxdeploy.passes.wrapping_bytes import wrapping_bytes

# Cleanup first: asserts and dropout would otherwise hide NMS consumers from pattern matching.
# refuse_random_ops after remove_dropout, which takes the dropouts that return their input.
CLEANUP: tuple[Pass, ...] = (remove_asserts, remove_dropout, refuse_random_ops, remove_noops)
# dense_encoder_layers: PyTorch's fused encoder layer, which dynamo captures (strict capture,
# torch.compile) and no exporter translates, as public ops; right after cleanup, before any pass
# that reads attention (query_sized_masks reads the attention it writes). TorchScript runs the op.

# tensorize_outputs runs last: earlier passes may add or replace outputs (pad_compactions does); on
# the ONNX targets distinct_outputs after it copies an input returned, or a value returned twice.
# pad_compactions after cleanup (the asserts on data-dependent sizes are gone) and before
# tensorize_outputs (it adds the hidden count outputs and the trim records that tensorize_outputs
# describes). It makes every data-dependent size static, every NMS a multiclass_nms included.
# precision_policy after pad_compactions: it keeps the NMS inputs (and their box decoding) in fp32.
# scatters_as_slices: the exporter writes a select_scatter/slice_scatter as a ScatterElements or
# ScatterND with an index per element (torchvision's image batching: 8.5 ms an image on ONNX
# Runtime for a copy); as slices and a cat they are copies. After the passes that add or match
# writes and casts, and before contiguous_reshapes, which must see the reshapes it makes of views.
# contiguous_reshapes right before tensorize_outputs: it must see the final reshapes (for the
# ONNX exporter's decompositions; it changes no values).
# topk_of_selection right after pad_compactions, whose partitions it matches: a topk of selected
# rows reads the masked rows instead (ONNX's TopK breaks ties by the lower index; TorchScript's
# topk promises no order among ties, so its pipeline keeps the partition).
# antialiased_resizes on every ONNX target: OpenVINO reads an antialiased Resize as a plain one, and
# ONNX Runtime's antialiased cubic weights are not torch's; it changes no outputs, so anywhere after cleanup.
# pool_divisors on every ONNX target and ncnn: ONNX's AveragePool has no divisor override (torch.onnx
# drops it) and ncnn cannot load pnnx's layer for one; anywhere after cleanup, and before
# whole_input_pool, which then sees the plain pool. value_lookups on every ONNX target: torch.onnx has
# no searchsorted (and writes isin through one); after cleanup, which unwraps the constant sequences.
# order_statistics, pairwise_distances and running_extrema beside it: torch.onnx has no median,
# kthvalue, cdist, cummax or cummin. adaptive_pools beside them: torch.onnx decomposes an adaptive average
# pool at the example's sizes (its windows, its kernel), whatever the dims' ranges.
# wide_indices on every ONNX target: torch.onnx passes an int32 index of `x[:, ids]` on to GatherND, which
# takes int64 only; it changes no outputs, so anywhere after cleanup.
# scatter_reductions beside it: torch.onnx writes a scatter_reduce mean as a plain scatter and starts an
# amax without self from the lowest float, not -inf.
ONNX: tuple[Pass, ...] = (
    *CLEANUP, dense_encoder_layers, adaptive_pools, pool_divisors, value_lookups, order_statistics, pairwise_distances,
    running_extrema, antialiased_resizes, wide_indices, scatter_reductions, pad_compactions, topk_of_selection,
    precision_policy, scatters_as_slices, contiguous_reshapes, tensorize_outputs, distinct_outputs,
)
# ONNX Runtime: its Sigmoid does not saturate where torch's does, so score sigmoids are spelt out.
# exact_score_sigmoid after pad_compactions (it finds the sigmoids from multiclass_nms's scores)
# and after precision_policy (which keeps sigmoids in fp32 by name). Its Attention kernel refuses a
# mask broadcast over the queries (query_sized_masks; it changes no outputs, so anywhere after cleanup).
# Its CPU provider has no f16 kernel for most ops: it computes them in f32 between casts it inserts,
# and removes each Cast f32 -> f16 -> f32 pair (even with graph optimizations off), so the model's
# own half values go unrounded: half_rounding, as on OpenVINO below.
# Its CPU provider has no Where kernel for bool: boolean_selects spells a select between booleans
# (`where(valid, mask, False)`) with And, Or and Not; after the passes that write selects, before tensorize_outputs.
# infinite_windows after pad_compactions and precision_policy (it guards the max pools and
# reductions of the final graph, in their final dtype): ONNX Runtime's padded MaxPool and OpenVINO's
# MaxPool and ReduceMax give the lowest float, not -inf, over a window of -inf only (and OpenVINO's
# ReduceMin the highest, not +inf, over a row of +inf only).
ONNXRUNTIME: tuple[Pass, ...] = (
    *CLEANUP, dense_encoder_layers, adaptive_pools, pool_divisors, value_lookups, order_statistics, pairwise_distances,
    running_extrema, antialiased_resizes, wide_indices, scatter_reductions, query_sized_masks, half_comparison_scalars,
    pad_compactions, topk_of_selection, precision_policy, exact_score_sigmoid, infinite_windows, scatters_as_slices,
    half_rounding, boolean_selects, contiguous_reshapes, tensorize_outputs, distinct_outputs,
)
# OpenVINO: its CPU plugin refuses a pooling window larger than the input (whole_input_pool), and
# its ONNX import of a one-sided DFT keeps a unit dim (full_spectrum_rffts); they change no outputs,
# so anywhere after cleanup. Its CPU plugin computes f16 in f32 and drops the Cast to f16:
# half_rounding spells the rounding of the half values a comparison reads, after
# half_comparison_scalars (whose casts to half it rounds too) and the passes that make comparisons.
# Its CPU plugin saturates uint8 and int8 arithmetic, which torch wraps: wrapping_bytes computes it in
# int32 and wraps it (it changes no outputs, so anywhere after cleanup).
# float_floor_divisions right after cleanup: it refuses a float `//`, `%` or fmod of the user's (OpenVINO has no
# exact fmod) unless the divisor is a power of two; it changes nothing, and no pass writes a float one.
# wide_integer_constants beside it: a number of the user's past int32 in int64 arithmetic (OpenVINO computes int64
# as int32); before the other passes, so that it judges the user's numbers only.
# ceil_pool_counts on OpenVINO and ncnn: both count a ceil-mode window's part past the padding in its
# divisor; after pool_divisors (a divisor override is its), before whole_input_pool (a plain pool).
OPENVINO: tuple[Pass, ...] = (
    *CLEANUP, float_floor_divisions, wide_integer_constants, dense_encoder_layers, adaptive_pools, pool_divisors,
    ceil_pool_counts, value_lookups, order_statistics, pairwise_distances, running_extrema, whole_input_pool,
    full_spectrum_rffts, wrapping_bytes, antialiased_resizes, wide_indices, scatter_reductions, half_comparison_scalars,
    pad_compactions, topk_of_selection, precision_policy, infinite_windows, scatters_as_slices, half_rounding,
    contiguous_reshapes, tensorize_outputs, distinct_outputs,
)
# TorchScript runs every op it is given: inference BatchNorms fold into their convolutions (the ONNX
# runtimes and pnnx fold them themselves); before precision_policy, which may cast the weights.
# boolean_scalars: TorchScript reads a Python bool operand as an int (`where(m, True, False)`,
# `mask & True` came back int64); right before tensorize_outputs, so it sees every op the passes write.
TORCHSCRIPT: tuple[Pass, ...] = (
    *CLEANUP, fold_batch_norm, pad_compactions, precision_policy, boolean_scalars, tensorize_outputs,
)
# ncnn: whole_input_pool as on OpenVINO (ncnn's pooling gives NaN there); no precision policy
# (ncnn's own fp16 switches set the precision, engine-wide), then the pnnx/ncnn workarounds
# (they change no outputs), then the host split last: it cuts the final graph, so it must see the
# final outputs and every NMS. unit_broadcasts after unit_selects: a
# per-layer position embedding's select becomes a squeeze first, leaving the [1, N, C] operand.
# vacuous_masks before float_attention_mask: an all-True mask goes, rather than becoming a float one.
# constant_lookups after fold_constants (BERT's token-type buffer, gathered and expanded, is a constant).
# identity_indexing before fold_constants (it reads the aranges a padding mask is indexed by, which
# fold_constants would fold at a fixed size) and the mask passes; input_attention_masks
# after vacuous_masks (an all-True mask goes) and before float_attention_mask (which takes the constant ones).
# max_indices right before the split: the argmax it spells out must be seen by the split (host).
# comparisons_as_arithmetic after fold_constants (a folded constant operand has a known bound) and
# after the attention-mask passes (which turn bool masks into float ones themselves); before the
# split, so that a comparison it spells stays in the engine.
# fold_constants after pad_compactions (which adds aranges of static bounds) and before the
# respellings: the anchor grids it folds are then no ops for them to see. padded_copies and
# scatters_as_slices (the functional writes) before it: a buffer written into goes as a whole,
# rather than as constants of each of its views; padded_copies first: a write into a fill buffer
# is a pad, where scatters_as_slices would cat constant slices of the buffer.
# size_floor_divisions right after cleanup (which drops the asserts that read sizes): ncnn's size
# expressions truncate a negative size's // (the ONNX targets translate it: onnx_translations/division.py);
# no pass after it writes a division of sizes.
# empty_cat_inputs first: pnnx hangs on a cat with an empty input (a cat of nothing else is left alone).
# functional_spellings next: the passes after it match reshapes and clamps by their public ops;
# einsum_products and integer_powers beside it (spellings too). functional_fills beside them (torch.jit.trace
# asserts on a functional zero or fill); before padded_copies and fold_constants, which read the factory ops.
# uneven_chunks beside them (a spelling: an uneven chunk as the split it is). composite_ops beside them too
# (var, diff, tile... as the ops that define them), before comparisons_as_arithmetic (which takes the
# any/all/count_nonzero it spells as reductions of masks) and size_operands (a var's divisor of sizes).
# unfused_activations after composite_ops (addcdiv's x / (|x| + 1) is a softsign to pnnx).
# dynamic_slices after every pass that writes slices (composite_ops' diff, strided_slices).
# size_operands after the passes that write arithmetic (comparisons_as_arithmetic) and before the split,
# which runs the tensor it makes from a size on the host (made from sizes alone).
NCNN: tuple[Pass, ...] = (
    *CLEANUP, size_floor_divisions, dense_encoder_layers, empty_cat_inputs, functional_spellings, functional_fills,
    einsum_products, integer_powers, uneven_chunks, composite_ops, unfused_activations,
    pool_divisors, ceil_pool_counts, whole_input_pool, pad_compactions, tensorize_outputs, padded_copies,
    scatters_as_slices, identity_indexing, fold_constants, constant_lookups, vacuous_masks, input_attention_masks,
    float_attention_mask, comparisons_as_arithmetic, strided_slices, dynamic_slices, unit_selects, unit_broadcasts,
    size_operands, max_indices, host_postprocess_split,
)

PIPELINES: dict[str, tuple[Pass, ...]] = {
    "onnxruntime": ONNXRUNTIME,
    "openvino": OPENVINO,
    "tensorrt": ONNX,
    "ncnn": NCNN,
    "torchscript": TORCHSCRIPT,
}


def pipeline_for(target: str) -> tuple[Pass, ...]:
    try:
        return PIPELINES[target]
    except KeyError:
        raise KeyError(f"no pass pipeline for target {target!r}; known: {sorted(PIPELINES)}") from None
