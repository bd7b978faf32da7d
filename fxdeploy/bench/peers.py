"""The peers a user would pick instead of fxdeploy, each used the way its own docs show.

- ``torch.onnx.export(dynamo=True)`` and a plain ``onnxruntime.InferenceSession``, with the same
  thread settings and optimization level the fxdeploy ORT target uses (so the difference between
  the two rows is fxdeploy's graph and call path, not a knob);
- OpenVINO's own ``torch.compile(backend="openvino")`` at f32 (its CPU plugin would otherwise pick
  bf16 where the CPU has it, and the rows would not compute the same thing). With torch 2.13 its
  default path fails on convolutional models ("sources must not be empty for symbol ..."); the
  documented ``aot_autograd=True`` option works, so it is tried next and the row says so;
- pnnx + ncnn, in ``ncnn_peer.py``.

Every timed call goes from the model's torch tensors, as the model's callers hold them, to the
model's own output structure, as eager returns it: ``Deployed.__call__`` and OpenVINO's
``torch.compile`` deliver that structure themselves, so the ORT and ncnn peers' timed calls include
``adapt``, which rebuilds it from the runtime's arrays (one precomputed ``tree_unflatten``, the same
work ``Deployed`` does). Without it the rows would not do the same work: an HF ``ModelOutput`` alone
costs ~6 us to build, 5% of a 0.1 ms model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from fxdeploy.bench.context import BenchContext, Row, directory_bytes
from fxdeploy.bench.rows import in_inference_mode
from fxdeploy.errors import first_line

ORT_IR_VERSION = 10


def ort_peer_row(ctx: BenchContext, reference: Any) -> Row:
    row = Row("peer:onnx-export+ort", "peer")
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as exc:
        return row.failed(f"not installed: {exc}", "unavailable")
    row.version = f"onnxruntime {ort.__version__}"
    out = ctx.work / "peer-onnx"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    result = ctx.isolated({"action": "onnx_export", "out": str(out)}, "onnx-export")
    try:
        if result is None:
            start = time.perf_counter()
            torch.onnx.export(ctx.model, ctx.inputs, str(path), dynamo=True)
            row.lower_s, row.lower_measurement = time.perf_counter() - start, "in-process"
        elif not result.ok:
            return row.failed(f"torch.onnx.export failed: {result.error}")
        else:
            row.lower_s, row.lower_peak_rss_mb = result.lower_s, result.peak_rss_mb
            row.lower_base_rss_mb, row.lower_measurement = result.base_rss_mb, "subprocess"
        model = onnx.load(str(path))
        if model.ir_version > ORT_IR_VERSION:
            model.ir_version = ORT_IR_VERSION
            onnx.save(model, str(path))
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = ctx.threads, 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001
        return row.failed(f"onnx export + session failed: {first_line(exc)}")
    tensors = [x for x in pytree.tree_leaves(ctx.inputs) if isinstance(x, torch.Tensor)]
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(tensors):
        return row.failed(f"the exported graph has {len(names)} inputs, the model takes {len(tensors)}")
    row.artifact_bytes = directory_bytes(out)
    # from the model's torch tensors, as the torch.onnx tutorial feeds ORT (``x.numpy()``)
    row.fn = lambda: session.run(None, {name: x.numpy() for name, x in zip(names, tensors, strict=True)})
    rebuild = unflattener(reference)
    row.adapt = lambda raw: rebuild([torch.from_numpy(np.asarray(a)) for a in raw])
    return row


def openvino_peer_row(ctx: BenchContext) -> Row:
    """Default options first; if those fail, the documented ``aot_autograd`` option, noted in the row."""
    row = Row("peer:openvino-compile", "peer", lower_measurement="in-process")
    try:
        import openvino
        import openvino.torch  # noqa: F401 - registers the "openvino" torch.compile backend
    except ImportError as exc:
        return row.failed(f"not installed: {exc}", "unavailable")
    config = {"INFERENCE_NUM_THREADS": str(ctx.threads), "INFERENCE_PRECISION_HINT": "f32",
              "PERFORMANCE_HINT": "LATENCY"}
    failures = []
    for extra in ({}, {"aot_autograd": True}):
        try:
            options = {"device": "CPU", "config": config, **extra}
            compiled = torch.compile(ctx.model, backend="openvino", options=options)
            fn = in_inference_mode(compiled, ctx.inputs)
            start = time.perf_counter()
            fn()
            row.lower_s = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001
            failures.append(f"options {extra or 'default'}: {first_line(exc)}")
            continue
        note = f" with {extra} (default options failed: {failures[0]})" if extra else ""
        row.version, row.fn = f"openvino {openvino.__version__}{note}"[:500], fn
        return row
    return row.failed("torch.compile(backend='openvino') failed: " + "; ".join(failures))


def unflattener(reference: Any) -> Callable[[list[torch.Tensor]], Any]:
    """A function that puts the runtime's output tensors, in leaf order, into ``reference``'s structure.

    The structure is flattened once, here, so each call costs one ``tree_unflatten``.
    """
    leaves, spec = pytree.tree_flatten(reference)
    slots = [isinstance(x, torch.Tensor) for x in leaves]
    expected = sum(slots)

    def rebuild(values: list[torch.Tensor]) -> Any:
        if len(values) != expected:
            raise ValueError(f"{len(values)} outputs, the model returns {expected} tensor leaves")
        it = iter(values)
        return pytree.tree_unflatten([next(it) if slot else x for slot, x in zip(slots, leaves, strict=True)], spec)

    return rebuild
