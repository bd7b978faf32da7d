"""The host/engine split for targets whose engine cannot run the whole graph (ncnn has no NMS,
top-k or gather layer): the graph is cut into engine and host stages, called in order.

This package's namespace holds only the stage plan (``plan``), which the lowering writes and the
runtime reads; it imports no torch, so the runtime can read a plan without the capture and pass
machinery. The cut itself is ``fxdeploy.partition.cut`` (which nodes go to the host:
``fxdeploy.partition.host_nodes``), imported by the passes and the lowering only.
"""

from fxdeploy.partition.plan import Engine, EngineOutput, Host, HostOp, Plan, Source, Stage

__all__ = ["Engine", "EngineOutput", "Host", "HostOp", "Plan", "Source", "Stage"]
