"""transformers' ViT with a dynamic height and width, on every available target.

The model is the zoo's (examples/zoo_vit.py): ``interpolate_pos_encoding=True`` and the
substitution that keeps torch.export from pinning H and W. On ncnn it also needs
``vacuous_masks``: transformers builds an all-True attention mask from the run-time sequence
length, which pnnx left as torch.arange, torch.ge, Tensor.expand and torch.where (LoweringError at
check_layers).
"""

from __future__ import annotations

import os

import pytest
import torch

import fxdeploy
from tests.helpers import require_target

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
zoo_vit = pytest.importorskip("examples.zoo_vit")

TARGETS = [t for t in fxdeploy.targets() if t != "tensorrt"]  # TensorRT: tests/e2e/test_tensorrt_onnx.py


@pytest.mark.parametrize("target", TARGETS)
def test_vit_matches_eager_at_three_sizes(target: str) -> None:
    require_target(target)
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=5,
    )
    model = zoo_vit.AnyResolution(transformers.ViTForImageClassification(config)).eval()
    dims = {"pixel_values": {0: ("batch", 1, 4), 2: ("height", 16, 96), 3: ("width", 16, 96)}}
    deployed = fxdeploy.lower(
        model, (torch.randn(2, 3, 32, 32),), target=target, dynamic_shapes=dims,
        substitutions=zoo_vit.VIT_SUBSTITUTIONS,
    )
    if target == "ncnn":
        assert "vacuous_masks" in deployed.report.fired
    generator = torch.Generator().manual_seed(1)
    for shape in [(1, 3, 32, 32), (3, 3, 48, 24), (2, 3, 16, 96)]:
        x = torch.randn(shape, generator=generator)
        with torch.no_grad():
            want = model(x).logits
        torch.testing.assert_close(deployed(x).logits, want, rtol=1e-3, atol=1e-4)
