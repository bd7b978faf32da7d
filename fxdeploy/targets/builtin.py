from __future__ import annotations
from collections.abc import Callable
from fxdeploy.targets import Target
def register_all(register: Callable[[Target], Target]) -> None:
    from fxdeploy.targets import onnxruntime
    for target in (onnxruntime.TARGET,):
        register(target)
