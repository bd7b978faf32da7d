"""A branch on a tensor's value that the example decided is refused naming its line, also where
torch left no assert for it (fxdeploy.capture.decisions)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import sympy
import torch

import fxdeploy
from fxdeploy.capture import decisions
from fxdeploy.errors import CaptureError


class FloatBranch(torch.nn.Module):
    """torch records no assert for a branch on a float: the example's side was baked in silently."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.abs().max().item() > 50:
            return torch.zeros_like(x)
        return x * 2


class IntBranch(torch.nn.Module):
    """Non-strict capture refuses it; strict capture (tried next) dropped the ``item`` its assert reads."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.abs().max() * 10).int().item() > 50:
            return torch.zeros_like(x)
        return x * 2


class ItemAsSize(torch.nn.Module):
    """An int read from a tensor used as a slice bound: a size the graph computes, decided by no branch."""

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = int(n.max())
        return x[:, :k]


@pytest.mark.parametrize(("cls", "line"), [
    (FloatBranch, "if x.abs().max().item() > 50:"),
    (IntBranch, "if (x.abs().max() * 10).int().item() > 50:"),
], ids=["float", "int"])
def test_a_branch_on_a_value_the_example_decided_is_refused_naming_its_line(
    cls: type, line: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CaptureError) as info:
        fxdeploy.lower(cls().eval(), (torch.randn(2, 8),), target="onnxruntime")
    message = str(info.value)
    assert f"at {__file__}:" in message and line in message, message
    assert "reads a tensor's values" in message, message
    assert "is False; an artifact would take it for every input" in message, message
    assert "propagate_real_tensors" not in capfd.readouterr().err, "torch's log of the decision reached the console"


def test_torchs_logger_is_left_as_it_was() -> None:
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with pytest.raises(CaptureError):
        fxdeploy.lower(FloatBranch().eval(), (torch.randn(2, 8),), target="onnxruntime")
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def test_an_int_read_from_a_tensor_used_as_a_size_still_lowers() -> None:
    model = ItemAsSize().eval()
    x = torch.randn(2, 8, 3)
    deployed = fxdeploy.lower(model, (x, torch.tensor([3, 5])), target="onnxruntime")
    for counts in ([1, 7], [2, 2], [8, 0]):
        n = torch.tensor(counts)
        assert torch.equal(deployed(x, n), model(x, n)), counts


def test_torch_2_11s_symbol_for_the_head_of_selected_rows_is_a_size() -> None:
    """torch 2.11 names ``nms(...)[:45]``'s rows anew (``u2``, asserted ``u2 <= u1``), not as
    ``Min(45, u1)``: ``len(pred)`` of them was refused as a tensor's value, and their count, fixed by
    that read, as a count the example decided. A symbol bounded by an item's value stays a value."""
    u0, u1, u2, u3 = sympy.symbols("u0 u1 u2 u3", integer=True)
    env = SimpleNamespace(
        size_like={u1},
        replacements={u2: sympy.Integer(30)},
        deferred_runtime_asserts={u2: [SimpleNamespace(expr=u2 <= u1)], u3: [SimpleNamespace(expr=u3 <= u0)]},
    )
    assert decisions._size_like(env) == {u1, u2}
    read = decisions.Decision(u2, 30, ())
    assert decisions._head_read(u2, [read], env)
    assert not decisions._head_read(u2, [read, decisions.Decision(u2 > 3, True, ())], env)  # a loop on it
    assert not decisions._head_read(u3, [decisions.Decision(u3, 7, ())], env)
