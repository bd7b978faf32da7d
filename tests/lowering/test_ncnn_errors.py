"""ncnn refusals name the model's value, the op that reads it and the fix, not an internal stage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from tests.helpers import require_target


class TokenClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(1))  # THE LINE


def test_integer_ids_are_refused_naming_the_input_the_op_and_the_fix() -> None:
    require_target("ncnn")
    ids = torch.randint(0, 100, (2, 7))
    with pytest.raises(fxdeploy.LoweringError) as info:
        fxdeploy.lower(TokenClassifier().eval(), (ids,), target="ncnn", dynamic_shapes={"ids": {0: "batch"}})
    message = str(info.value)
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# THE LINE"))
    assert "'ids'" in message and "torch.int64" in message and "embedding" in message
    assert f'{__file__}", line {line}' in message
    assert "onnxruntime or openvino" in message and "stage" not in message.split("(")[0]
