"""Lowering: a passed GraphModule becomes files a runtime can load (ONNX, TorchScript, ...)."""
