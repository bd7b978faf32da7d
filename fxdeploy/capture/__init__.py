"""Capture: a model and its example inputs become one flat GraphModule (``core``).

- ``exporting``: the torch.export call itself, quiet, with the model's state restored;
- ``flat_io``: input names, symbolic sizes and their ranges, and the output structure kept;
- ``substitution``: scoped trace-time replacements, the built-in ones included;
- ``fixes``: dim ranges torch.export narrows, given back or explained;
- ``state``: eval mode, the model's buffers given back their values, stateful forwards refused;
- ``errors``: capture failures explained; ``per_image``: models that loop over the batch in
  Python are captured on one image and run image by image."""

from fxdeploy.capture.core import Captured, capture
from fxdeploy.capture.state import eval_mode

__all__ = ["Captured", "capture", "eval_mode"]
