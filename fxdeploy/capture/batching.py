"""How a per-image capture's engine takes the images of a call: the whole batch in one call
(the graph vectorized, ``fxdeploy.capture.vectorize``) or one image per call, and why.

``engine_for`` decides what to try, ``vectorized_job`` swaps the lowering job's graph for the
batched one (or keeps the per-image one, with the reason), ``describe`` writes the outcome into
the manifest: ``per_image.engine`` is ``"batch"`` or ``"image"``, and a batched artifact's inputs and
outputs carry the batch dim the engine takes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.capture.core import Captured
from fxdeploy.settings import Settings

logger = logging.getLogger("fxdeploy")


@dataclasses.dataclass
class Engine:
    """What a per-image capture's engine takes: ``vectorize`` is tried; ``batched`` is the
    outcome; ``why`` says why the engine runs image by image."""

    vectorize: bool
    batched: bool = False
    why: str = ""


def engine_for(target: Any, captured: Captured, settings: Settings) -> Engine:
    if captured.per_image is None:
        return Engine(False)
    if not target.batched_engine:
        return Engine(False, why=f"{target.name}'s engine takes one image at a time")
    if settings.batching == "per_image":
        return Engine(False, why="Settings.batching is 'per_image'")
    return Engine(True)


def vectorized_job(job: Any, captured: Captured, engine: Engine) -> Any:
    """``job`` with the per-image graph vectorized over the batch dim, or ``job`` itself (with
    ``engine.why`` and an info line) where the graph does not vectorize."""
    from fxdeploy.capture.vectorize import Unbatchable, vectorize

    info = captured.per_image
    assert info is not None and captured.batch_inputs is not None
    inputs = list(captured.batch_inputs)
    if inputs[0].shape[0] < 2:  # torch.export fixes a dim whose example size is 1
        inputs = [torch.cat([x, x]) for x in inputs]
    dim = torch.export.Dim(info["dim"], min=info["min"], max=info["max"])
    own = job.dynamic_shapes or [None] * len(inputs)  # the per-image graph's other dims (height, width)
    shapes = [{**{d: s for d, s in (dims or {}).items() if d != 0}, 0: dim} for dims in own]
    try:
        batched, program = vectorize(job.graph_module, inputs, shapes)
    except Unbatchable as exc:
        engine.why = f"the per-image graph does not vectorize: {exc.reason}"
        logger.info("the engine runs once per image (%s)", engine.why)
        return job
    engine.batched = True
    return dataclasses.replace(
        job, graph_module=batched, example_inputs=inputs, dynamic_shapes=shapes,
        exported_program=program,
    )


def describe(manifest: Manifest, engine: Engine) -> None:
    """Record in ``manifest`` what the engine takes."""
    if "per_image" not in manifest:
        return
    per_image = manifest["per_image"] = dict(manifest["per_image"], engine="batch" if engine.batched else "image")
    if not engine.batched:
        per_image["why"] = engine.why
        return
    batch = per_image["dim"]
    manifest["dims"][batch] = {"min": per_image["min"], "opt": per_image["opt"], "max": per_image["max"]}
    for spec in manifest["inputs"]:
        spec["shape"] = [batch, *spec["shape"][1:]]
    for spec in manifest["outputs"]:
        spec["shape"] = [batch, *spec["shape"]]
