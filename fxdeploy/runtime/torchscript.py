"""TorchScript executor: ``torch.jit.load`` of the artifact's ``model.pt``."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)


class TorchScriptExecutor(Executor):
    """A ScriptModule run under inference mode. Its forward is re-entrant, so no lock.

    TorchScript runs on torch's process-wide intra-op pool. Changing that pool behind the
    caller's back would change every other model in the process, so the executor leaves it alone
    and only logs when it differs from ``settings.threads``.
    """

    thread_safe = True

    def __init__(self, model_path: Path, output_names: list[str], settings: Settings) -> None:
        super().__init__()
        with quiet_jit():
            self.module = torch.jit.load(str(model_path), map_location="cpu")
        self.module.eval()
        self.output_names = list(output_names)
        if torch.get_num_threads() != settings.threads:
            logger.info(
                "torchscript: torch uses %d intra-op threads, settings ask for %d; call "
                "torch.set_num_threads(%d) to match",
                torch.get_num_threads(), settings.threads, settings.threads,
            )

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.inference_mode():
            results = self.module(*feeds.values())
        if isinstance(results, torch.Tensor):
            results = (results,)
        return dict(zip(self.output_names, results, strict=True))
