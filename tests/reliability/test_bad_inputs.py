"""Bad runtime inputs on every target: an exact InputError naming the input, or eager's result.

The engine must never see an invalid input, so every refused call leaves ``stats.count`` as it
was, and every accepted call adds exactly one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fxdeploy
from tests.reliability.conftest import AVAILABLE, TARGETS, tolerance
from tests.reliability.input_cases import CALL_CASES, EXECUTE_CASES, RESULT, Case, eager_input


def _outcome(deployed: fxdeploy.Deployed, case: Case, *, execute: bool) -> tuple[str, Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    args = case.args()
    try:
        result = deployed.execute(*args) if execute else deployed(*args)
    except fxdeploy.InputError as exc:
        return str(exc), None, args
    return RESULT, result, args


def _check(lowered: Any, target: str, case: Case, *, execute: bool) -> None:
    deployed = lowered.deployed
    before = deployed.stats.count
    outcome, result, args = _outcome(deployed, case, execute=execute)
    assert outcome == case.outcome
    assert deployed.stats.count == before + (1 if outcome == RESULT else 0)
    if outcome == RESULT:
        x = eager_input(args[0]["x"] if execute else args[0])
        with torch.no_grad():
            want = lowered.model(x)
        got = result["output"] if execute else result
        assert got.shape == want.shape and got.dtype == want.dtype
        error = (got - want).abs().max().item()
        assert error <= tolerance(target), f"{case.name} on {target}: max error {error:.3g}"


@pytest.mark.parametrize("case", CALL_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("target", TARGETS)
def test_call_gives_input_error_or_eager_result(convnet, target: str, case: Case) -> None:
    _check(convnet(target), target, case, execute=False)


@pytest.mark.parametrize("case", EXECUTE_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("target", TARGETS)
def test_execute_gives_input_error_or_eager_result(convnet, target: str, case: Case) -> None:
    _check(convnet(target), target, case, execute=True)


def test_every_target_gives_the_same_outcome_per_case(convnet) -> None:
    """One table of outcomes per target; all the tables must be equal."""
    assert AVAILABLE, "no target is available here"
    tables = {
        target: [_outcome(convnet(target).deployed, c, execute=e)[0] for e, cases in
                 ((False, CALL_CASES), (True, EXECUTE_CASES)) for c in cases]
        for target in AVAILABLE
    }
    first = tables[AVAILABLE[0]]
    assert first == [c.outcome for c in CALL_CASES + EXECUTE_CASES]
    assert all(table == first for table in tables.values())
