"""FX passes: one per file, run by ``run_pipeline`` in the order ``pipelines`` gives."""

from fxdeploy.passes.base import Pass, PassRecord, PassResult, PipelineReport, op_histogram, run_pipeline

__all__ = ["Pass", "PassRecord", "PassResult", "PipelineReport", "op_histogram", "run_pipeline"]
