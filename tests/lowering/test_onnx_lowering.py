"""The ONNX lowering step: capture's program is exported without a second trace, weights go to a
side file past a size, and such an artifact round-trips and is hash-checked like any other."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import fxdeploy
from examples import models
from fxdeploy.targets.sections import OnnxSettings
from tests.helpers import run_python


class _CountExports:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = torch.export.export

        def counting(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(torch.export, "export", counting)


def plain_convnet() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(4)
    )
    x = torch.randn(2, 3, 12, 12)
    model(x)
    return model.eval(), x


def test_unchanged_graph_is_traced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = plain_convnet()
    counter = _CountExports(monkeypatch)
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes=({0: "batch"},))
    assert not any(record.modified for record in deployed.report.records)
    assert counter.calls == 1, "capture's ExportedProgram should be exported to ONNX as is"
    xb = torch.randn(3, *x.shape[1:])
    with torch.no_grad():
        assert (deployed(xb) - model(xb)).abs().max() <= 1e-4


def test_changed_graph_is_traced_again(monkeypatch: pytest.MonkeyPatch) -> None:
    model, (x,) = models.convnet()  # has a Dropout, which export keeps and remove_dropout deletes
    counter = _CountExports(monkeypatch)
    deployed = fxdeploy.lower(model, (x,))
    modified = [record.name for record in deployed.report.records if record.modified]
    assert modified, "the test needs a pass that changes the graph"
    assert counter.calls == 2, f"passes {modified} changed the graph, so lowering must export the passed graph"
    with torch.no_grad():
        assert (deployed(x) - model(x)).abs().max() <= 1e-5


def _settings(mib: float) -> fxdeploy.Settings:
    return fxdeploy.Settings().with_sections(onnx=OnnxSettings(external_data_mib=mib))


def test_weights_past_the_threshold_go_to_a_side_file(tmp_path: Path) -> None:
    model, (x,) = models.convnet()
    inline = fxdeploy.lower(model, (x,), settings=_settings(1024))
    external = fxdeploy.lower(model, (x,), settings=_settings(0))
    assert list(inline.manifest["files"]) == ["model.onnx"]
    assert list(external.manifest["files"]) == ["model.onnx", "model.onnx.data"]
    path = external.save(tmp_path / "art")
    assert (path / "model.onnx.data").stat().st_size > 2 * (path / "model.onnx").stat().st_size
    torch.save(x, tmp_path / "x.pt")
    run_python(
        "import torch, fxdeploy\n"
        f"d = fxdeploy.load({str(path)!r})\n"
        f"torch.save(d(torch.load({str(tmp_path / 'x.pt')!r})), {str(tmp_path / 'y.pt')!r})\n"
    )
    assert torch.equal(torch.load(tmp_path / "y.pt"), inline(x))


def test_tampered_side_file_is_refused_naming_it(tmp_path: Path) -> None:
    model, (x,) = models.convnet()
    path = fxdeploy.lower(model, (x,), settings=_settings(0)).save(tmp_path / "art")
    data = bytearray((path / "model.onnx.data").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "model.onnx.data").write_bytes(bytes(data))
    with pytest.raises(fxdeploy.ArtifactError, match=r"model\.onnx\.data"):
        fxdeploy.load(path)


def test_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match=r"external_data_mib must be >= 0, got -1"):
        OnnxSettings(external_data_mib=-1)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/hostname", "other.bin"])
def test_external_data_outside_the_artifact_is_refused(tmp_path: Path, location: str) -> None:
    """A crafted model.onnx (hash updated) may not read weights from a file the manifest does not list."""
    import json

    import onnx

    from fxdeploy import artifact

    model, (x,) = models.convnet()
    path = fxdeploy.lower(model, (x,), settings=_settings(0)).save(tmp_path / "art")
    proto = onnx.load(str(path / "model.onnx"), load_external_data=False)
    tensor = next(t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
    next(e for e in tensor.external_data if e.key == "location").value = location
    (path / "model.onnx").write_bytes(proto.SerializeToString())
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["model.onnx"] = artifact.sha256(path / "model.onnx")
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(fxdeploy.ArtifactError, match=rf"reads its data from '{location}', which is not a file"):
        fxdeploy.load(path)


class AccumulateRows(torch.nn.Module):
    """``index_put_(accumulate=True)``: torch.onnx writes a ScatterND whose empty attribute list
    onnx_ir logs about ("Attribute type is ambiguous ...") on every lowering."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(x.shape[0]).unsqueeze(1).expand(-1, 6)
        columns = torch.tensor([0, 2, 2, 3, 0, 0]).expand(x.shape[0], -1)
        return torch.zeros(x.shape[0], 4).index_put_((rows, columns), x, accumulate=True)


class ConstantGrid(torch.nn.Module):
    """An output that reads no input (a meshgrid): onnx_ir notes it skips deduplicating it."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, columns = torch.meshgrid(torch.arange(x.shape[0]), torch.arange(x.shape[1]), indexing="xy")
        return x + 1, columns


@pytest.mark.parametrize("model", [AccumulateRows(), ConstantGrid()], ids=["index_put", "constant_output"])
def test_the_exporters_notes_stay_off_the_console(model: torch.nn.Module, caplog: pytest.LogCaptureFixture) -> None:
    x = torch.rand(2, 6)
    with caplog.at_level(logging.WARNING):  # what logging prints with no handler configured
        deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
    torch.testing.assert_close(deployed(x), model(x))
    assert [r.getMessage() for r in caplog.records if not r.name.startswith("fxdeploy")] == []
