"""ResNet-50 in bf16 against eager in fp32 and in bf16, side by side in one run.

The zoo table (benchmarks/zoo.py) is fp32 throughout, checked at 1e-4. This run asks what a
deployer on a CPU with native bf16 (AVX512_BF16 or AMX) gets from ``Settings(precision="bf16")``,
and compares it with what the same deployer could do without fxdeploy, at the same precision:

- eager PyTorch at fp32; eager with the model and input cast to bf16 (``model.to(torch.bfloat16)``);
  eager under ``torch.autocast("cpu", torch.bfloat16)``;
- peer: ``torch.onnx.export(dynamo=True)`` compiled by OpenVINO by hand with
  ``INFERENCE_PRECISION_HINT=bf16`` (the fp32 model, bf16 chosen by the engine), and OpenVINO's own
  ``torch.compile`` with the same hint;
- fxdeploy: openvino and torchscript at fp32 and at bf16.

Each row's error is its max abs logit error over eager fp32's, relative to eager's largest logit.
Timing follows docs/performance.md (warm-up >= 1 s, then >= 3 s and >= 50 runs, in interleaved rounds, 2 threads).

    .venv/bin/python benchmarks/bf16_bench.py [--rounds 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.zoo import resnet50  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize  # noqa: E402
from fxdeploy.settings import Settings  # noqa: E402

Call = Callable[[], torch.Tensor]


def eager_rows(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Call]:
    cast = copy.deepcopy(model).to(torch.bfloat16)
    x_bf16 = x.to(torch.bfloat16)

    def fp32() -> torch.Tensor:
        with torch.inference_mode():
            return model(x).logits

    def bf16_weights() -> torch.Tensor:
        with torch.inference_mode():
            return cast(x_bf16).logits

    def autocast() -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x).logits

    return {"eager fp32": fp32, "eager bf16 (model.to(bf16))": bf16_weights, "eager bf16 (autocast)": autocast}


PEERS = ("peer: onnx export + OpenVINO by hand, bf16 hint", "peer: OpenVINO torch.compile, bf16 hint")


def peer_rows(model: torch.nn.Module, x: torch.Tensor, threads: int, work: Path) -> dict[str, Call]:
    import openvino
    import openvino.torch  # noqa: F401 - registers the "openvino" torch.compile backend

    from fxdeploy.runtime.openvino import read_model

    rows: dict[str, Call] = {}
    core = openvino.Core()
    capabilities = list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    if "BF16" not in capabilities:  # OpenVINO would take the bf16 hint and run f32: not a bf16 row
        raise RuntimeError(f"no native bf16 on this CPU (OpenVINO's OPTIMIZATION_CAPABILITIES are {capabilities}), "
                           "where OpenVINO runs a bf16 hint at f32")
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "bf16",
              "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    path = work / "peer.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=True)
    request = core.compile_model(read_model(core, path), "CPU", config).create_infer_request()
    rows[PEERS[0]] = (
        lambda: torch.from_numpy(np.asarray(request.infer([x.numpy()])[0]))
    )
    options = {"device": "CPU", "aot_autograd": True,  # its default path fails on conv nets (zoo table)
               "config": {k: str(v) for k, v in config.items() if k != "NUM_STREAMS"}}
    compiled = torch.compile(model, backend="openvino", options=options)

    def compiled_call() -> torch.Tensor:
        with torch.inference_mode():
            return compiled(x).logits

    rows[PEERS[1]] = compiled_call
    return rows


def fxdeploy_rows(model: torch.nn.Module, x: torch.Tensor, threads: int) -> tuple[dict[str, Call], dict[str, str]]:
    """The rows, and those this CPU cannot run with the reason (bf16 on OpenVINO needs native bf16)."""
    rows: dict[str, Call] = {}
    skipped: dict[str, str] = {}
    for target in ("openvino", "torchscript"):
        for precision, atol in (("fp32", 1e-4), ("bf16", 3e-2)):
            settings = Settings(precision=precision, atol=atol, threads=threads)
            name = f"fxdeploy:{target} {precision}"
            try:
                deployed = fxdeploy.lower(model, (x,), target=target, settings=settings)
            except fxdeploy.TargetUnavailableError as exc:
                skipped[name] = " ".join(str(exc).split())
                continue
            rows[name] = lambda d=deployed: d(x).logits
    return rows, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    model, (images,) = resnet50()
    x = images[:1].contiguous()
    with pinned_threads(args.threads), tempfile.TemporaryDirectory() as work:
        rows, skipped = eager_rows(model, x), {}
        try:
            rows.update(peer_rows(model, x, args.threads, Path(work)))
        except RuntimeError as exc:
            skipped.update(dict.fromkeys(PEERS, str(exc)))
        ours, cannot = fxdeploy_rows(model, x, args.threads)
        rows.update(ours)
        skipped.update(cannot)
        with torch.inference_mode():
            want = model(x).logits
        scale = want.abs().max().item()
        errors = {name: (fn().float() - want).abs().max().item() / scale for name, fn in rows.items()}
        samples, failures = measure_interleaved(rows, Budget(rounds=args.rounds))
    medians = {name: summarize(s, warn=False)["median"] for name, s in samples.items()}
    print(table(medians, errors, failures))
    for name, reason in skipped.items():  # a contender this CPU cannot run is a row that says why
        print(f"| {name} | not run: {reason} | | | |")
    return 0


def table(medians: dict[str, float], errors: dict[str, float], failures: dict[str, str]) -> str:
    eager = medians["eager fp32"]
    eager_bf16 = min(v for k, v in medians.items() if k.startswith("eager bf16"))
    lines = ["| row | median ms | x eager fp32 | x best eager bf16 | rel. logit error |", "|---|---:|---:|---:|---:|"]
    for name, error in errors.items():
        if name in failures:
            lines.append(f"| {name} | failed: {failures[name]} | | | |")
            continue
        ms = medians[name]
        lines.append(f"| {name} | {ms:.2f} | {ms / eager:.2f}x | {ms / eager_bf16:.2f}x | {error:.1e} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
