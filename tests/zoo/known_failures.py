"""Why a zoo model fails on a target, in one place: the tests turn each into a strict xfail, and
benchmarks/zoo.py lists them in benchmarks/README.md. A fixed failure makes its test XPASS,
which fails the run, so this table cannot go stale."""

from __future__ import annotations

KNOWN_FAILURES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {}
"""(model, target) -> (reason, the exception lowering raises)."""

NCNN_FIXED_HW: dict[str, str] = {
    "rt_detr_small": (
        "with H and W dynamic as well, torch.export fixes the batch at the example's 2 (its suggested fix, "
        "applied with a DimWarning) instead of refusing it, so the model is not captured per image, and ncnn "
        "traces each stage at batch 1 (a LoweringError says so); with H and W static the batch is captured "
        "per image and the four-stage plan lowers"
    ),
}
"""Models whose H/W stays static on ncnn (every other target takes it dynamic)."""


def known_failure_lines() -> list[str]:
    lines = [f"- {model} on {target}: {reason}" for (model, target), (reason, _) in KNOWN_FAILURES.items()]
    lines += [f"- {model}, dynamic H/W on ncnn: {reason}" for model, reason in NCNN_FIXED_HW.items()]
    return lines
