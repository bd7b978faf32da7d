"""Capture: a model and its example inputs become one flat GraphModule (``core``), with the
failures explained (``errors``) and, for models that loop over the batch in Python, one image
captured and the batch run image by image (``per_image``)."""

from fxdeploy.capture.core import Captured, capture, eval_mode

__all__ = ["Captured", "capture", "eval_mode"]
