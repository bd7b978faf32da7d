"""Why a zoo model fails on a target, in one place: the tests turn each into a strict xfail, and
benchmarks/zoo.py lists them in benchmarks/README.md. A fixed failure makes its test XPASS,
which fails the run, so this table cannot go stale."""

from __future__ import annotations

KNOWN_FAILURES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {}
"""(model, target) -> (reason, the exception lowering raises)."""


def known_failure_lines() -> list[str]:
    return [f"- {model} on {target}: {reason}" for (model, target), (reason, _) in KNOWN_FAILURES.items()]
