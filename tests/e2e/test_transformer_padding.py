"""``nn.TransformerEncoder`` with a padding mask, as a user writes it, matches eager inference.

Eager inference runs a left-aligned padded batch as nested tensors, and its output is 0 at every
padded position; torch.export takes the dense path (fxdeploy/capture/nested_encoder.py). ONNX
Runtime's Attention kernel refuses the mask row broadcast over the queries
(fxdeploy/passes/query_sized_masks.py). Before both, lower() refused this model on every target:
"output #0 differs from eager by 2.82", and on ONNX Runtime "inconsistent q_sequence_length".
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.errors import LoweringError
from tests.helpers import require_target

DIMS = {"x": {0: ("batch", 1, 8), 1: ("length", 4, 32)}, "padding": {0: ("batch", 1, 8), 1: ("length", 4, 32)}}


class Encoder(nn.Module):
    def __init__(self, mask_check: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16))
        self.encoder.mask_check = mask_check
        nn.init.normal_(self.encoder.norm.bias)  # eager's padded positions: the norm of 0, which is this bias

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.encoder(x, src_key_padding_mask=padding)


def _padding(lengths: list[int], size: int) -> torch.Tensor:
    """True past each row's length: left-aligned, as a tokenizer pads."""
    return torch.arange(size) >= torch.tensor(lengths).unsqueeze(1)


def _cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    unaligned = _padding([10, 6, 3], 10)
    unaligned[0, 2] = True  # padding inside a row: eager stays dense for the whole batch
    return [
        (torch.randn(3, 10, 16, generator=generator), _padding([10, 6, 3], 10)),
        (torch.randn(1, 7, 16, generator=generator), _padding([5], 7)),
        (torch.randn(4, 20, 16, generator=generator), _padding([20, 15, 0, 12], 20)),  # one row all padding
        (torch.randn(3, 10, 16, generator=generator), unaligned),
    ]


def _assert_matches_eager(model: nn.Module, run: object) -> None:
    for x, padding in _cases():
        with torch.no_grad():
            want = model(x, padding)
        got = run(x, padding)
        assert padding.any(), "a case without padding checks nothing here"
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)


@functools.cache
def _shared_encoder() -> Encoder:
    """One for the test below, never changed by it: lowered for another target it starts from the
    first lowering's capture (fxdeploy.capture.memo), as in a user's process."""
    return Encoder().eval()


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript"])
def test_a_padded_batch_matches_eager_at_every_padded_position(target: str, tmp_path: object) -> None:
    require_target(target)
    model = _shared_encoder()
    x, padding = _cases()[0]
    deployed = fxdeploy.lower(model, (x, padding), target=target, dynamic_shapes=DIMS)
    with torch.no_grad():
        assert model(x, padding)[2, 3:].abs().max() > 0.1  # the norm's bias: not a vacuous zero
    _assert_matches_eager(model, deployed)
    deployed.save(tmp_path / "encoder")
    _assert_matches_eager(model, fxdeploy.load(tmp_path / "encoder"))
    assert "forward" not in vars(model.encoder)  # the capture's spelling is gone from the instance


def test_an_unchecked_mask_takes_each_rows_first_positions_as_eager_does() -> None:
    """With ``mask_check = False`` eager trusts the mask to be left-aligned: a row keeping 6 is
    its first 6 positions, wherever its padding is."""
    model = Encoder(mask_check=False).eval()
    x, padding = _cases()[0]
    deployed = fxdeploy.lower(model, (x, padding), target="onnxruntime", dynamic_shapes=DIMS)
    _assert_matches_eager(model, deployed)


def test_ncnn_refuses_the_padding_mask_naming_the_ops_it_cannot_run() -> None:
    require_target("ncnn")
    model = Encoder().eval()
    x, padding = _cases()[0]
    with pytest.raises(LoweringError, match="ncnn cannot run: .*masked_fill"):
        fxdeploy.lower(model, (x, padding), target="ncnn", dynamic_shapes=DIMS)


def test_a_strict_capture_holds_the_fused_layer_and_still_matches_eager() -> None:
    """dynamo captures the layers' fused fast path (aten._transformer_encoder_layer_fwd), which no
    exporter translates: dense_encoder_layers spells it, and the padding spelling applies there too."""
    model = Encoder().eval()
    x, padding = _cases()[0]
    strict = fxdeploy.Settings(capture=fxdeploy.settings.CaptureSettings(mode="strict"))
    deployed = fxdeploy.lower(model, (x, padding), target="openvino", dynamic_shapes=DIMS, settings=strict)
    _assert_matches_eager(model, deployed)


def test_torch_compile_lowers_an_encoder_without_falling_back() -> None:
    """Was: "CompileFallbackWarning: fxdeploy_ort: a graph ... runs eagerly ... No ONNX function found
    for aten._transformer_encoder_layer_fwd". Without a padding mask: with one, torch.compile's own
    graph takes the dense path, unlike eager (torch.compile with PyTorch's backends does the same)."""
    model = Encoder().eval()
    compiled = torch.compile(model.encoder, backend="fxdeploy_ort", dynamic=False)
    x = _cases()[0][0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", fxdeploy.errors.CompileFallbackWarning)
        with torch.no_grad():
            got = compiled(x)
    with torch.no_grad():
        torch.testing.assert_close(got, model.encoder(x), atol=2e-4, rtol=1e-4)
