"""ncnn takes token ids and masks: integer and bool inputs go into the engine as float32 (exact
below 2**24, checked at call time), cast back first, so the mask arithmetic runs in the engine;
the ids an embedding lookup reads go in as int32 (ncnn's Embed reads them so), each checked to
lie in the table at call time."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from tests.helpers import require_target


class MaskedTokens(nn.Module):
    """An embedding of token ids, zeroed where the attention mask is 0, and a large negative bias
    there, as encoders add to their attention scores."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(100, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) * mask.unsqueeze(-1).to(torch.float32)
        bias = (1.0 - mask.to(torch.float32)) * -1e4
        return self.head(x) + bias.unsqueeze(-1)


def _inputs(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[1:, length // 2:] = 0  # every sequence after the first is padded
    return ids, mask


def test_token_ids_and_a_mask_run_in_the_engine_and_match_eager(tmp_path) -> None:
    require_target("ncnn")
    model = MaskedTokens().eval()
    shapes = {"ids": {0: ("batch", 1, 4), 1: ("length", 2, 32)}, "mask": {0: ("batch", 1, 4), 1: ("length", 2, 32)}}
    deployed = fxdeploy.lower(model, _inputs(2, 7, 0), target="ncnn", dynamic_shapes=shapes)
    stages = deployed.manifest["info"]["ncnn"]["stages"]
    assert [stage["kind"] for stage in stages] == ["engine"], stages  # nothing moved to the host
    deployed.save(tmp_path / "a")
    param = (tmp_path / "a" / stages[0]["param"]).read_text()
    assert "Embed" in param.split(), "the embedding lookup runs in the engine"
    loaded = fxdeploy.load(tmp_path / "a")
    for batch, length, seed in ((1, 7, 1), (3, 7, 2), (3, 20, 3)):
        ids, mask = _inputs(batch, length, seed)
        with torch.no_grad():
            want = model(ids, mask)
        for runner in (deployed, loaded):
            torch.testing.assert_close(runner(ids, mask), want, rtol=1e-4, atol=1e-3)
    assert stages[0]["id_inputs"] == [[0, 100]], "the ids go in as int32, in a table of 100 rows"
    for bad, why in ((100, r"\[0, 100\); got 100"), (-1, r"\[0, 100\); got -1")):
        ids, mask = _inputs(2, 7, 4)
        ids[1, 3] = bad  # eager raises an IndexError; ncnn's Embed would clamp it into the table
        with pytest.raises(fxdeploy.InputError, match=rf"input 'ids': ids index an embedding table of 100 rows.*{why}"):
            loaded(ids, mask)
    ids, mask = _inputs(2, 7, 4)
    mask[0, 0] = 2**24  # a number, not an id: float32 holds it exactly only below 2**24
    with pytest.raises(fxdeploy.InputError, match=r"input 'mask'.*exact only below 2\*\*24.*16777216"):
        loaded(ids, mask)


class TinyEncoder(nn.Module):
    """Token embeddings attending over each other under a padding mask, as BERT builds it:
    ``mask.bool()`` viewed to [B, 1, 1, L] and expanded to [B, 1, L, L]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(100, 16)
        self.q, self.k, self.v, self.out = (nn.Linear(16, 16) for _ in range(4))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        b, n, _ = x.shape
        q, k, v = (f(x).view(b, n, 2, 8).transpose(1, 2) for f in (self.q, self.k, self.v))
        keep = mask.bool()[:, None, None, :].expand(b, 1, n, n)
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.out(y.transpose(1, 2).reshape(b, n, 16))


def test_a_padding_mask_runs_in_the_engine_even_where_it_masks_a_whole_sequence() -> None:
    require_target("ncnn")
    model = TinyEncoder().eval()
    shapes = {"ids": {0: ("batch", 1, 4), 1: ("length", 2, 32)}, "mask": {0: ("batch", 1, 4), 1: ("length", 2, 32)}}
    deployed = fxdeploy.lower(model, _inputs(2, 7, 0), target="ncnn", dynamic_shapes=shapes)
    assert [stage["kind"] for stage in deployed.manifest["info"]["ncnn"]["stages"]] == ["engine"]
    assert "input_attention_masks" in deployed.report.fired
    for batch, length in ((1, 7), (3, 7), (4, 12)):
        ids, mask = _inputs(batch, length, batch)
        if batch == 4:
            mask[2] = 0  # every key masked: PyTorch's attention gives 0 there
            mask[3, :3] = 0  # padding in front
        with torch.no_grad():
            want = model(ids, mask)
        torch.testing.assert_close(deployed(ids, mask), want, rtol=1e-4, atol=1e-4)


class ReadTwice(MaskedTokens):
    """The ids looked up and also added as numbers: ncnn takes an input either way, not both."""

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids)) + (ids * mask).unsqueeze(-1).float()


class ComputedIds(MaskedTokens):
    """Ids computed in the graph: ncnn's Embed would read their float32 values as int32 bits."""

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed((ids + 1) * mask))


@pytest.mark.parametrize(("model", "says"), [
    (ReadTwice, r"input 'ids' is read as ids by the embedding lookup .* and as numbers by"),
    (ComputedIds, r"the embedding lookup .* reads ids that the engine computes"),
])
def test_ids_ncnn_cannot_read_as_int32_are_refused_by_name(model: type[nn.Module], says: str) -> None:
    require_target("ncnn")
    shapes = {"ids": {0: ("batch", 1, 4)}, "mask": {0: ("batch", 1, 4)}}
    with pytest.raises(fxdeploy.LoweringError, match=says):
        fxdeploy.lower(model().eval(), _inputs(2, 7, 0), target="ncnn", dynamic_shapes=shapes)


class Queries(nn.Module):
    """Text queries scored against an image, three queries per image (an open-vocabulary detector's
    layout: the queries of every image stacked, [3 * B, L])."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.conv = nn.Embedding(100, 8), nn.Conv2d(3, 8, 3, stride=2, padding=1)

    def forward(self, ids: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        queries = self.embed(ids).mean(1).view(image.shape[0], 3, 8)
        features = torch.relu(self.conv(image)).mean((2, 3))
        return (queries * features[:, None]).sum(-1)


def test_queries_stacked_per_image_give_each_image_its_own_rows(tmp_path) -> None:
    require_target("ncnn")
    model = Queries().eval()
    batch = torch.export.Dim("batch", min=1, max=4)
    ids, image = torch.randint(0, 100, (6, 5)), torch.randn(2, 3, 16, 16)
    deployed = fxdeploy.lower(model, (ids, image), target="ncnn",
                              dynamic_shapes={"ids": {0: 3 * batch}, "image": {0: batch}})
    assert deployed.manifest["info"]["ncnn"]["stages"][0]["grouped_inputs"] == [[0, 3]]
    loaded = fxdeploy.load(deployed.save(tmp_path / "a"))
    for images in (1, 3):
        ids, image = torch.randint(0, 100, (3 * images, 5)), torch.randn(images, 3, 16, 16)
        with torch.no_grad():
            want = model(ids, image)
        for runner in (deployed, loaded):
            torch.testing.assert_close(runner(ids, image), want, rtol=1e-4, atol=1e-4)


class Palette(nn.Module):
    """A segmentation map coloured by class: a uint8 palette indexed by the argmax, an RGB image out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        colours = [[0, 0, 0], [255, 0, 0], [0, 255, 128], [7, 8, 9], [255, 255, 255]]
        self.register_buffer("palette", torch.tensor(colours, dtype=torch.uint8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.palette[self.conv(x).argmax(1)]


def test_a_uint8_output_comes_back_as_uint8(tmp_path) -> None:
    """ncnn computes in float32, which holds every 8- and 16-bit integer: the output is cast back
    (it was refused, "has dtype torch.uint8", before)."""
    require_target("ncnn")
    model = Palette().eval()
    deployed = fxdeploy.lower(model, (torch.rand(1, 3, 24, 20),), target="ncnn",
                              dynamic_shapes={"x": {0: ("batch", 1, 4), 2: ("h", 16, 48), 3: ("w", 16, 48)}})
    deployed.save(tmp_path / "palette")
    loaded = fxdeploy.load(tmp_path / "palette")
    for shape in [(1, 3, 24, 20), (3, 3, 48, 17)]:
        x = torch.rand(shape)
        want = model(x)
        for got in (deployed(x), loaded(x)):
            assert got.dtype == torch.uint8 and torch.equal(got, want)
