"""``fxdeploy lower``: every argument checked first, then the lowering; ``--report`` is written
whether the lowering succeeds or fails (then up to the stage that failed, with the error)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from fxdeploy.cli import checks
from fxdeploy.cli import settings as settings_cli
from fxdeploy.cli.calibration import calibration_spec, load_calibration
from fxdeploy.cli.checks import UsageError
from fxdeploy.cli.model_spec import load_model, load_substitutions
from fxdeploy.cli.shapes import check_dynamic, dynamic_item, parse_dynamic, parse_shapes, shape_item
from fxdeploy.settings import Settings
from fxdeploy.stages import StageEvent, listening


def add_parser(sub: Any) -> None:
    lower = checks.add_command(sub, "lower", "capture, pass and lower a model into an artifact directory")
    lower.add_argument("model", type=checks.model_spec,
                       help="file.py:factory or package.module:factory returning (model, inputs)")
    lower.add_argument("--target", default="onnxruntime", help="a target (fxdeploy check-env lists them) or 'auto'")
    lower.add_argument("--out", type=checks.output_dir, help="artifact directory to write (atomically)")
    lower.add_argument(
        "--dynamic", action="append", default=[], type=dynamic_item, metavar="INPUT:DIM[:NAME[:MIN:MAX]]",
        help="mark a dim dynamic, e.g. x:0:batch:1:32 (repeatable)",
    )
    lower.add_argument(
        "--shape", action="append", default=[], type=shape_item, metavar="INPUT:DIMS",
        help="input shape with ranges, e.g. x:1..8x3x224..640x224..640, or named and with an opt "
        "value, x:batch=1..4..8x3x224x224 (repeatable)",
    )
    lower.add_argument("--calibration", type=calibration_spec, metavar="FILE.py:FACTORY|DATA.npz",
                       help="--precision int8's calibration data: a factory returning an iterable of example-input "
                       "tuples, or a .npz with one [samples, ...] array per input")
    lower.add_argument("--report", type=checks.output_file,
                       help="write a markdown lowering report here (on failure too: the stages up to it, the error)")
    lower.add_argument("--no-progress", action="store_true", help="no stage lines on the terminal")
    settings_cli.add_arguments(lower)
    lower.set_defaults(func=_cmd_lower)


def _cmd_lower(args: argparse.Namespace) -> int:
    import fxdeploy

    settings = settings_cli.resolve(args)
    if args.print_settings:
        print(settings_cli.render(settings), end="")
        return 0
    if args.out is None:
        raise UsageError("argument --out: missing; expected the artifact directory to write (or --print-settings)")
    if args.dynamic and args.shape:
        raise UsageError("arguments --dynamic and --shape: both given; expected one of them")
    if args.target != "auto":
        checks.require_target(args.target, settings.precision)
    calibration = load_calibration(args.calibration, settings.precision)
    model, inputs = load_model(args.model)
    dynamic = parse_dynamic(args.dynamic)
    check_dynamic(dynamic, model, inputs)
    if args.shape:
        dynamic = parse_shapes(args.shape, model, inputs)
    events: list[StageEvent] = []
    start = time.perf_counter()
    try:
        with listening(events.append):
            deployed = fxdeploy.lower(
                model, inputs, target=args.target, dynamic_shapes=dynamic, settings=settings,
                substitutions=load_substitutions(args.model), calibration=calibration,
            )
    except Exception as exc:
        if args.report:
            _write_failure_report(args, settings, events, exc, time.perf_counter() - start)
        raise
    elapsed = time.perf_counter() - start
    path = deployed.save(args.out)
    print(f"lowered {type(model).__name__} to {deployed.target} in {elapsed:.2f} s -> {path}")
    print(f"  {deployed!r}")
    checks_run = deployed.manifest["info"].get("shape_checks", [])
    if checks_run:
        worst = max((c["max_abs_error"] for c in checks_run if c["max_abs_error"] is not None), default=0.0)
        print(f"  checked against eager at {', '.join(c['label'] for c in checks_run)}: max abs error {worst:.3g}")
    if args.report:
        from fxdeploy.cli.report import render_report

        args.report.write_text(render_report(deployed, lower_seconds=elapsed), encoding="utf-8")
        print(f"  report -> {args.report}")
    return 0


def _write_failure_report(
    args: argparse.Namespace, settings: Settings, events: list[StageEvent], exc: Exception, seconds: float,
) -> None:
    from fxdeploy.cli.report import render_failure

    text = render_failure(args.model, args.target, settings, events, exc, seconds)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text, encoding="utf-8")
    print(f"fxdeploy lower: the report up to the failing stage -> {args.report}")
