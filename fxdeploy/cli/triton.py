"""``fxdeploy export-triton``: a saved artifact into a Triton Inference Server model repository."""

from __future__ import annotations

import argparse
from typing import Any

from fxdeploy.cli import checks


def register(sub: Any) -> None:
    """Add ``export-triton`` to ``fxdeploy``'s subparsers."""
    parser = checks.add_command(
        sub, "export-triton", "write a Triton model repository entry (config.pbtxt + model file) for an artifact"
    )
    parser.add_argument("artifact", type=checks.artifact_dir,
                        help="artifact directory (from `fxdeploy lower` or Deployed.save)")
    parser.add_argument("--repo", required=True, type=checks.output_dir, help="Triton model repository directory")
    parser.add_argument("--name", default=None, type=_model_name,
                        help="model name (default: the artifact directory's name)")
    parser.add_argument("--version", type=checks.int_at_least(1), default=1, help="model version directory (default 1)")
    parser.add_argument(
        "--max-batch-size", type=checks.int_at_least(0), default=None,
        help="default: the artifact's batch range, capped at 64; 0 turns Triton batching off",
    )
    parser.add_argument("--instances", type=checks.int_at_least(1), default=1, help="instance_group count (default 1)")
    parser.add_argument("--no-dynamic-batching", action="store_true", help="leave dynamic_batching out")
    parser.set_defaults(func=_cmd_export_triton)


def _model_name(text: str) -> str:
    """A Triton model name is a directory of the repository: one path component."""
    if not text or text in (".", "..") or "/" in text or "\\" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a model name without '/' (a directory of the repo)")
    return text


def _cmd_export_triton(args: argparse.Namespace) -> int:
    from fxdeploy.integrations.triton import export_triton

    model_dir = export_triton(
        args.artifact, args.repo, model_name=args.name, version=args.version,
        max_batch_size=args.max_batch_size, instance_count=args.instances,
        dynamic_batching=not args.no_dynamic_batching,
    )
    print(f"wrote Triton model {model_dir.name!r} version {args.version} -> {model_dir}")
    print(f"  serve with: tritonserver --model-repository={model_dir.parent}")
    return 0
