"""The host/engine split: where a target's engine cannot run the whole graph (ncnn has no NMS,
top-k or gather layer), the graph is cut into engine and host stages, called in order."""

from fxdeploy.partition.split import STAGE, Source, SplitParts, Stage, host_postprocess_split, split_parts

__all__ = ["STAGE", "Source", "SplitParts", "Stage", "host_postprocess_split", "split_parts"]
