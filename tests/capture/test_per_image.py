"""per_image: which captures run image by image, and how per-image results join."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from torch._subclasses import FakeTensor

import fxdeploy
from fxdeploy.artifact.structure import join_images
from fxdeploy.capture import capture, per_image, substitution
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.errors import CaptureError, InferenceError
from tests.helpers import require_target


class LoopsOverImages(torch.nn.Module):
    """A per-image Python loop returning a list over the images: the loop fixes the batch."""

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        feats = x.relu() * 2
        return [image.flatten(1).amax(1) for image in feats], feats


Scored = namedtuple("Scored", "probs totals")


class LoopReturnsANamedtuple(torch.nn.Module):
    """A per-image loop whose results come back in a namedtuple: a batched tensor and a list."""

    def forward(self, x: torch.Tensor) -> Scored:
        probs = [image.softmax(-1) * image.mean() for image in x]
        return Scored(torch.stack(probs), [p.sum() for p in probs])


class ScalesByIndex(torch.nn.Module):
    """A loop over the batch whose images are not independent: it reads each image's index."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x[i] * (i + 1) for i in range(x.shape[0])])


class DefaultRowWhenNoneKept(torch.nn.Module):
    """Per image: the rows whose first column passes 0.5, or one row of -1 where none does."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for image in x:
            kept = image[image[:, 0] > 0.5]
            if kept.shape[0] == 0:
                out.append(torch.full((1, 4), -1.0))
                continue
            out.append(kept * 2)
        return out


class Cached(torch.nn.Module):
    """Caches a tensor computed in forward, as Ultralytics' Detect head does with its anchors."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.anchors = torch.arange(x.shape[-1], dtype=x.dtype)
        return x + self.anchors


def test_join_plan_tells_lists_over_images_from_batched_tensors() -> None:
    one = ([torch.zeros(3)], torch.zeros(1, 4), {"k": 2})
    two = ([torch.zeros(3), torch.ones(5)], torch.zeros(2, 4), {"k": 2})
    plan = per_image.join_plan(one, two)
    same = {"kind": "items", "keys": ["k"], "items": [{"kind": "same"}]}
    assert plan == {"kind": "items", "items": [{"kind": "concat"}, {"kind": "cat"}, same]}
    images = [([torch.zeros(3)], torch.zeros(1, 4), {"k": 2}), ([torch.ones(5)], torch.ones(1, 4), {"k": 2})]
    joined = join_images(images, plan)
    assert [t.shape[0] for t in joined[0]] == [3, 5] and joined[1].shape == (2, 4) and joined[2] == {"k": 2}


def test_join_plan_refuses_results_that_are_not_per_image() -> None:
    with pytest.raises(CaptureError, match="not the result for one image repeated"):
        per_image.join_plan(torch.zeros(3, 4), torch.zeros(5, 4))  # dim 0 neither doubles nor stays


class PadsAcrossTheBatch(torch.nn.Module):
    """Each image's scores over 1, padded to the batch's longest (pad_sequence): image 0 has the most,
    so one image's result doubles in dim 0 as a batched tensor's does. The check built its reference
    by the join plan and failed inside torch.cat ("did not expect this failure")."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = []
        for image in x:
            v = image.flatten()
            kept.append(v[v > 1.0])
        return torch.nn.utils.rnn.pad_sequence(kept, batch_first=True, padding_value=-1.0)


def test_an_output_sized_across_the_batch_is_refused_by_name() -> None:
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    x[0, 0] = 2.0  # image 0 keeps the most
    with pytest.raises(per_image.JoinError, match=r"output: each image alone gives its own shape.*pad_sequence"):
        fxdeploy.lower(PadsAcrossTheBatch(), (x,), target="onnxruntime", dynamic_shapes={"x": {0: ("batch", 1, 4)}})


def test_join_plan_with_the_second_image_alone() -> None:
    same = per_image.join_plan([torch.zeros(1, 4)], [torch.zeros(2, 4)], second=[torch.ones(1, 4)])
    assert same == {"kind": "items", "items": [{"kind": "cat"}]}
    with pytest.raises(per_image.JoinError, match=r"output\[0\]: each image alone gives its own shape"):
        per_image.join_plan([torch.zeros(1, 4)], [torch.zeros(2, 4)], second=[torch.ones(1, 3)])


def test_per_image_results_of_other_shapes_are_an_inference_error() -> None:
    with pytest.raises(InferenceError, match=r"other shapes \(\[\(3,\), \(4,\)\]\).*static batch"):
        join_images([torch.zeros(1, 4), torch.zeros(1, 3)], {"kind": "cat"})


def test_batch_dim_needs_the_same_dim_0_on_every_input() -> None:
    batch = torch.export.Dim("batch", min=1, max=8)
    inputs = [torch.zeros(2, 3), torch.zeros(2, 5)]
    assert per_image.batch_dim({"a": {0: batch}, "b": {0: batch}}, inputs) == per_image.BatchDim("batch", 1, 8)
    assert per_image.batch_dim({"a": {0: batch}, "b": None}, inputs) is None
    n = torch.export.Dim("n")
    with_n = per_image.batch_dim({"a": {0: batch, 1: n}, "b": {0: batch}}, inputs)  # RT-DETR's H and W
    assert with_n == per_image.BatchDim("batch", 1, 8, {"a": {1: n}, "b": None})
    assert per_image.batch_dim({"a": {0: batch, 1: batch}, "b": {0: batch}}, inputs) is None  # batch elsewhere too
    assert per_image.batch_dim({"a": {0: batch, 1: 2 * batch}, "b": {0: batch}}, inputs) is None
    assert per_image.batch_dim({"a": {0: 2 * n}, "b": {0: 2 * n}}, inputs) is None  # a derived dim is no batch
    assert per_image.batch_dim(None, inputs) is None


def test_a_model_that_loops_over_images_is_captured_for_one() -> None:
    model = LoopsOverImages()
    x = torch.rand(3, 2, 4, 4)
    captured = capture(model, (x,), dynamic_shapes={"x": {0: ("batch", 1, 6)}})
    assert captured.per_image is not None and captured.per_image["dim"] == "batch"
    assert captured.per_image["min"] == 1 and captured.per_image["max"] == 6
    assert captured.example_inputs[0].shape == (1, 2, 4, 4)  # the engine's example: one image
    assert captured.per_image["join"] == {"kind": "items", "items": [{"kind": "concat"}, {"kind": "cat"}]}


def test_per_image_artifact_matches_eager_at_every_batch(tmp_path) -> None:
    model = LoopsOverImages()
    deployed = fxdeploy.lower(model, (torch.rand(2, 2, 4, 4),), target="onnxruntime",
                              dynamic_shapes={"x": {0: ("batch", 1, 6)}})
    deployed.save(tmp_path / "a")
    loaded = fxdeploy.load(tmp_path / "a")
    for batch in (1, 4, 6):
        x = torch.rand(batch, 2, 4, 4)
        want = model(x)
        for runner in (deployed, loaded):
            got = runner(x)
            assert len(got[0]) == batch
            torch.testing.assert_close(got, want)
    with pytest.raises(fxdeploy.InputError, match="batch"):
        deployed(torch.rand(7, 2, 4, 4))


def test_a_per_image_namedtuple_joins_into_the_models_type(tmp_path) -> None:
    model = LoopReturnsANamedtuple()
    deployed = fxdeploy.lower(model, (torch.rand(2, 3, 4),), target="onnxruntime",
                              dynamic_shapes={"x": {0: ("batch", 1, 6)}})
    deployed.save(tmp_path / "a")
    loaded = fxdeploy.load(tmp_path / "a")
    for batch in (1, 3):
        x = torch.rand(batch, 3, 4)
        want = model(x)
        got = deployed(x)
        assert type(got) is Scored and len(got.totals) == batch
        torch.testing.assert_close(tuple(got), tuple(want))
        from_file = loaded(x)  # a file names no type to build: the namedtuple comes back a tuple
        assert type(from_file) is tuple
        torch.testing.assert_close(from_file, tuple(want))


def test_a_loop_that_reads_the_images_index_is_refused_saying_why() -> None:
    x = torch.rand(2, 4)
    with pytest.raises(fxdeploy.LoweringError, match="reads the image's index") as caught:
        fxdeploy.lower(ScalesByIndex(), (x,), target="onnxruntime", dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    assert "lower with a static batch" in str(caught.value)
    torch.testing.assert_close(fxdeploy.lower(ScalesByIndex(), (x,), target="onnxruntime")(x), ScalesByIndex()(x))


def test_a_branch_whose_other_side_differs_where_the_selection_keeps_none_is_refused_naming_its_line() -> None:
    """The example keeps three rows per image, so torch records ``Ne(u0, 0)`` and the graph holds
    only that side; an image that keeps none gets a -1 row eagerly. Once this lowered silently and
    returned no row for such an image."""
    x = torch.rand(2, 5, 4)
    x[:, :3, 0], x[:, 3:, 0] = 0.9, 0.1
    line = r"test_per_image.py:\d+ \(`kept = image\[image\[:, 0\] > 0.5\]`\)"
    with pytest.raises(CaptureError, match=line) as caught:
        fxdeploy.lower(DefaultRowWhenNoneKept(), (x,), target="onnxruntime", dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    message = str(caught.value)
    assert "`Ne(u0, 0)`" in message and "shape [1, 4], not the graph's [0, 4]" in message
    assert "torch.where" in message


class SkipsAnImageThatKeepsNone(torch.nn.Module):
    """Ultralytics' ``if not x.shape[0]: continue``: both sides give the image no rows."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.zeros(0, 4)] * x.shape[0]
        for i, image in enumerate(x):
            kept = image[image[:, 0] > 0.5]
            if not kept.shape[0]:
                continue
            out[i] = kept * 2
        return out


def test_a_branch_whose_sides_agree_where_the_selection_keeps_none_lowers_and_matches_eager() -> None:
    x = torch.rand(2, 5, 4)
    x[:, :3, 0], x[:, 3:, 0] = 0.9, 0.1
    deployed = fxdeploy.lower(SkipsAnImageThatKeepsNone(), (x,), target="onnxruntime",
                              dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    y = torch.rand(3, 5, 4)
    y[:, :, 0] = torch.tensor([[0.9, 0.1, 0.9, 0.1, 0.9], [0.1] * 5, [0.6, 0.7, 0.1, 0.1, 0.1]])
    got, want = deployed(y), SkipsAnImageThatKeepsNone()(y)
    assert [g.shape[0] for g in got] == [3, 0, 2]
    torch.testing.assert_close(got, want)


def test_an_example_whose_selection_keeps_none_is_refused_where_a_branch_reads_it() -> None:
    """With no rows in the example, the graph would skip every image: no input could show rows."""
    x = torch.rand(2, 5, 4)
    x[:, :, 0] = 0.1
    with pytest.raises(CaptureError, match=r"keeps no rows.*`Eq\(u0, 0\)`.*an image with detections"):
        fxdeploy.lower(SkipsAnImageThatKeepsNone(), (x,), target="onnxruntime",
                       dynamic_shapes={"x": {0: ("batch", 1, 4)}})


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_the_images_of_a_call_run_on_streams_and_match_eager(target: str) -> None:
    """Three threads: up to three images at once (one thread each), in waves where the batch is
    larger; the results come back in image order. image_streams=1 runs them one by one. The
    engine takes one image (``batching="per_image"``): streams are what that path has."""
    from fxdeploy.runtime.executor import stream_count

    require_target(target)
    model = LoopsOverImages()
    example = (torch.rand(2, 2, 4, 4),)
    shapes = {"x": {0: ("batch", 1, 8)}}
    streamed = fxdeploy.lower(model, example, target=target, dynamic_shapes=shapes,
                              settings=fxdeploy.Settings(threads=3, batching="per_image"))
    serial = fxdeploy.lower(model, example, target=target, dynamic_shapes=shapes,
                            settings=fxdeploy.Settings(threads=3, image_streams=1, batching="per_image"))
    for batch in (1, 2, 5, 8):
        x = torch.rand(batch, 2, 4, 4)
        want = model(x)
        for runner in (streamed, serial):
            count = runner.stats.count
            torch.testing.assert_close(runner(x), want, rtol=0, atol=0)
            assert runner.stats.count == count + 1  # one engine call, however many images
    pools = "_streams" if target == "onnxruntime" else "_streamed"
    assert sorted(getattr(streamed.executor, pools)) == [2, 3] and not getattr(serial.executor, pools)
    assert [stream_count(fxdeploy.Settings(threads=t), n) for t, n in ((2, 4), (8, 8), (8, 3), (1, 4))] == [2, 4, 3, 1]


def test_capture_gives_back_attributes_that_forward_set() -> None:
    model = Cached()
    capture(model, (torch.rand(2, 5),))
    assert model.anchors is None  # not a traced tensor left behind


class Processor:
    """A library-style postprocess: one dict per image, which no engine can return."""

    def postprocess(self, rows: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        return [{"rows": r, "top": r.argmax()} for r in rows]


def _packed(self: Processor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return rows, rows.argmax(-1)


def _unpack(out: tuple[torch.Tensor, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    rows, top = out
    return [{"rows": r, "top": t} for r, t in zip(rows, top, strict=True)]


class LoopsThenPostprocesses(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.processor = Processor()

    def forward(self, x: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        rows = torch.stack([image.flatten(1).amax(1) for image in x.relu()])  # the loop fixes the batch
        return self.processor.postprocess(rows)


def test_per_image_results_join_before_the_unpack() -> None:
    """The join plan describes the tensor-only results: images join first, then the unpack runs
    once over the whole batch (RT-DETR on ncnn: a list of dicts per call, one per image)."""
    model = LoopsThenPostprocesses()
    subs = {Processor.postprocess: fxdeploy.Substitution(Processor.postprocess, _packed, unpack=_unpack)}
    deployed = fxdeploy.lower(model, (torch.rand(2, 3, 4, 4),), target="onnxruntime",
                              dynamic_shapes={"x": {0: ("batch", 1, 6)}}, substitutions=subs)
    assert deployed.manifest["per_image"]["join"]["kind"] == "items"
    for batch in (1, 3, 6):
        x = torch.rand(batch, 3, 4, 4)
        got, want = deployed(x), model(x)
        assert isinstance(got, list) and len(got) == batch
        torch.testing.assert_close(got, want)


def scale_rows(rows: torch.Tensor) -> torch.Tensor:
    """A plain function the tests substitute (substituted functions apply only in strict capture)."""
    return rows * 2


def scale_rows_again(rows: torch.Tensor) -> torch.Tensor:
    return rows + rows


class LoopThenHead(torch.nn.Module):
    """Loops over the images first, then runs a head that records what each trace gives it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bool, int]] = []

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        images = [image.relu() for image in x]  # fixes the batch
        out = []
        for image in images:
            self.seen.append((isinstance(image, FakeTensor), len(images)))  # dynamo's trace: no FakeTensor
            out.append(scale_rows(image.flatten(1)))
        return out


def test_a_whole_batch_capture_stops_where_the_code_fixes_the_batch() -> None:
    """Capture's trace of the whole batch stops at the loop that fixes the batch: only the one-image
    trace reaches the head (torch.export alone would trace the whole model before refusing it)."""
    model = LoopThenHead()
    captured = capture(model, (torch.rand(3, 6, 2, 2),), dynamic_shapes={"x": {0: ("batch", 1, 6)}})
    assert captured.per_image is not None
    traced = [size for fake, size in model.seen if fake]
    assert traced == [1], f"traces reached the head with batches {traced}; only the one-image trace should"


def test_a_stopped_whole_batch_capture_says_where_the_batch_was_fixed() -> None:
    """Where one image cannot be captured either, the whole batch's error names the line after which
    the batch became a constant."""

    class PairsOnly(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            first, second, *_ = x  # fixes the batch; one image cannot run it
            return first - second

    with pytest.raises(CaptureError) as info:
        capture(PairsOnly(), (torch.rand(3, 4),), dynamic_shapes={"x": {0: ("batch", 1, 6)}})
    message = str(info.value)
    assert "batch" in message and "specialized it to be a constant (3)" in message, message
    assert "test_per_image.py" in message, message


def test_a_model_that_calls_a_substituted_function_is_captured_for_one_image_strict_at_once() -> None:
    """The eager run saw the model call a function that only a strict capture substitutes: the
    one-image capture starts strict, with no non-strict trace first (which would stop at that call)."""
    model = LoopThenHead()
    x = torch.rand(2, 6, 4, 4)
    captured = capture(model, (x,), dynamic_shapes={"x": {0: ("batch", 1, 6)}},
                       substitutions=[substitution.Substitution(scale_rows, scale_rows_again)])
    assert captured.per_image is not None and captured.mode == "strict"
    assert captured.substitutions == [f"{__name__}.scale_rows"]
    non_strict = [size for fake, size in model.seen if fake]
    assert non_strict == [], f"non-strict traces of batches {non_strict} reached the head"


class PinsItsWidth(torch.nn.Module):
    """Loops over the images, writes in place (so capture functionalizes) and takes ``int()`` of
    a size derived from the dynamic width, as transformers' ``torch_int`` does: torch.export
    records a guard pinning the width, without an error."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = []
        for image in x:
            y = image.clone()
            y[:, 0] = 0
            outs.append(y * int((image.shape[-1] - 1) // 8 + 1))
        return torch.stack(outs)


def test_a_guard_that_pins_a_derived_dim_is_said_not_baked_in() -> None:
    """The width stays a dim of the artifact, the guard that pins it is kept and said at lower()'s
    checks past it (a DimWarning each, as for a whole-batch capture), and a call past it is an
    InputError naming it. Functionalization once ran that guard as code and fixed the width to
    the example's, silently."""
    x = torch.randn(2, 3, 32)
    shapes = {"x": {0: ("batch", 1, 4), 2: 8 * torch.export.Dim("w", min=2, max=16)}}
    with pytest.warns(DimWarning, match=r"break '\(1 \+ \(\(\(-1\) \+ x.shape\[2\]\) // 8\)\) == 4'"):
        deployed = fxdeploy.lower(PinsItsWidth(), (x,), target="onnxruntime", dynamic_shapes=shapes)
    assert deployed.manifest["inputs"][0]["shape"][2] == "8*w"
    assert [c["label"] for c in deployed.manifest["info"]["shape_checks"] if c.get("skipped")] == ["min", "max"]
    torch.testing.assert_close(deployed(x), PinsItsWidth()(x))
    with pytest.raises(fxdeploy.InputError, match=r"== 4"):
        deployed(torch.randn(2, 3, 40))
