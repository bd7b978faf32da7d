"""YOLO11n with Ultralytics' NMS: fxdeploy's targets against Ultralytics' own exports, in one run.

Needs the detector environment (`make det-venv`):

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/yolo_peers.py [--batches 1 4 8] [--config yolo11n.yaml]

Contenders, each timed end to end (images in, per-image [n, 6] detections out), interleaved:
- eager: the model followed by ``ultralytics.utils.nms.non_max_suppression``;
- fxdeploy:<target>: ``fxdeploy.lower`` of that same module, no substitution, dynamic batch;
- ultralytics:onnx-nms: ``model.export(format="onnx", nms=True)`` on an ONNX Runtime session;
- ultralytics:<format> for openvino, torchscript, ncnn: the exported network, then Ultralytics'
  ``non_max_suppression`` on the host, as its predictor runs them; OpenVINO as its predictor
  compiles it (no precision hint: bf16 on a CPU with native bf16) and held at f32
  (``openvino-f32``); fxdeploy's OpenVINO at fp32 and at bf16 (``openvino-bf16``); fxdeploy's
  ONNX Runtime and OpenVINO with one engine call per image, one after the other
  (``-per-image-one-stream``), where by default the engine takes the whole batch; fxdeploy's
  OpenVINO with its dynamic-shaped model only (``openvino-dynamic-only``: ``static_shapes=0``),
  where by default a batch size called again runs a model compiled for it.
Every contender's detections are matched with eager's (label and IoU >= 0.99, scores within
1e-3): the table says how many match, miss or are extra.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("YOLO_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.ultralytics_yolo import YoloWithNMS, build, images  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize  # noqa: E402
from fxdeploy.parity.boxes import Detections  # noqa: E402
from fxdeploy.parity.detections import compare_detections  # noqa: E402
from fxdeploy.targets.sections import OpenVinoSettings  # noqa: E402

THREADS = 2
Rows = list[torch.Tensor]


def as_detections(rows: Rows) -> list[Detections]:
    return [Detections(r[:, :4].float(), r[:, 4].float(), r[:, 5].long()) for r in rows]


def ultralytics_peers(net: torch.nn.Module, config: str, batch: int, work: Path, nms: Callable[[Any], Rows]) -> dict:
    """Ultralytics' exports of ``net`` at this batch, each as a callable from images to rows."""
    import ncnn
    import onnxruntime as ort
    import openvino as ov
    from ultralytics import YOLO

    yolo = YOLO(config)
    yolo.model = copy.deepcopy(net)  # the exporter fuses batch norms into the model it is given
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # Ultralytics writes each export beside the model's yaml name, in the cwd
    peers: dict[str, Callable[[torch.Tensor], Rows]] = {}
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(yolo.export(format="onnx", nms=True, imgsz=320, batch=batch)), options)

    def onnx_nms(x: torch.Tensor) -> Rows:
        out = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        return [rows[rows[:, 4] > 0] for rows in out]  # padded rows carry score 0

    peers["ultralytics:onnx-nms"] = onnx_nms
    ov_xml = str(Path(yolo.export(format="openvino", imgsz=320, batch=batch)) / f"{Path(config).stem}.xml")
    compiled = ov.Core().compile_model(ov_xml, "CPU", {"INFERENCE_NUM_THREADS": THREADS})
    peers["ultralytics:openvino"] = lambda x: nms(torch.from_numpy(compiled(x.numpy())[0]))
    # OpenVINO's CPU plugin infers in bf16 by default where the CPU has native bf16 (AVX512_BF16,
    # AMX): Ultralytics' predictor passes no precision hint. The same export held at f32, too.
    compiled_f32 = ov.Core().compile_model(
        ov_xml, "CPU", {"INFERENCE_NUM_THREADS": THREADS, "INFERENCE_PRECISION_HINT": "f32"}
    )
    peers["ultralytics:openvino-f32"] = lambda x: nms(torch.from_numpy(compiled_f32(x.numpy())[0]))
    scripted = torch.jit.load(yolo.export(format="torchscript", imgsz=320, batch=batch))

    def torchscript_run(x: torch.Tensor) -> Rows:
        raw = scripted(x)
        return nms(raw[0] if isinstance(raw, (tuple, list)) else raw)

    peers["ultralytics:torchscript"] = torchscript_run
    folder = Path(yolo.export(format="ncnn", imgsz=320, batch=1))
    net_ncnn = ncnn.Net()
    net_ncnn.opt.num_threads = THREADS
    net_ncnn.load_param(str(folder / "model.ncnn.param"))
    net_ncnn.load_model(str(folder / "model.ncnn.bin"))

    def ncnn_run(x: torch.Tensor) -> Rows:  # ncnn runs one image at a time
        outs = []
        for image in x:
            extractor = net_ncnn.create_extractor()
            extractor.input("in0", ncnn.Mat(image.numpy()).clone())
            outs.append(torch.from_numpy(np.array(extractor.extract("out0")[1]))[None])
        return nms(torch.cat(outs))

    peers["ultralytics:ncnn"] = ncnn_run
    return peers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--config", default="yolo11n.yaml")
    parser.add_argument("--targets", nargs="+", default=["onnxruntime", "openvino", "torchscript", "ncnn"])
    args = parser.parse_args()
    import torchvision  # noqa: F401  (Ultralytics then runs torchvision's NMS, as fxdeploy's capture does)
    from ultralytics.utils.nms import non_max_suppression

    net = build(args.config)
    model = YoloWithNMS(net)

    def nms(raw: torch.Tensor) -> Rows:
        return non_max_suppression(raw, model.conf, model.iou, max_det=model.max_det)

    dynamic = {"images": {0: ("batch", 1, 8)}}
    variants = [(f"fxdeploy:{t}", t, fxdeploy.Settings(threads=THREADS)) for t in args.targets]
    if "openvino" in args.targets:  # at the precision OpenVINO picks by itself on a bf16 CPU
        variants.append(("fxdeploy:openvino-bf16", "openvino",
                         fxdeploy.Settings(threads=THREADS, precision="bf16", verify=False)))
    if "openvino" in args.targets:  # one compiled model for every batch, OpenVINO's dynamic shapes
        variants.append(("fxdeploy:openvino-dynamic-only", "openvino", fxdeploy.Settings(threads=THREADS).with_sections(
            openvino=OpenVinoSettings(static_shapes=0))))
    for t in [t for t in ("onnxruntime", "openvino") if t in args.targets]:  # an engine call per image, in turn
        variants.append((f"fxdeploy:{t}-per-image-one-stream", t, fxdeploy.Settings(
            threads=THREADS, batching="per_image", image_streams=1, verify=False)))
    deployed, cannot = {}, {}
    for name, target, settings in variants:  # a contender this CPU cannot run is a row that says why
        try:
            deployed[name] = fxdeploy.lower(model, (images(2, 0),), target=target, settings=settings,
                                            dynamic_shapes=dynamic)
        except fxdeploy.TargetUnavailableError as exc:
            cannot[name] = " ".join(str(exc).split())
    results = []
    home = Path.cwd()
    with tempfile.TemporaryDirectory() as work, pinned_threads(THREADS), torch.no_grad():
        for batch in args.batches:
            x = images(batch, 7)
            want = model(x)
            contenders: dict[str, Callable[[], Rows]] = {"eager": lambda x=x: model(x)}
            contenders.update({name: (lambda d=d, x=x: d(x)) for name, d in deployed.items()})
            peers = ultralytics_peers(net, args.config, batch, Path(work) / f"b{batch}", nms)
            contenders.update({name: (lambda fn=fn, x=x: fn(x)) for name, fn in peers.items()})
            samples, failures = measure_interleaved(contenders, Budget())
            results += [{"batch": batch, "name": name, "not_run": reason} for name, reason in cannot.items()]
            for name, fn in contenders.items():
                if name in failures:
                    results.append({"batch": batch, "name": name, "error": failures[name]})
                    continue
                match = compare_detections(name, as_detections(want), as_detections(fn()), score_atol=1e-3)
                results.append({"batch": batch, "name": name, **summarize(samples[name], batch, warn=False),
                                "parity": match.detail, "matches": match.ok})
            os.chdir(home)
    print_table(results)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "yolo_peers.json").write_text(json.dumps(results, indent=1, default=str))


def print_table(results: list[dict[str, Any]]) -> None:
    print("| batch | contender | median ms | p90 ms | vs eager | matches eager | detections |")
    print("|---|---|---|---|---|---|---|")
    eager = {r["batch"]: r["median"] for r in results if r["name"] == "eager" and "median" in r}
    for r in results:
        if "not_run" in r:
            print(f"| {r['batch']} | {r['name']} | not run on this CPU: {r['not_run']} | | | | |")
            continue
        if "error" in r:
            print(f"| {r['batch']} | {r['name']} | failed: {r['error'][:80]} | | | | |")
            continue
        ratio = r["median"] / eager[r["batch"]]
        print(f"| {r['batch']} | {r['name']} | {r['median']:.2f} | {r['p90']:.2f} | {ratio:.2f}x | "
              f"{'yes' if r['matches'] else 'NO'} | {r['parity']} |")


if __name__ == "__main__":
    main()
