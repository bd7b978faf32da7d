"""torch.onnx's registry, built once per opset and translation table (fxdeploy/lowering/onnx_registry.py):
the ONNX written through it is torch.onnx.export's, node for node, custom translations included;
each flavour and opset has its own registry; without the exporter core, torch.onnx.export is used."""

from __future__ import annotations

import re

import pytest
import torch

import fxdeploy.ops  # noqa: F401  (torch.ops.fxdeploy.multiclass_nms)
from fxdeploy.lowering import onnx_registry
from fxdeploy.lowering.onnx_translations import translation_table


class _Detect(torch.nn.Module):
    """A conv, then fxdeploy's multiclass_nms (a custom translation) and a stable sort (another)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.conv(x).flatten(2).transpose(1, 2)  # [B, N, 6]
        boxes = torch.cat([y[..., :2], y[..., :2] + y[..., 2:4].exp()], -1)
        scores = y[..., 4:].sigmoid()
        kept = torch.ops.fxdeploy.multiclass_nms(boxes, scores, 0.5, 0.1, 10, -1, 10, -1, False)
        return (*kept, torch.sort(scores[..., 0], stable=True, descending=True)[0])


def _program() -> tuple[torch.export.ExportedProgram, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 4)
    batch = torch.export.Dim("batch", min=1, max=8)
    return torch.export.export(_Detect().eval(), (x,), dynamic_shapes=({0: batch},)), (x,)


def _text(onnx_program: torch.onnx.ONNXProgram) -> str:
    """The model as text, the names multiclass_nms gives its tie-free TopKs (``id()``-numbered,
    different at each export) numbered in order of appearance."""
    text, names = str(onnx_program.model_proto), {}
    return re.sub(r"fxdeploy_tie_free_topk_\w+?_\d+", lambda m: names.setdefault(m[0], f"tie_free_{len(names)}"), text)


def _public(program: torch.export.ExportedProgram, args: tuple, flavour: str, opset: int) -> str:
    onnx_program = torch.onnx.export(program, args, dynamo=True, input_names=["images"],
                                     output_names=["a", "b", "c", "d", "e"],
                                     custom_translation_table=translation_table(flavour), opset_version=opset,
                                     optimize=False, verbose=False, report=False)
    return _text(onnx_program)


def _ours(program: torch.export.ExportedProgram, args: tuple, flavour: str, opset: int) -> str:
    onnx_program = onnx_registry.export_program(program, args, ["images"], ["a", "b", "c", "d", "e"],
                                                translation_table(flavour), opset)
    return _text(onnx_program)


@pytest.mark.parametrize(("flavour", "opset"), [("standard", 20), ("openvino", 18), ("standard", 23)])
def test_the_shared_registry_writes_torch_onnx_exports_model(flavour: str, opset: int) -> None:
    assert onnx_registry._core() is not None, "this torch's exporter core takes a registry"
    program, args = _program()
    want = _public(program, args, flavour, opset)
    assert _ours(program, args, flavour, opset) == want
    assert _ours(program, args, flavour, opset) == want  # the second export reuses the registry


def test_each_opset_and_table_has_its_own_registry() -> None:
    standard, openvino = translation_table("standard"), translation_table("openvino")
    first = onnx_registry.registry(standard, 20)
    assert onnx_registry.registry(translation_table("standard"), 20) is first  # a new, equal table
    assert onnx_registry.registry(openvino, 20) is not first
    assert onnx_registry.registry(standard, 23) is not first
    assert onnx_registry.registry(standard, 23).opset_version == 23
    topk = torch.ops.aten.topk.default
    assert onnx_registry.registry(openvino, 20).get_decomps(topk)[0].onnx_function is openvino[topk]
    assert all(d.onnx_function is not openvino[topk] for d in first.get_decomps(topk))


def test_a_library_loaded_later_gets_a_registry_with_its_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchlib registers torchvision's ops (roi_align, nms) only once torchvision's library is
    loaded: a registry built before must not serve an export after."""
    table = translation_table("standard")
    before = onnx_registry.registry(table, 20)
    monkeypatch.setattr(torch.ops, "loaded_libraries", {*torch.ops.loaded_libraries, "/a/later/_C.so"})
    after = onnx_registry.registry(table, 20)
    assert after is not before and onnx_registry.registry(table, 20) is after


def test_without_the_exporter_core_torch_onnx_export_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    program, args = _program()
    want = _public(program, args, "standard", 20)
    calls = []
    original = torch.onnx.export
    monkeypatch.setattr(onnx_registry, "_core", lambda: None)
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert _ours(program, args, "standard", 20) == want
    assert calls == [1]


def test_one_program_exports_the_same_bytes_every_time() -> None:
    """multiclass_nms's tie-free TopKs were named by object id: each export differed."""
    from fxdeploy.artifact.onnx_files import TIE_FREE
    from fxdeploy.lowering.onnx import export_onnx
    from fxdeploy.settings import Settings

    program, args = _program()
    names = ["images"], ["a", "b", "c", "d", "e"]

    def exported() -> bytes:
        onnx_program = export_onnx(program.module(), args, *names, [{0: "batch"}], Settings(), opset=20,
                                   program=program)
        return onnx_program.model_proto.SerializeToString()

    first = exported()
    assert first.count(TIE_FREE.encode()) >= 2
    assert exported() == first
