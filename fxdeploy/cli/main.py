"""``fxdeploy``'s parser and its lower, run and check-env commands (the others: bench, triton)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from fxdeploy.cli import checks, console
from fxdeploy.cli.bench import add_parsers as add_bench_parsers
from fxdeploy.cli.checks import UsageError
from fxdeploy.cli.lower import add_parser as add_lower_parser
from fxdeploy.cli.shapes import random_inputs
from fxdeploy.cli.triton import register as _register_triton
from fxdeploy.errors import first_line

DESCRIPTION = """Lower a PyTorch model to an artifact for a deployment runtime, run it, and compare or time it.

Every argument is checked before any work starts; `fxdeploy COMMAND --help` lists a command's own."""


WORK = frozenset({"lower", "compare", "bench", "run", "export-triton"})
"""The commands that run the libraries, whose output goes to a debug log unless -v."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if args.verbose or args.command not in WORK:
        return _dispatch(args, None)
    with console.quiet(args.command) as log:
        code = _dispatch(args, log)
    if not getattr(args, "keep_log", False):
        log.unlink(missing_ok=True)
    return code


def _dispatch(args: argparse.Namespace, log: Path | None) -> int:
    """Run the command; an error is printed in one line (and where the debug log is), never raised
    (but with -v, where the traceback is what was asked for)."""
    from fxdeploy.errors import FxDeployError

    try:
        with console.progress(not getattr(args, "no_progress", True)):
            return int(args.func(args) or 0)
    except UsageError as exc:  # a bad command line, found before any work
        return checks.fail(f"fxdeploy {args.command}", str(exc))
    except Exception as exc:  # noqa: BLE001 - a CLI prints the error, not a traceback
        expected = isinstance(exc, (FxDeployError, ValueError, FileNotFoundError, TypeError, ImportError))
        if args.verbose or (log is None and not expected):
            raise
        print(f"fxdeploy: error: {exc}" if expected else f"fxdeploy: unexpected error: {first_line(exc)}",
              file=sys.stderr)
        if log is not None:
            if not expected:
                with log.open("a", encoding="utf-8") as handle:
                    traceback.print_exception(exc, file=handle)
            args.keep_log = True
            print(f"fxdeploy: what torch and the runtimes printed{'' if expected else ', and the traceback'}: {log} "
                  "(or run with -v)", file=sys.stderr)
        return 2 if expected else 1


def _parser() -> argparse.ArgumentParser:
    parser = checks.Parser(prog="fxdeploy", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the libraries' own output (torch, pnnx, ncnn) and tracebacks")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

    add_lower_parser(sub)  # lower

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
