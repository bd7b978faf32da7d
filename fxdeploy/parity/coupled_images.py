"""Why an ncnn artifact failed lower()'s check, where the model's output for one image reads the
others: ncnn runs one image at a time.

A model that reads across its batch (``x[0]``, a mean over dim 0, the first image's features
broadcast to every image) gives each image another value in the batch than alone. ncnn's engine
runs each image alone, so its artifact cannot give eager's batched values, and the check's "differs
from eager" said nothing of why. Asked once a check failed: eager on the batch against eager on
each image alone; where they differ past the tolerance, the model couples its images.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import structure


def coupling(inputs: list[torch.Tensor], want: Any, eager_fn: Callable[[list[torch.Tensor]], Any],
             atol: float) -> str | None:
    """What to tell the user where eager's batched outputs (``want``) are not each image's own; else None."""
    batches = {x.shape[0] for x in inputs if x.dim()}
    if len(batches) != 1 or not inputs or min(batches) < 2:  # noqa: PLR2004 - a batch of one couples nothing
        return None
    batched = pytree.tree_leaves(structure.dataclasses_to_dicts(want))
    for image in range(batches.pop()):
        try:
            with torch.no_grad():
                alone = eager_fn([x[image:image + 1] for x in inputs])
        except Exception:  # noqa: BLE001 - a model that cannot run one image alone: the check's own words stand
            return None
        alone = pytree.tree_leaves(structure.dataclasses_to_dicts(alone))
        for index, (one, whole) in enumerate(zip(alone, batched, strict=False)):
            if not isinstance(one, torch.Tensor) or not isinstance(whole, torch.Tensor) or whole.dim() == 0:
                continue
            row = whole[image:image + 1]
            if row.shape != one.shape or not torch.allclose(row.double(), one.double(), rtol=0.0, atol=atol,
                                                            equal_nan=True):
                return (f"eager gives image {image} another output #{index} in the batch than alone: the model's "
                        "output for one image reads the other images (x[0], a reduction over dim 0), and ncnn runs "
                        "one image at a time. Compute each image from its own inputs, or lower to onnxruntime, "
                        "openvino or torchscript, which run the batch whole")
    return None
