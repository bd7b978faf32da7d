"""Lowering in a fresh interpreter, so its time and peak memory are its own.

In one long process, whichever lowering runs first pays the imports (torch.onnx, onnxscript,
a runtime) and fills allocator caches the later ones reuse. So each lowering (or plain
``torch.onnx.export``, for the peer and for the core benchmark) runs in
``python -m fxdeploy.bench.isolated`` and reports:
- ``lower_s``: wall time of the lowering call alone (imports and model construction excluded,
  lazy imports inside the call included: a CLI user pays those too);
- ``peak_rss_mb``: the child's peak RSS *during the call*. Building a model can peak higher than
  lowering it (transformers' random init does), which would hide the call's own peak in a plain
  ``ru_maxrss``; so the kernel's high-water mark is reset right before the call (writing 5 to
  ``/proc/self/clear_refs``) and ``VmHWM`` is read after it. The figure includes what the process
  already held (interpreter, torch, the model): ``base_rss_mb``, its RSS at the reset. Where the
  reset is not possible, ``peak_scope`` is "process" and the figure is the lifetime ``ru_maxrss``.
The model comes from a factory spec (``file.py:factory``) or from a ``torch.save`` pickle; the
inputs always come from a ``torch.save`` file.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class IsolatedResult:
    ok: bool
    error: str = ""
    stage: str = ""
    """where it failed: "load" (the model could not be re-created in the child) or "lower"."""
    lower_s: float | None = None
    peak_rss_mb: float | None = None
    base_rss_mb: float | None = None
    peak_scope: str = "call"


def run_isolated(request: dict[str, Any], work: Path, timeout: float = 1800) -> IsolatedResult:
    """Run one request in a child interpreter; ``request["out"]`` is where the artifact goes."""
    work.mkdir(parents=True, exist_ok=True)
    request_file, result_file = work / "request.json", work / "result.json"
    request_file.write_text(json.dumps(request))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run(
        [sys.executable, "-m", "fxdeploy.bench.isolated", str(request_file), str(result_file)],
        capture_output=True, text=True, env=env, timeout=timeout,
    )
    if not result_file.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return IsolatedResult(False, f"child exited with code {proc.returncode}: " + " | ".join(tail), "lower")
    return IsolatedResult(**json.loads(result_file.read_text()))


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
    """Linux >= 4.0: make VmHWM restart from the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_mb(reset: bool) -> float:
    if reset:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _load(request: dict[str, Any]) -> tuple[Any, tuple[Any, ...], Any]:
    """(model, inputs, substitutions): a spec's file may declare its own substitutions."""
    import torch

    torch.set_num_threads(int(request["threads"]))
    inputs = torch.load(request["inputs"], weights_only=True)
    if request.get("spec"):
        from fxdeploy.cli.model_spec import load_factory, load_substitutions

        model, _ = load_factory(request["spec"])
        return model.eval(), tuple(inputs), load_substitutions(request["spec"])
    return torch.load(request["model"], weights_only=False).eval(), tuple(inputs), None


def _lower(request: dict[str, Any], model: Any, inputs: tuple[Any, ...], substitutions: Any) -> tuple[float, Any]:
    out = Path(request["out"])
    if request["action"] == "onnx_export":
        import torch

        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        torch.onnx.export(model, inputs, str(out / "model.onnx"), dynamo=True)
        return time.perf_counter() - start, None
    import fxdeploy

    settings = fxdeploy.Settings.from_dict(request["settings"])
    start = time.perf_counter()
    deployed = fxdeploy.lower(model, inputs, target=request["target"], settings=settings, substitutions=substitutions)
    return time.perf_counter() - start, deployed


def main(request_file: str, result_file: str) -> None:
    request = json.loads(Path(request_file).read_text())
    result: dict[str, Any]
    try:
        model, inputs, substitutions = _load(request)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which falls back in-process
        result = {"ok": False, "stage": "load", "error": f"{type(exc).__name__}: {exc}"[:2000]}
    else:
        gc.collect()
        reset = _reset_peak()
        base = _rss_mb()
        try:
            lower_s, deployed = _lower(request, model, inputs, substitutions)
            peak = _peak_mb(reset)
            if deployed is not None:
                deployed.save(request["out"])
            result = {"ok": True, "lower_s": lower_s, "peak_rss_mb": peak, "base_rss_mb": base,
                      "peak_scope": "call" if reset else "process"}
        except Exception as exc:  # noqa: BLE001
            result = {"ok": False, "stage": "lower", "error": f"{type(exc).__name__}: {exc}"[:2000]}
    Path(result_file).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
