"""``fxdeploy bench`` and ``fxdeploy compare``: the two commands that compare targets."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fxdeploy.cli import checks
from fxdeploy.cli.checks import UsageError
from fxdeploy.cli.shapes import dynamic_item

MODEL_HELP = "file.py:factory or package.module:factory returning (model, inputs)"


def add_parsers(sub: Any) -> None:
    """Register the two subcommands on ``fxdeploy``'s subparsers."""
    count, number = checks.int_at_least, checks.float_at_least
    bench = checks.add_command(sub, "bench", "time eager, inductor, the peers and every fxdeploy target side by side")
    bench.add_argument("model", type=checks.model_spec, help=MODEL_HELP)
    bench.add_argument("--targets", default="all", help="'all' or a comma-separated list of fxdeploy targets")
    bench.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                       help="also time torch.onnx.export+ORT, OpenVINO's torch.compile and pnnx+ncnn")
    bench.add_argument("--inductor", action=argparse.BooleanOptionalAction, default=True)
    bench.add_argument("--batch", type=int, nargs="+", metavar="N",
                       help="batch size(s); the example inputs are cycled along dim 0 (default: as given)")
    bench.add_argument("--threads", type=count(1), default=2, help="intra-op threads for every row (default 2)")
    bench.add_argument("--warmup", type=number(0), default=1.0, metavar="S", help="warm-up seconds (and >= 10 runs)")
    bench.add_argument("--warmup-runs", type=count(0), default=10)
    bench.add_argument("--min-time", type=number(0), default=3.0, metavar="S", help="measured seconds per row")
    bench.add_argument("--min-runs", type=count(1), default=50)
    bench.add_argument("--rounds", type=count(1), default=5, help="interleaved measurement rounds")
    bench.add_argument("--json", type=checks.output_file, metavar="OUT.json",
                       help="write the result document (schema: benchmarks/SCHEMA.md)")
    bench.add_argument("--plot", type=checks.output_file, metavar="OUT.png",
                       help="write a bar plot of median latency (p90 whiskers)")
    bench.add_argument("--no-progress", action="store_true", help="no progress lines")
    bench.set_defaults(func=_cmd_bench)

    compare = checks.add_command(sub, "compare", "lower to targets and check their outputs against eager PyTorch")
    compare.add_argument("model", type=checks.model_spec, help=MODEL_HELP)
    compare.add_argument("--targets", required=True, help="comma-separated fxdeploy targets")
    compare.add_argument("--atol", type=number(0), default=1e-4)
    compare.add_argument("--rtol", type=number(0), default=1e-3)
    compare.add_argument("--iou", type=number(0, above=True, high=1), default=0.99,
                         help="IoU for 'same box' when matching detections")
    compare.add_argument("--score-atol", type=number(0), default=1e-4, help="score tolerance for matched detections")
    compare.add_argument("--threads", type=count(1), default=2)
    compare.add_argument("--dynamic", action="append", default=[], type=dynamic_item,
                         metavar="INPUT:DIM[:NAME[:MIN:MAX]]")
    compare.add_argument("--batch", type=int, nargs="+", metavar="N",
                         help="compare at these batch sizes, the example's rows cycled along dim 0, each target "
                              "lowered once (without --dynamic, dim 0 of every input is one dynamic batch dim)")
    compare.add_argument("--no-progress", action="store_true", help="no stage lines on the terminal")
    compare.set_defaults(func=_cmd_compare)


def _check_batches(batches: list[int] | None) -> None:
    for batch in batches or []:
        if batch < 1:
            raise UsageError(f"argument --batch: expected an integer >= 1, got {batch}")


def _cmd_bench(args: argparse.Namespace) -> int:
    from fxdeploy.bench import markdown, plot, run_benchmark
    from fxdeploy.cli.model_spec import load_model, load_substitutions

    targets: str | list[str] = "all" if args.targets == "all" else checks.target_names(args.targets)
    _check_batches(args.batch)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"argument --plot: {args.plot} needs matplotlib; expected it installed (pip install "
                         "fxdeploy[bench]) or no --plot")
    model, inputs = load_model(args.model)
    batches: list[int | None] = list(args.batch) if args.batch else [None]
    for batch in batches:
        document = run_benchmark(
            model, inputs, targets=targets, peers=args.peers, inductor=args.inductor, batch=batch,
            threads=args.threads, warmup_s=args.warmup, warmup_runs=args.warmup_runs, min_time_s=args.min_time,
            min_runs=args.min_runs, rounds=args.rounds, model_name=args.model, model_spec=args.model,
            progress=not args.no_progress and sys.stderr.isatty(), substitutions=load_substitutions(args.model),
        )
        print(markdown(document))
        print()
        suffix = f"-b{batch}" if len(batches) > 1 else ""
        if args.json:
            path = _suffixed(args.json, suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(document, indent=2))
            print(f"wrote {path}", file=sys.stderr)
        if args.plot:
            print(f"wrote {plot(document, _suffixed(args.plot, suffix))}", file=sys.stderr)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    return run_compare(args)


def run_compare(args: argparse.Namespace, transform: Mapping[str, Callable[[Any], Any]] | None = None) -> int:
    """The compare command; ``transform`` lets tests perturb a target's outputs in-process."""
    import dataclasses

    from fxdeploy.cli.model_spec import load_model, load_substitutions
    from fxdeploy.cli.shapes import check_dynamic, parse_dynamic
    from fxdeploy.parity.compare import compare
    from fxdeploy.parity.outputs import Tolerances
    from fxdeploy.settings import Settings

    targets = checks.target_names(args.targets)
    _check_batches(args.batch)
    model, inputs = load_model(args.model)
    dynamic = parse_dynamic(args.dynamic)
    check_dynamic(dynamic, model, inputs)
    report = compare(
        model, inputs, targets,
        tolerances=Tolerances(args.atol, args.rtol, args.iou, args.score_atol),
        settings=dataclasses.replace(Settings(), threads=args.threads),
        dynamic_shapes=dynamic, substitutions=load_substitutions(args.model),
        transform=transform, batches=args.batch,
    )
    print(report)
    return report.exit_code()


def _suffixed(path: str, suffix: str) -> Path:
    p = Path(path)
    return p.with_name(p.stem + suffix + p.suffix)
