"""Artifact cache: hit/miss, what invalidates a key, corruption, LRU eviction. Never the user's home."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import fxdeploy
from examples import detector, face_detector, models
from fxdeploy import artifact
from fxdeploy.cache import (
    ArtifactCache,
    cached_lower,
    graph_parts,
    in_process_loader,
    model_parts,
    open_cache,
)
from fxdeploy.cache import key as cache_keys
from fxdeploy.capture import substitution

DEFAULT = fxdeploy.Settings()
DYNAMIC = {"x": {0: "batch"}}


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything that falls back to the default root lands under tmp_path."""
    monkeypatch.setenv("FXDEPLOY_CACHE_DIR", str(tmp_path / "default-cache"))


class Builds:
    """A build function that counts its calls and lowers only once per test module."""

    def __init__(self, make: Callable[[], fxdeploy.Deployed]) -> None:
        self.make, self.calls = make, 0

    def __call__(self) -> fxdeploy.Deployed:
        self.calls += 1
        return self.make()


@pytest.fixture(scope="module")
def convnet() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], fxdeploy.Deployed]:
    model, inputs = models.convnet()
    return model, inputs, fxdeploy.lower(model, inputs, dynamic_shapes=DYNAMIC, settings=DEFAULT)


def lower_cached(
    model: torch.nn.Module, inputs: tuple[Any, ...], build: Callable[[], fxdeploy.Deployed], cache_dir: Path,
    settings: fxdeploy.Settings = DEFAULT, max_bytes: int = 2**30, subs: dict[Any, Any] | None = None,
    dynamic: Any = DYNAMIC,
) -> tuple[fxdeploy.Deployed, bool]:
    """What lower() does with the cache on."""
    resolved = substitution.resolve(subs)
    return cached_lower(
        "onnxruntime", model_parts(model, inputs, None, dynamic, resolved), build, settings.to_dict(),
        cache_dir, max_bytes, load=in_process_loader(model, inputs, None, resolved),
    )


def test_miss_then_hit_gives_identical_outputs(tmp_path: Path) -> None:
    model, inputs = models.convnet()
    build = Builds(lambda: fxdeploy.lower(model, inputs, dynamic_shapes=DYNAMIC, settings=DEFAULT))
    first, hit1 = lower_cached(model, inputs, build, tmp_path)
    second, hit2 = lower_cached(model, inputs, build, tmp_path)
    assert (hit1, hit2, build.calls) == (False, True, 1)
    assert open_cache(tmp_path, 2**30).stats.as_dict() == {
        "hits": 1, "misses": 1, "stores": 1, "evictions": 0, "corrupt": 0,
    }
    x = torch.randn(3, 3, 64, 64)
    assert torch.equal(first(x), second(x))
    with torch.no_grad():
        torch.testing.assert_close(second(x), model(x), atol=1e-4, rtol=1e-4)
    assert second.manifest["inputs"] == first.manifest["inputs"]
    assert second.manifest["dims"] == first.manifest["dims"]


def test_a_hit_keeps_the_substitution_unpack(tmp_path: Path) -> None:
    model, inputs = face_detector.kornia_yunet()
    dynamic, subs = {"image": {0: "batch"}}, face_detector.substitutions()
    build = Builds(lambda: fxdeploy.lower(model, inputs, dynamic_shapes=dynamic, settings=DEFAULT, substitutions=subs))
    first, _ = lower_cached(model, inputs, build, tmp_path, subs=subs, dynamic=dynamic)
    second, hit = lower_cached(model, inputs, build, tmp_path, subs=subs, dynamic=dynamic)
    assert hit and build.calls == 1
    got, want = second(*inputs), first(*inputs)
    assert isinstance(got, list) and [g.shape[1] for g in got] == [15, 15]  # unpack: per-image rows
    assert sum(len(w) for w in want) > 0
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


def test_changing_a_setting_misses(convnet: Any, tmp_path: Path) -> None:
    model, inputs, deployed = convnet
    build = Builds(lambda: deployed)
    lower_cached(model, inputs, build, tmp_path)
    # the subject is the cache key: any changed setting misses (build is a stand-in; nothing is lowered)
    _, hit = lower_cached(model, inputs, build, tmp_path, settings=fxdeploy.Settings(verify=False, threads=1))
    assert not hit and build.calls == 2


def test_changing_the_runtime_version_misses(convnet: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, inputs, deployed = convnet
    build = Builds(lambda: deployed)
    lower_cached(model, inputs, build, tmp_path)
    monkeypatch.setattr(cache_keys, "runtime_version", lambda target: "99.0-other")
    _, hit = lower_cached(model, inputs, build, tmp_path)
    assert not hit and build.calls == 2


def test_changing_fxdeploys_source_misses(convnet: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed pass or lowering rebuilds even where fxdeploy's version number stayed put."""
    model, inputs, deployed = convnet
    build = Builds(lambda: deployed)
    lower_cached(model, inputs, build, tmp_path)
    assert lower_cached(model, inputs, build, tmp_path)[1]
    cache_keys.environment.cache_clear()
    monkeypatch.setattr(cache_keys, "package_digest", lambda: "0" * 64)
    try:
        _, hit = lower_cached(model, inputs, build, tmp_path)
    finally:
        cache_keys.environment.cache_clear()
    assert not hit and build.calls == 2


def test_the_source_digest_follows_file_contents_and_names(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "passes").mkdir(parents=True)
    (package / "passes" / "a.py").write_text("x = 1\n")
    (package / "notes.txt").write_text("not source")
    digest = cache_keys.package_digest.__wrapped__
    first = digest(package)
    assert digest(package) == first
    (package / "notes.txt").write_text("still not source")
    assert digest(package) == first
    (package / "passes" / "a.py").write_text("x = 2\n")
    changed = digest(package)
    assert changed != first
    (package / "passes" / "a.py").rename(package / "passes" / "b.py")
    assert digest(package) not in (first, changed)
    assert cache_keys.package_digest() == digest(Path(fxdeploy.__file__).parent)


def test_the_model_fingerprint_sees_weights_attributes_and_shapes() -> None:
    model, inputs = models.convnet()
    subs = substitution.resolve(None)
    base = model_parts(model, inputs, None, DYNAMIC, subs)
    assert model_parts(models.convnet()[0], inputs, None, DYNAMIC, subs) == base  # deterministic
    changed = []
    with torch.no_grad():
        model.head[3].bias[0] += 1e-3
    changed.append(model_parts(model, inputs, None, DYNAMIC, subs))
    yolo, yolo_inputs = detector.tiny_yolo()
    before = model_parts(yolo, yolo_inputs, None, None, subs)
    yolo.conf_threshold = 0.5
    assert model_parts(yolo, yolo_inputs, None, None, subs) != before
    changed.append(model_parts(models.convnet()[0], (torch.randn(2, 3, 32, 32),), None, DYNAMIC, subs))
    changed.append(model_parts(models.convnet()[0], inputs, None, None, subs))
    hooked = models.convnet()[0]
    hooked.head.register_forward_hook(lambda module, args, out: out * 2)
    changed.append(model_parts(hooked, inputs, None, DYNAMIC, subs))
    assert all(parts != base for parts in changed)


def test_graph_fingerprint_sees_code_and_constants() -> None:
    model = models.convnet()[0]
    before = graph_parts(torch.fx.symbolic_trace(model))
    assert graph_parts(torch.fx.symbolic_trace(model)) == before
    with torch.no_grad():  # the traced module shares the model's parameters
        model.stem[0].weight[0, 0, 0, 0] += 1.0
    assert graph_parts(torch.fx.symbolic_trace(model)) != before


def test_a_corrupt_entry_is_detected_and_rebuilt(convnet: Any, tmp_path: Path) -> None:
    model, inputs, deployed = convnet
    build = Builds(lambda: deployed)
    lower_cached(model, inputs, build, tmp_path)
    (entry,) = [p for p in (tmp_path / "v1").iterdir() if not p.name.startswith(".")]
    onnx = entry / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:-16] + bytes(16))  # same size, different bytes
    rebuilt, hit = lower_cached(model, inputs, build, tmp_path)
    assert not hit and build.calls == 2
    stats = open_cache(tmp_path, 2**30).stats
    assert stats.corrupt == 1
    artifact.read_manifest(entry)  # the rebuilt entry is whole again
    _, hit = lower_cached(model, inputs, build, tmp_path)
    assert hit and build.calls == 2
    x = torch.randn(1, 3, 64, 64)
    assert torch.equal(rebuilt(x), deployed(x))


def fake_artifact(tmp_path: Path, name: str, size: int) -> Path:
    src = tmp_path / f"src-{name}"
    src.mkdir()
    (src / "blob.bin").write_bytes(os.urandom(size))
    manifest = {
        "schema_version": artifact.SCHEMA_VERSION, "fxdeploy_version": fxdeploy.__version__, "target": "onnxruntime",
        "runtime_version": "1", "inputs": [], "outputs": [], "output_leaves": [], "output_tree": {"kind": "tuple",
        "children": []}, "input_tree": {"kind": "tuple", "children": []}, "dims": {}, "settings": {},
        "files": {"blob.bin": ""}, "info": {},
    }
    return artifact.save(manifest, src, tmp_path / f"art-{name}")


def test_lru_eviction_by_total_size(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", max_bytes=25_000)
    keys = [f"{i:064x}" for i in range(3)]
    for i, k in enumerate(keys[:2]):
        cache.put(k, fake_artifact(tmp_path, k[-1], 10_000))
        os.utime(cache.path(k), (1_000 + i, 1_000 + i))  # deterministic ages: keys[0] is oldest
    assert cache.get(keys[0]) is not None  # a hit makes keys[0] the most recently used
    cache.put(keys[2], fake_artifact(tmp_path, keys[2][-1], 10_000))
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
    assert cache.stats.evictions == 1 and cache.size() <= 25_000


def test_an_artifact_larger_than_the_cache_is_not_kept(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", max_bytes=1_000)
    assert cache.put("a" * 64, fake_artifact(tmp_path, "big", 5_000)) is None
    assert cache.get("a" * 64) is None and cache.size() == 0


def test_default_root_follows_the_environment(tmp_path: Path) -> None:
    assert ArtifactCache().root.parent == tmp_path / "default-cache"
    with pytest.raises(ValueError, match="64 lowercase hex"):
        ArtifactCache().path("../../etc")


def test_uncacheable_parts_fall_back_to_an_uncached_build(convnet: Any, tmp_path: Path) -> None:
    _, _, deployed = convnet
    build = Builds(lambda: deployed)
    result, hit = cached_lower("onnxruntime", {"bad": object()}, build, DEFAULT.to_dict(), tmp_path)
    assert result is deployed and not hit and build.calls == 1
    sparse = torch.nn.Linear(2, 2)
    sparse.register_buffer("mask", torch.eye(2).to_sparse())
    parts = lambda: model_parts(sparse, (torch.randn(1, 2),), None, None, [])  # noqa: E731
    result, hit = cached_lower("onnxruntime", parts, build, DEFAULT.to_dict(), tmp_path)
    assert result is deployed and not hit and build.calls == 2
    assert not (tmp_path / "v1").exists()


def test_lower_uses_the_cache_when_settings_enable_it(tmp_path) -> None:
    """The wiring in fxdeploy.lower: a second identical lower() is a hit with identical outputs."""
    import dataclasses

    from examples import models
    from fxdeploy.cache import open_cache
    from fxdeploy.settings import CacheSettings, Settings

    model, (x,) = models.dict_mlp()
    settings = dataclasses.replace(Settings(), cache=CacheSettings(enabled=True, dir=str(tmp_path / "c")))
    first = fxdeploy.lower(model, (x,), settings=settings)
    stats = open_cache(str(tmp_path / "c"), int(settings.cache.max_gib * 2**30)).stats
    misses, hits = stats.misses, stats.hits
    second = fxdeploy.lower(model, (x,), settings=settings)
    assert (stats.misses, stats.hits) == (misses, hits + 1)
    assert torch.equal(first(x)["score"], second(x)["score"])
    changed = dataclasses.replace(settings, threads=1)
    fxdeploy.lower(model, (x,), settings=changed)
    assert stats.misses == misses + 1
