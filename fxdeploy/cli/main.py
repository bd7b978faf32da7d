"""``fxdeploy``'s parser and its lower, run and check-env commands (the others: bench, triton)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

import numpy as np
import torch

from fxdeploy.cli import checks
from fxdeploy.cli import settings as settings_cli
from fxdeploy.cli.bench import add_parsers as add_bench_parsers
from fxdeploy.cli.checks import UsageError
from fxdeploy.cli.model_spec import load_model
from fxdeploy.cli.shapes import check_dynamic, dynamic_item, parse_dynamic, parse_shapes, random_inputs, shape_item
from fxdeploy.cli.triton import register as _register_triton

DESCRIPTION = """Lower a PyTorch model to an artifact for a deployment runtime, run it, and compare or time it.

Every argument is checked before any work starts; `fxdeploy COMMAND --help` lists a command's own."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:  # a bad command line, found before any work
        return checks.fail(f"fxdeploy {args.command}", str(exc))
    except Exception as exc:  # noqa: BLE001 - a CLI prints the error, not a traceback
        from fxdeploy.errors import FxDeployError

        if args.verbose or not isinstance(exc, (FxDeployError, ValueError, FileNotFoundError, TypeError, ImportError)):
            raise
        print(f"fxdeploy: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = checks.Parser(prog="fxdeploy", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the libraries' own output (torch, pnnx, ncnn) and tracebacks")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

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
    lower.add_argument("--report", type=checks.output_file, help="write a markdown lowering report here")
    settings_cli.add_arguments(lower)
    lower.set_defaults(func=_cmd_lower)

    run = checks.add_command(sub, "run", "run an artifact on random (or given .npz) inputs and time it")
    run.add_argument("artifact", type=checks.artifact_dir, help="artifact directory (from fxdeploy lower)")
    run.add_argument("--inputs", type=checks.existing_file, help=".npz file with one array per input name")
    run.add_argument("--runs", type=checks.int_at_least(1), default=20)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.set_defaults(func=_cmd_run)

    env = checks.add_command(sub, "check-env", "list targets: available, version, and what to install")
    env.add_argument("--json", action="store_true")
    env.set_defaults(func=_cmd_check_env)
    _register_triton(sub)  # export-triton

    add_bench_parsers(sub)  # bench, compare
    return parser


def _cmd_lower(args: argparse.Namespace) -> int:
    import time

    import fxdeploy
    from fxdeploy.cli.model_spec import load_substitutions

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
    model, inputs = load_model(args.model)
    dynamic = parse_dynamic(args.dynamic)
    check_dynamic(dynamic, model, inputs)
    if args.shape:
        dynamic = parse_shapes(args.shape, model, inputs)
    start = time.perf_counter()
    deployed = fxdeploy.lower(
        model, inputs, target=args.target, dynamic_shapes=dynamic, settings=settings,
        substitutions=load_substitutions(args.model),
    )
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


def _cmd_run(args: argparse.Namespace) -> int:
    import warnings

    import fxdeploy

    with warnings.catch_warnings(record=True) as caught:  # each one line, as the CLI prints errors
        warnings.simplefilter("always")
        deployed = fxdeploy.load(args.artifact)
    for warning in caught:
        print(f"fxdeploy: warning: {warning.message}", file=sys.stderr)
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as data:
            feeds = {name: torch.from_numpy(data[name]) for name in data.files}
    else:
        feeds = random_inputs(deployed.manifest)
    outputs: dict[str, torch.Tensor] = {}
    for _ in range(max(1, args.runs)):
        outputs = deployed.execute(feeds)
    stats = deployed.stats.as_dict()
    summary = {
        name: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
               "head": t.flatten()[:5].tolist()}
        for name, t in outputs.items()
    }
    if args.json:
        print(json.dumps({"target": deployed.target, "outputs": summary, "stats_ms": stats}))
        return 0
    print(f"{deployed!r}")
    for name, info in summary.items():
        print(f"  {name}: {info['dtype']}{info['shape']} {info['head']}")
    print("  execute ms: " + ", ".join(f"{k}={v:.3f}" if k != "count" else f"{k}={v}" for k, v in stats.items()))
    return 0


def _cmd_check_env(args: argparse.Namespace) -> int:
    import fxdeploy

    rows = fxdeploy.targets()
    if args.json:
        print(json.dumps({n: {"available": s.available, "version": s.version, "reason": s.reason, "source": s.source}
                          for n, s in rows.items()}))
        return 0
    print(f"fxdeploy {fxdeploy.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    width = max(len(n) for n in rows)
    for name, status in rows.items():
        mark = "yes" if status.available else "no "
        detail = status.version if status.available else status.reason
        origin = "" if status.source == "fxdeploy" or not status.available else f"  ({status.source})"
        print(f"  {name:<{width}}  {mark}  {detail}{origin}")
    return 0
