"""``fxdeploy.lower`` and ``fxdeploy.load``: the two calls most users make."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy import artifact
from fxdeploy.artifact import dims, structure
from fxdeploy.artifact.manifest import Manifest
from fxdeploy.capture import Captured, batching, capture, devices, fixes, state, substitution
from fxdeploy.deployed import Deployed
from fxdeploy.errors import (
    ArtifactError,
    DynamicSizesUnsupported,
    FxDeployError,
    InferenceError,
    LoweringError,
    RegistryError,
    UnpackWarning,
    UnverifiedWarning,
    first_line,
)
from fxdeploy.parity.lower_check import check_artifact
from fxdeploy.passes.base import PipelineReport, run_pipeline
from fxdeploy.passes.record import record, update
from fxdeploy.quantize import Calibration
from fxdeploy.quantize.calibration import Calibrated, calibration_for, calibration_samples
from fxdeploy.settings import Settings
from fxdeploy.stages import stage
from fxdeploy.targets import Lowered, LoweringJob, Target, check_precision, describe, get_target, origin_of
from fxdeploy.version import __version__


def lower(
    model: torch.nn.Module,
    inputs: tuple[Any, ...] | torch.Tensor,
    target: str = "onnxruntime",
    dynamic_shapes: Any = None,
    settings: Settings | None = None,
    *,
    kwargs: dict[str, Any] | None = None,
    substitutions: dict[Callable[..., Any], Any] | None = None,
    calibration: Any = None,
) -> Deployed:
    """Capture ``model`` on ``inputs``, run ``target``'s passes, lower it, and load the result.
    ``calibration``: for ``Settings(precision="int8")``, an iterable of example-input tuples or a
    ``fxdeploy.Calibration``; the calibration batch need not be the example's."""
    calibration = calibration_for(settings or Settings(), calibration, target)
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    model, args, kwargs = devices.on_cpu(model, args, kwargs)  # a model on cuda:0: captured from a CPU copy
    if target == "auto":  # lower to every available target, keep the fastest that matches eager
        from fxdeploy.parity.auto import lower_auto

        return lower_auto(lower, model, args, dynamic_shapes, settings, kwargs=kwargs, substitutions=substitutions)
    settings = settings or Settings()
    chosen = get_target(target)
    chosen.require()
    check_precision(chosen, settings.precision)
    subs = substitution.resolve(substitutions)

    def build(shapes: Any = dynamic_shapes) -> Deployed:
        try:
            with stage("capture", chosen.name):
                captured = capture(model, args, kwargs, dynamic_shapes=shapes, substitutions=subs, settings=settings)
            gm = captured.graph_module
            update(gm, output_names=tuple(captured.output_names))
            with stage("passes", chosen.name):
                gm, report = run_pipeline(gm, chosen.pipeline, settings)
            try:
                return _lower_graph(chosen, captured, gm, report, settings, model, subs, calibration)
            except DynamicSizesUnsupported as exc:  # once more, with those sizes fixed (none left: raised)
                return _with_fixed_sizes(build, captured, chosen, exc)
        except InferenceError as exc:  # the artifact was built, and fails on lower()'s own checks
            raise LoweringError(f"target {chosen.name!r}: the lowered artifact failed lower()'s check: {exc}") from exc
        except FxDeployError:
            raise
        except Exception as exc:  # noqa: BLE001 - nothing raw escapes lower()
            shapes = [tuple(x.shape) for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            raise LoweringError(
                f"target {chosen.name!r}: lowering failed on inputs {shapes}: {first_line(exc)}. "
                "fxdeploy did not expect this failure: "
                "set logging.getLogger('fxdeploy') to DEBUG for the stages it ran, and report it with the model"
            ) from exc

    state.warn_training(model)
    with state.kept_values(model):  # whatever lower() runs, the model's buffers keep the user's values
        if not settings.cache.enabled:
            return build()
        return _cached(build, chosen, model, args, kwargs, dynamic_shapes, subs, settings, calibration)


def _cached(
    build: Callable[[], Deployed], chosen: Target, model: torch.nn.Module, args: tuple[Any, ...],
    kwargs: dict[str, Any] | None, dynamic_shapes: Any, subs: list[substitution.Substitution], settings: Settings,
    calibration: Calibration | None,
) -> Deployed:
    """``build()``'s artifact from the cache, or built and stored (keyed by the calibration's values too)."""
    from fxdeploy.cache import cached_lower, in_process_loader, model_parts

    deployed, _ = cached_lower(
        chosen.name,
        lambda: model_parts(model, args, kwargs, dynamic_shapes, subs),
        build=build,
        settings_dict=settings.to_dict(sections=list(chosen.sections))
        | ({"calibration": calibration.fingerprint()} if calibration is not None else {}),
        cache_dir=settings.cache.dir or None,
        max_bytes=int(settings.cache.max_gib * 2**30),
        load=in_process_loader(model, args, kwargs, subs),
    )
    return deployed


def _lower_graph(
    chosen: Target, captured: Captured, gm: torch.fx.GraphModule, report: PipelineReport,
    settings: Settings, model: torch.nn.Module, subs: list[substitution.Substitution],
    calibration: Calibration | None = None,
) -> Deployed:
    if record(gm).output_leaves is None:
        raise LoweringError(
            f"target {chosen.name!r}: its pass pipeline never described the outputs; "
            "end it with fxdeploy.passes.tensorize_outputs.tensorize_outputs, as the built-in pipelines do"
        )
    leaves = list(record(gm).output_leaves)
    tensor_names = [leaf["name"] for leaf in leaves if leaf["kind"] != "constant"]
    workdir = tempfile.TemporaryDirectory(prefix="fxdeploy-")
    out_dir = Path(workdir.name)
    unchanged = not any(record.modified for record in report.records)
    job = LoweringJob(
        gm, captured.example_inputs, captured.input_names, tensor_names,
        captured.export_dynamic_shapes, settings, out_dir,
        exported_program=captured.exported_program if unchanged else None,
    )
    engine = batching.engine_for(chosen, captured, settings)
    if engine.vectorize:
        with stage("vectorize", chosen.name):
            job = batching.vectorized_job(job, captured, engine)
    try:
        if calibration is not None:  # the target quantizes in its lowering (TensorRT: before its engine build)
            samples = calibration_samples(calibration, captured, per_image_engine=not engine.vectorize)
            job.calibration = Calibrated(calibration, samples)
        with stage("lowering", chosen.name):
            lowered = _lower(chosen, job)
        manifest = _manifest(chosen, captured, gm, leaves, tensor_names, settings, lowered.files, lowered.info)
        batching.describe(manifest, engine)
        manifest["files"] = {name: artifact.sha256(out_dir / name) for name in lowered.files}
        manifest["info"]["verified"] = settings.verify  # False: the user turned lower()'s check off
        with stage("loading", chosen.name):
            executor = chosen.load(out_dir, manifest, settings)
    except BaseException:
        workdir.cleanup()  # nothing owns it yet; from here on the Deployed removes it
        raise
    deployed = Deployed(
        executor, manifest, out_dir, keepalive=workdir, out_spec=captured.out_spec,
        dataclass_template=captured.dataclass_template, unpacks=captured.unpacks, report=report,
    )
    if settings.verify:
        with stage("check against eager", chosen.name):
            manifest["info"]["shape_checks"] = check_artifact(deployed, gm, captured, model, subs, settings)
        executor.timings.reset()
    return deployed


def _with_fixed_sizes(build: Callable[[Any], Deployed], captured: Captured, chosen: Target, exc: Exception) -> Deployed:
    """``build`` with the dims besides the batch fixed at the example's (warned, recorded); raises if none is left."""
    why = f"{str(exc).splitlines()[0].rstrip(':')}, so it cannot stay dynamic"
    refit = fixes.fixed_at_example(captured.export_dynamic_shapes, captured.example_inputs, why)
    if refit is None:
        raise LoweringError(f"target {chosen.name!r}: {exc}") from exc
    fixes.warn(refit[1])  # then build with them fixed
    deployed = build(refit[0])
    deployed.manifest["info"]["dim_changes"] = [*refit[1], *deployed.manifest["info"].get("dim_changes", [])]
    return deployed


def _lower(chosen: Target, job: LoweringJob) -> Lowered:
    try:
        return chosen.lower(job)
    except DynamicSizesUnsupported:  # lower() fixes the sizes and lowers again
        raise
    except LoweringError as exc:
        raise LoweringError(f"target {chosen.name!r}: {exc}") from exc


def _manifest(
    chosen: Target, captured: Captured, gm: torch.fx.GraphModule, leaves: list[dict[str, Any]],
    tensor_names: list[str], settings: Settings, files: list[str], info: dict[str, Any],
) -> Manifest:
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    values = [n.meta.get("val") for n in output_node.args[0]]
    outputs = [
        {"name": name, "dtype": _dtype(v), "shape": dims.symbolic_dims(v, captured.symbol_names)}
        for name, v in zip(tensor_names, values, strict=True)
    ]
    inputs = [
        {"name": name, "dtype": _dtype(x), "shape": shape}
        for name, x, shape in zip(captured.input_names, captured.example_inputs, captured.input_shapes, strict=True)
    ]
    plain_spec = pytree.tree_structure(structure.dataclasses_to_dicts(captured.eager_outputs))
    return {
        "schema_version": artifact.SCHEMA_VERSION,
        "fxdeploy_version": __version__,
        "target": chosen.name,
        "runtime_version": chosen.version(),
        "inputs": inputs,
        "outputs": outputs,
        "output_leaves": leaves,
        "output_tree": structure.describe(captured.out_spec if captured.dataclass_template is None else plain_spec),
        "input_tree": structure.describe(captured.in_spec),
        "dims": {name: r.to_dict() for name, r in captured.dims.items()},
        **({"guards": captured.guards} if captured.guards else {}),
        **({"per_image": captured.per_image} if captured.per_image is not None else {}),
        "settings": settings.to_dict(sections=list(chosen.sections)),  # fxdeploy's and the target's own
        "files": dict.fromkeys(files, ""),
        "info": dict(
            info, capture_mode=captured.mode, substitutions=captured.substitutions,
            **({"unpack": [_qualname(u) for u in captured.unpacks]} if captured.unpacks else {}),
            precision=record(gm).precision or {"policy": settings.precision},
            **({"target_origin": origin_of(chosen.name)} if origin_of(chosen.name) else {}),
            **({"widened_dims": captured.widened_dims} if captured.widened_dims else {}),
            **({"dim_changes": captured.dim_changes} if captured.dim_changes else {}),
        ),
    }


def _qualname(function: Callable[..., Any]) -> str:
    """A name to find an unpack by; the manifest keeps names, never code."""
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


def _dtype(value: Any) -> str:
    return str(value.dtype).removeprefix("torch.") if isinstance(value, torch.Tensor) else "unknown"


def _target_of(root: Path, manifest: Manifest) -> Target:
    """The artifact's target; where it is missing, the distribution that provided it when lowering."""
    try:
        return get_target(manifest["target"])
    except RegistryError as exc:
        origin = manifest.get("info", {}).get("target_origin")
        if not isinstance(origin, dict) or not isinstance(origin.get("distribution"), str):
            raise
        raise RegistryError(
            f"{root}: target {manifest['target']!r} is not registered here; the artifact was lowered with "
            f"{describe(origin)}: install it (pip install {origin['distribution']}) to load this artifact"
        ) from exc


def load(
    directory: str | Path,
    *,
    settings: Settings | None = None,
    unpack: Callable[[Any], Any] | None = None,
) -> Deployed:
    """Load a saved artifact. Only data is read: hashes are checked, nothing is unpickled or run."""
    root, manifest = artifact.read_manifest(directory)
    chosen = _target_of(root, manifest)
    chosen.require()
    if settings is None:
        try:
            settings = Settings.from_manifest(manifest["settings"])
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"{root / artifact.MANIFEST}: {exc}") from exc
    if "model.onnx" in manifest["files"]:  # confine its external weights to the artifact's own files
        from fxdeploy.artifact.onnx_files import check_external_data

        check_external_data(root / "model.onnx", set(manifest["files"]) - {"model.onnx"})
    try:
        executor = chosen.load(root, manifest, settings)
    except FxDeployError:
        raise
    except Exception as exc:  # noqa: BLE001 - the runtime's own parser refused the files
        raise ArtifactError(
            f"{root}: the {chosen.name} runtime could not load {', '.join(manifest['files']) or 'its files'} "
            f"({type(exc).__name__}: {str(exc).strip()[:300]})"
        ) from exc
    if manifest.get("info", {}).get("verified") is False:
        warnings.warn(
            f"{root}: lowered with verify=False, so nothing compared this artifact with the model it came from; "
            "lower it again with the check on (the default) before trusting its outputs",
            UnverifiedWarning, stacklevel=2,
        )
    needed = manifest.get("info", {}).get("unpack")
    if unpack is None and needed:
        warnings.warn(
            f"{root}: lowered with a substitution whose unpack ({', '.join(map(str, needed))}) rebuilds the "
            "model's output on the host; an artifact carries no code, so calls return the padded outputs. "
            "Pass fxdeploy.load(dir, unpack=<that function>) for the model's own structure",
            UnpackWarning, stacklevel=2,
        )
    return Deployed(executor, manifest, root, unpacks=[unpack] if unpack else None)
