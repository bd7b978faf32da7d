"""Two commits' artifacts side by side: the same detectors lowered by each, timed interleaved in one
process, and their outputs compared element for element.

Needs the detector environment (`make det-venv`). Lower with each checkout, then time:

    git worktree add /tmp/before <commit>
    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/artifact_ab.py lower /tmp/before /tmp/ab/before
    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/artifact_ab.py lower . /tmp/ab/after
    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/artifact_ab.py time /tmp/ab/before /tmp/ab/after --model retinanet

``lower`` imports fxdeploy from the checkout it is given (first on ``sys.path``) and writes, for
RetinaNet and YOLO11n (Ultralytics' NMS), an ONNX Runtime and an OpenVINO artifact each batched
(one engine call per batch) and per image, with a dynamic batch 1..8 and 2 threads (``verify=False``
to keep it short: ``time`` compares the two sets' outputs instead). ``time`` loads
both sets with this checkout's fxdeploy (an artifact carries its graph; the executors are this
checkout's) and prints medians at ``--batch`` images, the batched/per-image ratio of each set, the
after/before ratio of each artifact, and whether each pair's outputs are equal.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")
TARGETS = ("onnxruntime", "openvino")
ENGINES = ("vectorize", "per_image")


def _models() -> dict:
    from examples.torchvision_detectors import images, retinanet
    from examples.ultralytics_yolo import YoloWithNMS, build
    from examples.ultralytics_yolo import images as yolo_images

    # the examples' builders, not batched_engine.MODELS: that module imports fxdeploy from this checkout
    return {
        "retinanet": (lambda: retinanet()[0], images),
        "yolo11n": (lambda: YoloWithNMS(build("yolo11n.yaml")), yolo_images),
    }


def lower(root: Path, out: Path, models: list[str]) -> None:
    sys.path.insert(0, str(root.resolve()))
    import fxdeploy

    for name, (build, images) in _models().items():
        if name not in models:
            continue
        model = build()
        for target in TARGETS:
            for engine in ENGINES:
                settings = fxdeploy.Settings(threads=2, batching=engine, verify=False)
                deployed = fxdeploy.lower(model, (images(2, 0),), target=target, settings=settings,
                                          dynamic_shapes={"images": {0: ("batch", 1, 8)}})
                deployed.save(out / f"{name}_{target}_{engine}")
    print("lowered with", fxdeploy.__file__, "into", out)


def time_both(before: Path, after: Path, model: str, batch: int, runs: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch
    from torch.utils._pytree import tree_flatten

    import fxdeploy
    from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize

    x = _models()[model][1](batch, 7)
    sets = {"before": before, "after": after}
    deployed = {(tag, t, e): fxdeploy.load(path / f"{model}_{t}_{e}")
                for tag, path in sets.items() for t in TARGETS for e in ENGINES}
    with pinned_threads(2), torch.no_grad():
        outputs = {key: d(x) for key, d in deployed.items()}
        budget = Budget(warmup_s=0.0, warmup_runs=1, min_time_s=0.0, min_runs=runs, rounds=5)
        samples, failures = measure_interleaved({key: (lambda d=d: d(x)) for key, d in deployed.items()}, budget)
    if failures:
        raise SystemExit(f"failed: {failures}")
    median = {key: summarize(s, batch, warn=False)["median"] for key, s in samples.items()}
    print(f"| artifact ({model}, batch {batch}, 2 threads) | before ms | after ms | after / before | equal outputs |")
    print("|---|---:|---:|---:|---|")
    for t in TARGETS:
        for e in ENGINES:
            old, new = median[("before", t, e)], median[("after", t, e)]
            a, b = tree_flatten(outputs[("before", t, e)])[0], tree_flatten(outputs[("after", t, e)])[0]
            equal = len(a) == len(b) and all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
            print(f"| {t} {e} | {old:.2f} | {new:.2f} | {new / old:.3f}x | {'yes' if equal else 'NO'} |")
    for tag in sets:
        ratios = ", ".join(f"{t} {median[(tag, t, 'vectorize')] / median[(tag, t, 'per_image')]:.2f}x" for t in TARGETS)
        print(f"{tag}: batched / per-image: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    low = sub.add_parser("lower")
    low.add_argument("root", type=Path)
    low.add_argument("out", type=Path)
    low.add_argument("--models", nargs="+", choices=("retinanet", "yolo11n"), default=["retinanet", "yolo11n"])
    tim = sub.add_parser("time")
    tim.add_argument("before", type=Path)
    tim.add_argument("after", type=Path)
    tim.add_argument("--model", choices=("retinanet", "yolo11n"), default="retinanet")
    tim.add_argument("--batch", type=int, default=8)
    tim.add_argument("--runs", type=int, default=5, help="timed calls per artifact, over 5 interleaved rounds")
    args = parser.parse_args()
    if args.command == "lower":
        lower(args.root, args.out, args.models)
    else:
        time_both(args.before, args.after, args.model, args.batch, args.runs)


if __name__ == "__main__":
    main()
