"""Models on a CUDA device through fxdeploy's CPU targets: ``fxdeploy.lower`` of a model and
inputs on CUDA, and ``torch.compile(..., backend="fxdeploy_<target>")`` called with CUDA tensors.
Run on the lent GPU machine (``python3 benchmarks/gpu_cuda_inputs.py``); each case prints its
outputs' device against eager's and the largest difference, or the error's first lines."""

from __future__ import annotations

import sys
import traceback
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).softmax(-1)


class LoopDetector(nn.Module):
    """A per-image loop over torchvision's batched_nms, every tensor made on the input's device."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, 4 + classes, 4, stride=4)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        from torchvision.ops import batched_nms

        out = self.head(images).flatten(2).transpose(1, 2)
        cells = out.shape[1]
        grid = torch.arange(cells, device=images.device, dtype=images.dtype)
        results = []
        for rows in out:
            xy = torch.stack([grid % 8, grid // 8], -1) * 4 + rows[:, :2].sigmoid() * 4
            wh = rows[:, 2:4].sigmoid() * 16 + 2
            boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1)
            scores, labels = rows[:, 4:].sigmoid().max(-1)
            keep = scores > 0.3
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            kept = batched_nms(boxes, scores, labels, 0.5)
            results.append({"boxes": boxes[kept], "scores": scores[kept], "labels": labels[kept]})
        return results


def _leaves(out: object) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _compare(label: str, got: object, want: object) -> None:
    g, w = _leaves(got), _leaves(want)
    devices = sorted({str(t.device) for t in g})
    same = len(g) == len(w) and all(a.shape == b.shape for a, b in zip(g, w, strict=False))
    diff = max(((a.cpu().double() - b.cpu().double()).abs().max().item() for a, b in zip(g, w, strict=False)
                if a.numel()), default=0.0) if same else float("nan")
    print(f"{label}: outputs on {devices} (eager's on {sorted({str(t.device) for t in w})}), "
          f"shapes {'equal' if same else 'DIFFER'}, max diff {diff:.2e}")


def _case(label: str, fn: object) -> None:
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
        for w in caught:
            print(f"  warning {w.category.__name__}: {str(w.message)[:300]}")
    except Exception:  # noqa: BLE001 - a probe: print and go on
        print(f"{label}: FAILED\n  " + "\n  ".join(traceback.format_exc(limit=4).splitlines()[-6:]))


def main() -> int:
    import fxdeploy

    device = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device {device}")
    torch.manual_seed(0)
    models = {"classifier": Classifier().eval(), "loop detector": LoopDetector().eval()}
    for name, model in models.items():
        model.to(device)
        x = torch.randn(2, 3, 32, 32, device=device)
        with torch.no_grad():
            want = model(x)
        for target in sys.argv[2:] or ["torchscript", "onnxruntime"]:
            def lowered(model: nn.Module = model, x: torch.Tensor = x, target: str = target, name: str = name,
                        want: object = want) -> None:
                deployed = fxdeploy.lower(model, (x,), target=target)
                _compare(f"{name} lower({target})", deployed(x), want)

            def compiled(model: nn.Module = model, x: torch.Tensor = x, target: str = target, name: str = name,
                         want: object = want) -> None:
                torch._dynamo.reset()
                from fxdeploy.integrations import backends  # by object: a source checkout has no entry points

                backend = {"onnxruntime": "fxdeploy_ort"}.get(target, f"fxdeploy_{target}")
                with torch.no_grad():
                    got = torch.compile(model, backend=getattr(backends, backend))(x)
                _compare(f"{name} torch.compile({backend})", got, want)

            _case(f"{name} lower({target})", lowered)
            _case(f"{name} torch.compile({target})", compiled)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
