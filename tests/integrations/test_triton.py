"""export_triton: the repository layout, and a config.pbtxt that Triton's own schema parses and
whose fields match the artifact (names, dtypes, dims, max_batch_size)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import fxdeploy
from examples import face_detector, models
from fxdeploy import artifact
from fxdeploy.integrations.triton import TritonExportError, export_triton
from fxdeploy.integrations.triton_config import DATA_TYPES, DEFAULT_MAX_BATCH

ROOT = Path(__file__).resolve().parents[2]


def _model_config_pb2() -> Any:
    """Triton's ModelConfig schema. ``tritonclient.grpc`` refuses to import without grpcio, but
    its generated model_config_pb2 module only needs protobuf, so it is loaded from its file."""
    try:
        from tritonclient.grpc import model_config_pb2

        return model_config_pb2
    except (ImportError, RuntimeError):
        spec = importlib.util.find_spec("tritonclient")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("tritonclient is not installed: pip install fxdeploy[triton]")
        path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
        loader = importlib.util.spec_from_file_location("_triton_model_config_pb2", path)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        return module


def parse_config(model_dir: Path) -> Any:
    from google.protobuf import text_format

    pb2 = _model_config_pb2()
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), pb2.ModelConfig()), pb2


def assert_matches(model_dir: Path, art: Path, batched: bool) -> Any:
    """Every input and output of the manifest, in order, with its Triton dtype and dims."""
    _, manifest = artifact.read_manifest(art)
    config, pb2 = parse_config(model_dir)
    for specs, entries in ((manifest["inputs"], config.input), (manifest["outputs"], config.output)):
        assert [e.name for e in entries] == [s["name"] for s in specs]
        for spec, entry in zip(specs, entries, strict=True):
            assert pb2.DataType.Name(entry.data_type) == DATA_TYPES[spec["dtype"]]
            shape = spec["shape"][1:] if batched else spec["shape"]
            want = [d if isinstance(d, int) else -1 for d in shape]
            assert list(entry.dims) == (want or [1]), (spec, entry)
            assert entry.HasField("reshape") == (not want)
    return config


@pytest.fixture(scope="module")
def convnet_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, inputs = models.convnet()
    deployed = fxdeploy.lower(model, inputs, dynamic_shapes={"x": {0: "batch"}})
    return deployed.save(tmp_path_factory.mktemp("art") / "convnet")


@pytest.fixture(scope="module")
def detector_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kornia's face detector, batched by its substitution: padded [B, K, 15] rows and a count."""
    model, inputs = face_detector.kornia_yunet()
    deployed = fxdeploy.lower(
        model, inputs, dynamic_shapes={"image": {0: "batch"}},
        substitutions=face_detector.substitutions(),
    )
    return deployed.save(tmp_path_factory.mktemp("art") / "detector")


def test_onnxruntime_convnet_with_dynamic_batch(convnet_artifact: Path, tmp_path: Path) -> None:
    model_dir = export_triton(convnet_artifact, tmp_path / "repo")
    assert model_dir == tmp_path / "repo" / "convnet"
    assert sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*")) == [
        "1", "1/model.onnx", "config.pbtxt",
    ]
    config = assert_matches(model_dir, convnet_artifact, batched=True)
    assert (config.name, config.platform) == ("convnet", "onnxruntime_onnx")
    assert config.max_batch_size == DEFAULT_MAX_BATCH  # ORT's unbounded batch (2**31-1), capped
    assert config.HasField("dynamic_batching")
    assert [(g.count, g.kind) for g in config.instance_group] == [(1, 2)]  # KIND_CPU
    _, manifest = artifact.read_manifest(convnet_artifact)
    assert artifact.sha256(model_dir / "1" / "model.onnx") == manifest["files"]["model.onnx"]
    assert not [p for p in (tmp_path / "repo").iterdir() if p.name.startswith(".")]  # no staging left


def test_detector_nms_outputs_are_all_listed_with_fixed_k(detector_artifact: Path, tmp_path: Path) -> None:
    model_dir = export_triton(detector_artifact, tmp_path / "repo", model_name="yolo", max_batch_size=8)
    config = assert_matches(model_dir, detector_artifact, batched=True)
    assert config.max_batch_size == 8
    # the padded rows [B, K, 15] and the per-image count [B] (a real engine output)
    assert [list(o.dims) for o in config.output] == [[100, 15], [1]]
    assert [o.HasField("reshape") for o in config.output] == [False, True]
    text = (model_dir / "config.pbtxt").read_text()
    assert "FaceDetector.postprocess" in text
    _, manifest = artifact.read_manifest(detector_artifact)
    assert artifact.sha256(model_dir / "1" / "model.onnx") == manifest["files"]["model.onnx"]


def test_max_batch_size_zero_gives_full_shapes(convnet_artifact: Path, tmp_path: Path) -> None:
    model_dir = export_triton(convnet_artifact, tmp_path / "repo", max_batch_size=0)
    config = assert_matches(model_dir, convnet_artifact, batched=False)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [-1, 3, 64, 64]


def test_a_new_version_keeps_the_old_one_and_replaces_the_config(convnet_artifact: Path, tmp_path: Path) -> None:
    export_triton(convnet_artifact, tmp_path / "repo", version=1)
    model_dir = export_triton(convnet_artifact, tmp_path / "repo", version=2, max_batch_size=4)
    assert (model_dir / "1" / "model.onnx").is_file() and (model_dir / "2" / "model.onnx").is_file()
    assert parse_config(model_dir)[0].max_batch_size == 4


def fake_artifact(tmp_path: Path, target: str, files: dict[str, bytes], **overrides: Any) -> Path:
    """A hand-made artifact, for targets or manifests that cannot be lowered here."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for name, data in files.items():
        (src / name).write_bytes(data)
    manifest = {
        "schema_version": artifact.SCHEMA_VERSION, "fxdeploy_version": fxdeploy.__version__, "target": target,
        "runtime_version": "1.0", "inputs": [{"name": "x", "dtype": "float32", "shape": ["batch", 3]}],
        "outputs": [{"name": "y", "dtype": "float16", "shape": ["batch", 2]}],
        "output_leaves": [{"kind": "tensor", "name": "y"}],
        "output_tree": {"kind": "leaf"}, "input_tree": {"kind": "leaf"},
        "dims": {"batch": {"min": 1, "opt": 4, "max": 16}}, "settings": {}, "files": dict.fromkeys(files, ""),
        "info": {},
    }
    manifest.update(overrides)
    return artifact.save(manifest, src, tmp_path / f"art-{target}")


def test_tensorrt_plan_and_the_engine_batch_range(tmp_path: Path) -> None:
    art = fake_artifact(tmp_path, "tensorrt", {"model.onnx": b"onnx", "model.plan": b"plan"})
    model_dir = export_triton(art, tmp_path / "repo", model_name="trt")
    config = assert_matches(model_dir, art, batched=True)
    assert (config.platform, config.max_batch_size, config.instance_group[0].kind) == ("tensorrt_plan", 16, 1)
    assert sorted(p.name for p in (model_dir / "1").iterdir()) == ["model.plan"]
    with pytest.raises(ValueError, match="max_batch_size 32 exceeds .* max is 16"):
        export_triton(art, tmp_path / "repo", max_batch_size=32)


def test_torchscript_uses_libtorch_positional_names(tmp_path: Path) -> None:
    art = fake_artifact(tmp_path, "torchscript", {"model.pt": b"pt"})
    config, _ = parse_config(export_triton(art, tmp_path / "repo", model_name="ts"))
    assert config.platform == "pytorch_libtorch"
    assert ([i.name for i in config.input], [o.name for o in config.output]) == (["INPUT__0"], ["OUTPUT__0"])
    assert config.parameters["fxdeploy_names"].string_value == "INPUT__0=x,OUTPUT__0=y"


def test_openvino_backend_reads_the_onnx_file(tmp_path: Path) -> None:
    art = fake_artifact(tmp_path, "openvino", {"model.onnx": b"onnx"})
    config, _ = parse_config(export_triton(art, tmp_path / "repo", model_name="ov"))
    assert (config.backend, config.default_model_filename, config.platform) == ("openvino", "model.onnx", "")



def test_an_int8_openvino_artifact_goes_to_triton_as_ir(tmp_path: Path) -> None:
    """INT8 on openvino is NNCF's IR: Triton's OpenVINO backend gets model.xml with its model.bin."""
    art = fake_artifact(tmp_path, "openvino", {"model.xml": b"<net/>", "model.bin": b"w"})
    model_dir = export_triton(art, tmp_path / "repo", model_name="ov8")
    config, _ = parse_config(model_dir)
    assert (config.backend, config.default_model_filename) == ("openvino", "model.xml")
    assert sorted(p.name for p in (model_dir / "1").iterdir()) == ["model.bin", "model.xml"]

def test_a_plugin_targets_onnx_artifact_goes_to_onnx_runtime(tmp_path: Path) -> None:
    """A third-party target (tests/targets/test_registry.py) whose artifact is one ONNX model, with
    external weights: Triton's ONNX Runtime backend serves it."""
    art = fake_artifact(tmp_path, "ort-extended", {"model.onnx": b"onnx", "model.onnx.data": b"w"},
                        info={"target_origin": {"entry_point": "ort-extended = ortx:target", "distribution": "ortx",
                                                "version": "0.1"}})
    model_dir = export_triton(art, tmp_path / "repo", model_name="ortx")
    config = assert_matches(model_dir, art, batched=True)
    assert config.platform == "onnxruntime_onnx"
    assert sorted(p.name for p in (model_dir / "1").iterdir()) == ["model.onnx", "model.onnx.data"]


def test_a_plugin_target_with_another_engine_file_is_refused(tmp_path: Path) -> None:
    art = fake_artifact(tmp_path, "my-npu", {"model.onnx": b"onnx", "model.npu": b"blob"})
    files = r"\(files \['model.npu', 'model.onnx'\]\)"
    with pytest.raises(TritonExportError, match=rf"'my-npu'.*not one ONNX model {files}"):
        export_triton(art, tmp_path / "repo")
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_trimmed_and_hidden_outputs_are_recorded(tmp_path: Path) -> None:
    art = fake_artifact(
        tmp_path, "onnxruntime", {"model.onnx": b"onnx"}, dims={},
        inputs=[{"name": "boxes", "dtype": "float32", "shape": [100, 4]}],
        outputs=[{"name": "keep", "dtype": "int64", "shape": [100]}, {"name": "n", "dtype": "int64", "shape": []}],
        output_leaves=[{"kind": "tensor", "name": "keep", "trim": {"dim": 0, "count": "n"}},
                       {"kind": "hidden", "name": "n"}],
    )
    model_dir = export_triton(art, tmp_path / "repo", model_name="nms")
    config = assert_matches(model_dir, art, batched=False)
    assert config.max_batch_size == 0
    assert config.parameters["fxdeploy_trim_keep"].string_value == "dim=0 count=n"
    assert config.parameters["fxdeploy_hidden_outputs"].string_value == "n"


@pytest.mark.parametrize(
    ("target", "kwargs", "match"),
    [
        ("ncnn", {}, "'ncnn'.*no ncnn backend"),
        ("onnxruntime", {"model_name": "../evil"}, "model name"),
        ("onnxruntime", {"version": 0}, "version must be an integer >= 1"),
    ],
)
def test_refusals_name_the_problem(tmp_path: Path, target: str, kwargs: dict[str, Any], match: str) -> None:
    art = fake_artifact(tmp_path, target, {"model.onnx": b"onnx"})
    with pytest.raises(TritonExportError, match=match):
        export_triton(art, tmp_path / "repo", **kwargs)
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_a_tampered_artifact_writes_nothing(tmp_path: Path) -> None:
    art = fake_artifact(tmp_path, "onnxruntime", {"model.onnx": b"onnx"})
    (art / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(fxdeploy.ArtifactError, match="sha256"):
        export_triton(art, tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_export_triton(convnet_artifact: Path, tmp_path: Path) -> None:
    result = _cli("export-triton", str(convnet_artifact), "--repo", str(tmp_path / "repo"), "--name", "cnn",
                  "--version", "3", "--max-batch-size", "2")
    assert result.returncode == 0, result.stderr
    assert "wrote Triton model 'cnn' version 3" in result.stdout
    config = assert_matches(tmp_path / "repo" / "cnn", convnet_artifact, batched=True)
    assert config.max_batch_size == 2 and (tmp_path / "repo" / "cnn" / "3" / "model.onnx").is_file()

    refused = _cli("export-triton", str(fake_artifact(tmp_path, "ncnn", {"x.param": b"p"})), "--repo",
                   str(tmp_path / "repo2"))
    assert refused.returncode == 2 and "cannot export a 'ncnn' artifact to Triton" in refused.stderr


def test_exported_model_file_runs_like_the_artifact(convnet_artifact: Path, tmp_path: Path) -> None:
    """The copied model.onnx is the engine fxdeploy verified: same outputs through onnxruntime."""
    import onnxruntime as ort

    model_dir = export_triton(convnet_artifact, tmp_path / "repo")
    x = torch.randn(3, 3, 64, 64)
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x.numpy()})
    want = fxdeploy.load(convnet_artifact)(x)
    torch.testing.assert_close(torch.from_numpy(got), want)
