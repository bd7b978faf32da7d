"""The lowering report (``fxdeploy lower --report report.md``): what fxdeploy did, and why."""

from __future__ import annotations

from typing import Any

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.deployed import Deployed
from fxdeploy.partition import Engine, Host, Plan, Stage
from fxdeploy.settings import Settings
from fxdeploy.stages import StageEvent
from fxdeploy.version import __version__


def render_failure(
    model_spec: str, target: str, settings: Settings, events: list[StageEvent], error: BaseException, seconds: float,
) -> str:
    """The report of a lowering that failed: each stage it ran up to the failing one, and the error,
    which is when a report is wanted most."""
    from fxdeploy.cli.settings import render

    lines = [f"# fxdeploy lowering report: {target} (failed)", "", f"- model: `{model_spec}`",
             f"- fxdeploy {__version__}", f"- failed after {seconds:.2f} s", "", "## Stages", ""]
    ended = [e for e in events if e.status != "start"]
    running = [e for e in events if e.status == "start" and not any(
        (d.target, d.name) == (e.target, e.name) for d in ended)]
    if ended or running:
        lines += ["| stage | target | result | seconds |", "|---|---|---|---|"]
        lines += [f"| {e.name} | {e.target} | {'ok' if e.status == 'done' else 'FAILED'} | {e.seconds:.2f} |"
                  for e in ended]
        lines += [f"| {e.name} | {e.target} | FAILED (no end announced) | |" for e in running]
    else:
        lines.append("None: it failed before the capture started.")
    failed = next((e for e in ended if e.status == "failed"), None)
    lines += ["", "## Error", ""]
    if failed is not None:
        lines += [f"In stage **{failed.name}**" + (f" of target `{failed.target}`" if failed.target else "") + ":", ""]
    lines += ["```text", f"{type(error).__name__}: {str(error).strip()}", "```", "", "## Settings", "", "```toml",
              render(settings).rstrip(), "```", ""]
    return "\n".join(lines)


def render_report(deployed: Deployed, *, lower_seconds: float | None = None) -> str:
    manifest = deployed.manifest
    info = manifest["info"]
    lines = [f"# fxdeploy lowering report: {manifest['target']}", ""]
    lines += [
        f"- fxdeploy {manifest['fxdeploy_version']}, runtime {manifest['runtime_version']}",
        f"- capture mode: {info.get('capture_mode', '?')}",
        f"- substitutions applied: {', '.join(info.get('substitutions') or []) or 'none'}",
    ]
    per_image = manifest.get("per_image")
    if per_image is not None:
        engine = ("the engine takes the whole batch, one call" if per_image.get("engine") == "batch"
                  else f"the engine runs once per image ({per_image.get('why', 'captured so')})")
        lines.append(f"- the model loops over its images, captured for one image: {engine}")
    if info.get("widened_dims"):
        lines.append(f"- captured on the example repeated to size 2 along {', '.join(info['widened_dims'])} "
                     "(its size 1 would have been fixed by torch.export)")
    lines += [f"- {change}" for change in info.get("dim_changes", [])]
    if lower_seconds is not None:
        lines.append(f"- lowering time: {lower_seconds:.2f} s")
    lines += ["", "## Inputs and outputs", "", "| name | dtype | shape |", "|---|---|---|"]
    for spec in manifest["inputs"] + manifest["outputs"]:
        lines.append(f"| {spec['name']} | {spec['dtype']} | {spec['shape']} |")
    if manifest["dims"]:
        lines += ["", "| dim | min | opt | max |", "|---|---|---|---|"]
        lines += [f"| {n} | {r['min']} | {r['opt']} | {r['max']} |" for n, r in manifest["dims"].items()]
    lines += ["", "## Passes", ""]
    lines += _passes(deployed.report)
    lines += ["", "## Nodes the target could not take", ""]
    lines += _host_stages(manifest)
    if "int8" in info:
        lines += ["", "## INT8", ""]
        lines += _int8(info["int8"])
    lines += ["", "## Shape checks against eager", ""]
    lines += _checks(info)
    if manifest.get("guards"):
        lines += ["", "## Guards (Deployed refuses inputs that break one)", ""]
        lines += [f"- `{guard}`" for guard in manifest["guards"]]
    return "\n".join(lines) + "\n"


def _checks(info: dict[str, Any]) -> list[str]:
    """Each check, with the float-noise excuses it used (docs/checking.md), or why there is none."""
    if info.get("verified") is False:
        return ["Not checked: lowered with verify=False."]
    rows = ["| check | input shapes | max abs error | excused (docs/checking.md) |", "|---|---|---|---|"]
    original = info.get("original_check")
    checks = [*info.get("shape_checks", []), *([dict(original, label="the model without substitutions",
                                                     max_abs_error=None)] if original else [])]
    for check in checks:
        error = check["max_abs_error"]
        shown = "paired" if error is None else f"{error:.3g}"
        shown = f"skipped: breaks {check['skipped']}" if check.get("skipped") else shown
        excused = ", ".join(f"{rule} {n}" for rule, n in sorted(check.get("excused", {}).items())) or "none"
        rows.append(f"| {check['label']} | {check['shapes']} | {shown} | {excused} |")
    return rows


def _int8(int8: dict[str, Any]) -> list[str]:
    """How the artifact was quantized, and each op kept float with why."""
    calibration = int8.get("calibration", {})
    lines = [
        f"- {int8.get('format')}: weights {int8.get('weights')}, activations {int8.get('activations')}; "
        f"reduce_range {int8.get('reduce_range')} ({int8.get('why')})",
        f"- calibration: {calibration.get('samples')} samples, {calibration.get('method')}",
        "", "| op kept float | why |", "|---|---|",
    ]
    return lines + [f"| {name} | {why} |" for name, why in int8.get("float_ops", {}).items()]


def _passes(report: Any) -> list[str]:
    if report is None:
        return ["(not recorded: this Deployed was loaded from disk)"]
    rows = ["| pass | fired | ops changed (before → after) |", "|---|---|---|"]
    for record in report.records:
        changed = sorted(set(record.before) | set(record.after))
        delta = [
            f"{op}: {record.before.get(op, 0)} → {record.after.get(op, 0)}"
            for op in changed
            if record.before.get(op, 0) != record.after.get(op, 0)
        ]
        rows.append(f"| {record.name} | {'yes' if record.modified else 'no'} | {'; '.join(delta) or '—'} |")
    return rows


def _host_stages(manifest: Manifest) -> list[str]:
    """The ncnn plan as the runtime runs it: each stage in order, and for a host stage each op it
    runs and why the cut put it on the host rather than in the engine."""
    if "ncnn" not in manifest["info"]:
        return ["None: the whole graph runs in the engine."]
    names = [spec["name"] for spec in manifest["inputs"]]
    plan = Plan.from_dict(manifest["info"]["ncnn"], names)
    if not any(isinstance(stage.work, Host) for stage in plan.stages):
        return ["None: the whole graph runs in the engine."]
    kinds = ", ".join(f"{k}: {stage.kind}" for k, stage in enumerate(plan.stages))
    lines = [f"The graph runs in {len(plan.stages)} stages ({kinds}); the host stages run what the engine has no "
             "layer for (an NMS, a top-k, a gather by computed indices), as TorchScript, inside the same execute:", ""]
    for k, stage in enumerate(plan.stages):
        lines.append(f"- stage {k}: {_stage_line(stage, names)}")
        if isinstance(stage.work, Host):
            lines += [f"  - `{op.op}`: {op.why}" for op in stage.work.ops] or ["  - (ops not recorded)"]
    return lines + _unconverted(manifest["info"].get("unconverted_on_host"))


def _unconverted(fallback: Any) -> list[str]:
    """The nodes the lowering moved to the host because pnnx left their ops unconverted or the engine
    got their values wrong (each says which), and the limit."""
    if not isinstance(fallback, dict) or not fallback.get("ops"):
        return []
    ops = fallback["ops"]
    lines = ["", f"{len(ops)} node(s) run on the host because pnnx left their ops unconverted or ncnn gave "
             f"other values (at most {fallback.get('max_host_ops', '?')}: Settings.ncnn.max_host_ops):", ""]
    return lines + [f"- `{name}`: {why}" for name, why in ops.items()]


def _stage_line(stage: Stage, names: list[str]) -> str:
    work = stage.work
    taken = ", ".join(names[s.index] if s.stage is None else f"stage {s.stage} #{s.index}" for s in stage.sources)
    if isinstance(work, Engine):
        return f"engine `{work.param}`, takes {taken or 'nothing'}, gives {len(work.outputs)} output(s)"
    if isinstance(work, Host):
        return f"host `{work.file}`, takes {taken or 'nothing'}, runs {len(work.ops)} op(s):"
    return "empty (the cut moved its work into a later engine stage)"
