"""lower()'s own check of the artifact it built: the artifact against the model the user gave, at
the example, min, opt and max shapes (``parity.verify`` runs and compares them). Where a range
that capture gave back fails at its min, the narrowing torch.export wanted is taken back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import dims, guards, structure
from fxdeploy.capture import Captured, eval_mode, fixes, substitution
from fxdeploy.capture.nested_encoder import eager_nested_quiet
from fxdeploy.deployed import Deployed
from fxdeploy.errors import FxDeployError, InferenceError, LoweringError, first_line, user_stacklevel
from fxdeploy.parity import closeness, referee, rows, verify
from fxdeploy.settings import Settings
from fxdeploy.stages import stage


def check_artifact(
    deployed: Deployed, gm: torch.fx.GraphModule, captured: Captured, model: torch.nn.Module,
    subs: list[substitution.Substitution], settings: Settings,
) -> list[dict[str, Any]]:
    """Eager model vs artifact at the example, min, opt and max shapes (see fxdeploy.parity.verify)."""
    leaves = deployed.manifest["output_leaves"]
    atol = closeness.tolerance(settings, gm)
    example_want = None
    if captured.substitutions:  # the references below run them too
        example = captured.batch_inputs if captured.per_image is not None else captured.example_inputs
        with stage("check against the model without substitutions", deployed.target):
            excused = verify.against_original(deployed, model, example, captured.in_spec, captured.substitutions,
                                              atol)
        deployed.manifest["info"]["original_check"] = {"shapes": [list(x.shape) for x in example], "excused": excused}
    if captured.per_image is not None:
        return _verify_per_image(deployed, captured, model, subs, settings, leaves, atol)
    float64 = None
    if captured.mode == "strict" and captured.substitutions:
        # dynamo-only function substitutions: eager cannot apply them, so the reference is the
        # captured graph run by PyTorch, compared with the raw engine outputs.
        def eager_fn(inputs: list[torch.Tensor]) -> Any:
            return tuple(gm(*inputs))

        def deployed_fn(inputs: list[torch.Tensor]) -> Any:
            out = deployed.execute(dict(zip(deployed.input_names, inputs, strict=True)))
            return tuple(out[name] for name in deployed.output_names)

        flags = rows.specs([leaf for leaf in leaves if leaf["kind"] != "constant"])
    else:
        eager_fn = _eager_call(model, captured, subs)
        float64 = referee.in_float64(model, lambda copy: _eager_call(copy, captured, subs))

        def deployed_fn(inputs: list[torch.Tensor]) -> Any:
            return deployed.call_flat(inputs, unpack=False)

        flags = rows.specs([leaf for leaf in leaves if leaf["kind"] != "hidden"])
        example_want = captured.eager_outputs  # capture ran eager with the same substitutions
    def run_checks() -> list[dict[str, Any]]:
        return verify.run_checks(
            deployed.target, captured.dims, captured.example_inputs, captured.input_shapes,
            deployed_fn, eager_fn, atol, flags, settings.precision, example_want,
            captured.input_names, captured.guards, float64,
        )

    try:
        return run_checks()
    except (LoweringError, InferenceError) as exc:
        if captured.pending is None:
            raise
        _narrow_again(deployed, captured, exc)  # the declared min does not hold: narrow as torch.export did
        return run_checks()


def _narrow_again(deployed: Deployed, captured: Captured, failure: Exception) -> None:
    """Take back the ranges and guards that capture gave back (``Captured.pending``), in the
    capture, the manifest and the Deployed, and say so as torch.export's narrowing is said."""
    pending = captured.pending
    captured.dims.update(pending.dims)
    captured.guards = [*captured.guards, *pending.guards]
    lines = [
        f"dim {name!r} narrowed by torch.export to [{r.min}, {r.max}] (its 0/1 specialization); at the declared "
        f"min the artifact failed lower()'s check ({first_line(failure)}), so it refuses sizes below {r.min}"
        for name, r in pending.dims.items()
    ]
    fixes.warn(lines)
    deployed.restrict({name: r.to_dict() for name, r in pending.dims.items()}, captured.guards)
    deployed.manifest["info"]["dim_changes"] = [*deployed.manifest["info"].get("dim_changes", []), *lines]
    captured.pending = None


def _eager_call(
    model: torch.nn.Module, captured: Captured, subs: list[substitution.Substitution]
) -> Callable[[list[torch.Tensor]], Any]:
    """The model itself on flat inputs, as capture ran it (eval mode, method substitutions, but not
    the eager-equivalent ones: the check runs their targets), on copies: a model that writes into its
    inputs must not change what the artifact is given next."""
    subs = [s for s in subs if not s.eager_equivalent]

    def eager_fn(inputs: list[torch.Tensor]) -> Any:
        args, kwargs = pytree.tree_unflatten([x.clone() for x in inputs], captured.in_spec)
        try:
            with eval_mode(model), substitution.on_instances(model, subs), eager_nested_quiet():
                return model(*args, **kwargs)
        except FxDeployError:
            raise
        except Exception as exc:
            raise LoweringError(
                f"lower()'s check ran the model itself on inputs of shapes {[list(x.shape) for x in inputs]} (made "
                f"from the example: floats in its range, integers among its values) and the model raised "
                f"{first_line(exc)}. The check runs it at the "
                "example and at each dynamic dim's min, opt and max: narrow the dims to the sizes the model runs at"
            ) from exc

    return eager_fn


def _verify_per_image(
    deployed: Deployed, captured: Captured, model: torch.nn.Module, subs: list[substitution.Substitution],
    settings: Settings, leaves: list[dict[str, Any]], atol: float,
) -> list[dict[str, Any]]:
    """A per-image capture is checked as the user calls it: whole batches at the batch's min, opt
    and max (``_per_image_sizes``). Where the engine runs image by image, the reference is the
    model run eagerly on each image alone, joined as eager joins them: eager's own float noise
    between batch sizes (another convolution kernel at batch 8) can move a box across an NMS
    threshold. Where the engine takes the batch (the graph vectorized), the reference is the model
    on the same batch, whose batched layers round as the engine's do (Faster R-CNN's box head runs
    every image's proposals in one matmul)."""
    info = captured.per_image
    batch = dims.DimRange(info["dim"], info["min"], info["max"], min(max(info["opt"], info["min"]), info["max"]))
    shapes = [[info["dim"], *shape[1:]] for shape in captured.input_shapes]
    eager_fn = _eager_call(model, captured, subs)
    visible = [leaf for leaf in leaves if leaf["kind"] != "hidden"]
    checks = []
    batched = deployed.manifest["per_image"].get("engine") == "batch"
    for label, sizes in _per_image_sizes(batch, captured.dims):
        inputs = verify.resized(captured.batch_inputs, shapes, sizes, len(checks))
        skipped = _breaks_guard(label, inputs, captured)
        if skipped is not None:
            checks.append(skipped)
            continue
        with stage(f"check at {label} {[list(x.shape) for x in inputs]}", deployed.target), torch.no_grad():
            if batched:
                want = eager_fn(list(inputs))
            else:
                images = [eager_fn([x[i : i + 1] for x in inputs]) for i in range(inputs[0].shape[0])]
                want = structure.join_images(images, info["join"])
            # per-image leaves repeat once per image in a list over the images
            tiled = rows.specs(visible, inputs[0].shape[0]) if info["join"]["kind"] == "concat" else None
            got = deployed.call_flat(inputs, unpack=False)
            try:
                checked = verify.compare(label, inputs, got, want, atol, deployed.target,
                                         tiled, settings.precision)
            except LoweringError as exc:
                raise LoweringError(f"{exc}\n  {_PER_IMAGE_HINT}") from exc
        checks.append(verify.entry(label, inputs, checked))
    return checks


_PER_IMAGE_HINT = (
    "The model loops over its batch, so lower() captured it for one image and runs that graph on every image "
    "(manifest: per_image). If the loop's images are not independent (it reads the image's index, or carries a "
    "value from one image to the next), that graph computes something else: lower with a static batch (no dynamic "
    "dim 0), or write that loop as tensor ops over the batch"
)


def _breaks_guard(label: str, inputs: list[torch.Tensor], captured: Captured) -> dict[str, Any] | None:
    """A check whose sizes break one of torch.export's guards (read at a batch of 1, as the graph
    saw one image) is skipped with the ``DimWarning`` a whole-batch check gives: ``Deployed``
    refuses those sizes."""
    one = {name: [1, *x.shape[1:]] for name, x in zip(captured.input_names, inputs, strict=True)}
    broken = guards.violated(captured.guards, one) if captured.guards else None
    if broken is None:
        return None
    shapes = [list(x.shape) for x in inputs]
    warnings.warn(guards.warning(label, shapes, broken), fixes.DimWarning, stacklevel=user_stacklevel())
    return {"label": label, "shapes": shapes, "max_abs_error": None, "skipped": broken}


def _per_image_sizes(batch: dims.DimRange, others: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """The example, min, opt and max batches (with the other dims, ``others``, at theirs), each
    batch at most two images past the min: an artifact
    whose engine takes one image runs it once per image (and a vectorized graph is the same graph
    at every batch size), so a batch of two checks the host's loop and join as a
    batch of eight would, at a quarter of the cost (torchvision's detectors lower at 1 to 8)."""
    cap = max(2, batch.min)
    points: list[tuple[str, dict[str, int]]] = []
    for label, sizes in verify.check_sizes({batch.name: batch, **others}):
        capped = {name: min(size, cap) if name == batch.name else size for name, size in sizes.items()}
        if all(capped != s for _, s in points):
            points.append((label, capped))
    return points
