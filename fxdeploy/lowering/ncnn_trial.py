"""The lowering's trial run of an ncnn engine on the example image, in a child process.

``ncnn_checks.input_layout`` feeds the engine each image without the batch axis, then with it as a
leading 1, to learn how pnnx wrote it. ncnn does not check a layer's parameters against the blobs it
gets: where pnnx could not tell the batch axis (a split or chunk of the input, with no convolution
before it), it keeps it, and a Slice along axis 3 of the per-image 3-D blob reads past it, a
segfault (SIGSEGV, or SIGFPE) that took lower()'s whole process with it. Here a crash ends a child:
the parent reads the layouts tried before it, counts the one that crashed as failed, and tries the
next in a new child.

Run by its path (``python ncnn_trial.py <work dir>``), it imports numpy and ncnn only (fxdeploy's
package would import torch: seconds a trial); the switches come from ``artifact/ncnn_options.py``,
loaded by its path too, so that the trial runs the net as the runtime does. The work dir holds
``trial.json`` (the param, the bin, the layouts to try) and ``trial.npz`` (``in<k>``, ``want<k>``);
each layout's result is printed as one JSON line as soon as it is known.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

TOLERANCE = 1e-3
"""An output matches PyTorch's within this, relative to the largest finite value (at least 1)."""


def errors(got: list[Any], want: list[Any]) -> list[float | str]:
    """Per output: its max error, ``missing`` (ncnn gave no blob: a layer gave up) or ``size``."""
    return ["missing" if mat is None else "size" if mat.size != ref.size else max_error(mat.reshape(ref.shape), ref)
            for mat, ref in zip(got, want, strict=True)]


def matches(found: list[float | str], want: list[Any]) -> bool:
    import numpy as np

    scale = max((float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0)) for ref in want), default=1.0)
    return all(isinstance(e, float) and e <= TOLERANCE * max(1.0, scale) for e in found)


def max_error(got: Any, want: Any) -> float:
    """The largest |got - want|; equal infinities (and NaN against NaN) count as equal, unequal ones as inf."""
    import numpy as np

    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(got - want))
    return float(np.where(np.isnan(diff), np.inf, diff).max(initial=0.0))


def _configure() -> Any:
    path = Path(__file__).resolve().parent.parent / "artifact" / "ncnn_options.py"
    spec = importlib.util.spec_from_file_location("_fxdeploy_ncnn_options", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.configure


def _run(net: Any, arrays: list[Any], outputs: int) -> list[Any]:
    import ncnn
    import numpy as np

    extractor = net.create_extractor()
    mats = [ncnn.Mat(np.ascontiguousarray(a)).clone() for a in arrays]
    for k, mat in enumerate(mats):
        extractor.input(f"in{k}", mat)
    got = []
    for k in range(outputs):
        code, mat = extractor.extract(f"out{k}")
        got.append(None if code != 0 or mat.dims == 0 else np.array(mat))
    return got


def main(work: Path) -> None:
    import ncnn
    import numpy as np

    job = json.loads((work / "trial.json").read_text())
    data = np.load(work / "trial.npz")
    inputs = [data[f"in{k}"] for k in range(job["inputs"])]
    want = [data[f"want{k}"] for k in range(job["outputs"])]
    net = ncnn.Net()
    _configure()(net.opt, threads=1, fp16=False)
    for path, loader in ((job["param"], net.load_param), (job["bin"], net.load_model)):
        if loader(path) != 0:
            print(json.dumps({"load": f"ncnn: loading {path} failed"}), flush=True)
            return
    for batched in job["layouts"]:
        arrays = [x if batched else x[0] for x in inputs]
        if any(a.ndim > 4 for a in arrays):  # ncnn.Mat raises a raw RuntimeError past 4 dims  # noqa: PLR2004
            found: list[float | str] | str = f"an input of {max(a.ndim for a in arrays)} dims"
        else:
            found = errors(_run(net, arrays, len(want)), want)
        ok = not isinstance(found, str) and matches(found, want)
        print(json.dumps({"batched": batched, "errors": found, "ok": ok}), flush=True)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent  # on sys.path first when run by path: its ncnn.py is not ncnn
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    main(Path(sys.argv[1]))
