"""A model lowered on ncnn at a dynamic size: its stages, and its values at other sizes against eager."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tests.helpers import require_target


def assert_eagers_on_ncnn(
    model: torch.nn.Module, example: torch.Tensor, shapes: dict[str, dict[int, tuple[str, int, int]]],
    sizes: Sequence[tuple[int, ...]], *, stages: Sequence[str] = ("engine",), rtol: float = 0.0, atol: float = 1e-6,
) -> None:
    """Lowered on ncnn with ``shapes``, the artifact has ``stages`` and gives eager's outputs (shape and
    values) on random inputs of each of ``sizes`` (batch, then dims 2, 3, ...)."""
    require_target("ncnn")
    import fxdeploy

    model = model.eval()
    deployed = fxdeploy.lower(model, (example,), target="ncnn", dynamic_shapes=shapes)
    assert [stage["kind"] for stage in deployed.manifest["info"]["ncnn"]["stages"]] == list(stages)
    generator = torch.Generator().manual_seed(0)
    for batch, *rest in sizes:
        x = torch.randn(batch, example.shape[1], *rest, generator=generator)
        with torch.no_grad():
            got, want = deployed(x), model(x)
        for have, ref in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                             strict=True):
            assert have.shape == ref.shape, (batch, *rest)
            torch.testing.assert_close(have, ref, rtol=rtol, atol=atol, msg=lambda m, s=(batch, *rest): f"{s}: {m}")
