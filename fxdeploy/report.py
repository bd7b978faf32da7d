"""The lowering report (``fxdeploy lower --report report.md``): what fxdeploy did, and why."""

from __future__ import annotations

from typing import Any

from fxdeploy.deployed import Deployed


def render_report(deployed: Deployed, *, lower_seconds: float | None = None) -> str:
    manifest = deployed.manifest
    info = manifest["info"]
    lines = [f"# fxdeploy lowering report: {manifest['target']}", ""]
    lines += [
        f"- fxdeploy {manifest['fxdeploy_version']}, runtime {manifest['runtime_version']}",
        f"- capture mode: {info.get('capture_mode', '?')}",
        f"- substitutions applied: {', '.join(info.get('substitutions') or []) or 'none'}",
    ]
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
    lines += _host_stages(info)
    lines += ["", "## Shape checks against eager", "", "| check | input shapes | max abs error |", "|---|---|---|"]
    for check in info.get("shape_checks", []):
        error = check["max_abs_error"]
        shown = f"skipped: breaks {check['skipped']}" if error is None else f"{error:.3g}"
        lines.append(f"| {check['label']} | {check['shapes']} | {shown} |")
    if manifest.get("guards"):
        lines += ["", "## Guards (Deployed refuses inputs that break one)", ""]
        lines += [f"- `{guard}`" for guard in manifest["guards"]]
    return "\n".join(lines) + "\n"


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


def _host_stages(info: dict[str, Any]) -> list[str]:
    """The ncnn plan's stages: which run in the engine, which on the host and with what ops."""
    stages = info.get("ncnn", {}).get("stages") or []
    host = [(k, stage) for k, stage in enumerate(stages) if stage.get("kind") == "host"]
    if not host:
        return ["None: the whole graph runs in the engine."]
    kinds = ", ".join(f"{k}: {stage.get('kind')}" for k, stage in enumerate(stages))
    lines = [f"The graph runs in {len(stages)} stages ({kinds}); the host stages run what the engine has no "
             "layer for (an NMS, a top-k, a gather by computed indices), as TorchScript, inside the same execute:"]
    lines += [f"- stage {k}: {', '.join(stage.get('ops', [])) or '(ops not recorded)'}" for k, stage in host]
    return lines
