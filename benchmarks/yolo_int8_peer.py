"""YOLO11n INT8 on OpenVINO: fxdeploy against Ultralytics' ``export(format="openvino", int8=True)``,
calibrated on the same images, in one run.

Needs the detector environment (`make det-venv`):

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/yolo_int8_peer.py [--images 64] [--batch 8]

The calibration images are written as PNGs into a local data set (a data yaml with empty label
files, nothing downloaded); Ultralytics' exporter reads them through its own loader, fxdeploy
gets the same PNGs as tensors. Contenders, timed end to end (images in, per-image [n, 6] rows
out), interleaved, 2 threads: eager fp32; Ultralytics' INT8 IR followed by its
``non_max_suppression`` on the host; fxdeploy's INT8 artifact (NMS in the engine). Each
contender's detections are paired with eager fp32's (label, IoU >= 0.9).

The model is built from its yaml with random weights (class layers scaled up for distinct
scores), which amplifies INT8's rounding: both contenders lose detections. fxdeploy's INT8
artifact is lowered with ``verify=False`` for that reason (its check refuses it); the pairing
column is the comparison.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("YOLO_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.ultralytics_yolo import YoloWithNMS, build, images  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize  # noqa: E402
from fxdeploy.parity.boxes import Detections  # noqa: E402
from fxdeploy.parity.match import Rules, Tolerance, match_image  # noqa: E402

THREADS = 2
SIZE = 320


def write_dataset(folder: Path, count: int) -> tuple[Path, torch.Tensor]:
    """``count`` synthetic images as PNGs with empty labels, the data yaml, and the images as read back."""
    from PIL import Image

    pictures = (images(count, 100) * 255).round().to(torch.uint8)
    for split in ("train", "val"):
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        (folder / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i, picture in enumerate(pictures):
            Image.fromarray(picture.permute(1, 2, 0).numpy()).save(folder / "images" / split / f"{i:04d}.png")
            (folder / "labels" / split / f"{i:04d}.txt").write_text("")
    names = "\n".join(f"  {i}: class{i}" for i in range(80))
    data = folder / "data.yaml"
    data.write_text(f"path: {folder}\ntrain: images/train\nval: images/val\nnames:\n{names}\n")
    return data, pictures.float() / 255


def detections(rows: list[torch.Tensor]) -> list[Detections]:
    return [Detections(r[:, :4].float(), r[:, 4].float(), r[:, 5].long()) for r in rows]


def paired(want: list[torch.Tensor], got: list[torch.Tensor]) -> tuple[int, int]:
    rules = Rules(0.9, Tolerance(1.0), Tolerance(1.0))
    matches = [match_image(i, w, g, rules) for i, (w, g) in enumerate(zip(detections(want), detections(got),
                                                                             strict=True))]
    return sum(m.matched for m in matches), sum(len(w) for w in want)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    import openvino as ov
    import torchvision  # noqa: F401  (Ultralytics runs torchvision's NMS)
    from ultralytics import YOLO
    from ultralytics.utils.nms import non_max_suppression

    net = build("yolo11n.yaml")
    model = YoloWithNMS(net)
    home = Path.cwd()
    with tempfile.TemporaryDirectory() as work, pinned_threads(THREADS), torch.no_grad():
        data, calibration_images = write_dataset(Path(work) / "shapes", args.images)
        calibration = [(calibration_images[i : i + 4],) for i in range(0, len(calibration_images), 4)]
        ours = fxdeploy.lower(model, (images(2, 0),), target="openvino",
                              dynamic_shapes={"images": {0: ("batch", 1, 8)}},
                              settings=fxdeploy.Settings(precision="int8", threads=THREADS, verify=False),
                              calibration=fxdeploy.Calibration(calibration, samples=len(calibration)))
        yolo = YOLO("yolo11n.yaml")
        yolo.model = copy.deepcopy(net)
        os.chdir(work)
        exported = Path(yolo.export(format="openvino", int8=True, data=str(data), imgsz=SIZE, batch=args.batch,
                                    fraction=1.0)).resolve()  # relative to the cwd it writes in
        os.chdir(home)
        xml = next(exported.glob("*.xml"))
        compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_NUM_THREADS": THREADS})

        def theirs(x: torch.Tensor) -> list[torch.Tensor]:
            raw = torch.from_numpy(compiled(x.numpy())[0])
            return non_max_suppression(raw, model.conf, model.iou, max_det=model.max_det)

        x = images(args.batch, 7)
        want = model(x)
        contenders = {"eager fp32": lambda: model(x), "ultralytics openvino int8": lambda: theirs(x),
                      "fxdeploy openvino int8": lambda: ours(x)}
        samples, failures = measure_interleaved(contenders, Budget())
    print(f"YOLO11n, batch {args.batch}, {THREADS} threads, {args.images} calibration images")
    print("| contender | median ms | eager fp32's detections paired (label, IoU >= 0.9) |")
    print("|---|---:|---|")
    for name, call in contenders.items():
        if name in failures:
            print(f"| {name} | failed: {failures[name][:80]} | |")
            continue
        got, total = paired(want, call())
        print(f"| {name} | {summarize(samples[name], warn=False)['median']:.2f} | {got} of {total} |")


if __name__ == "__main__":
    main()
