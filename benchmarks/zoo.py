"""The model zoo benchmark: every zoo model on every available target, side by side in one run.

For each model of ``examples/zoo.py``, one ``fxdeploy.bench.run_benchmark`` run lowers it to
every available target (in fresh subprocesses, from the factory spec, with the zoo's
substitutions), builds eager, inductor and the peers a user would pick instead (plain
``torch.onnx.export`` + an ONNX Runtime session, OpenVINO's own ``torch.compile``, pnnx + ncnn),
checks each against eager and times them interleaved (docs/performance.md: warm-up >= 1 s, then >= 3 s and
>= 50 runs, pinned threads). Ratios are only taken within one model's run.

    .venv/bin/python benchmarks/zoo.py [--models resnet50,detr_small] [--batch 1] [--threads 2] [--rounds 30]

Writes one JSON document per model to benchmarks/results/zoo/ and the "## Model zoo" section of
benchmarks/README.md (``--no-readme`` skips it; ``--from-json`` re-reports saved documents).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from examples.zoo import ZOO  # noqa: E402
from tests.zoo.known_failures import known_failure_lines  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "zoo"
README = ROOT / "benchmarks" / "README.md"
HEADING = "## Model zoo"
ROUNDS = 30
"""Each row's 3 s of timing in 30 slices (about 0.1 s), contenders in a fresh order per round: this
machine's load changes over seconds, and coarse rounds let one row catch a busy phase the others
missed (vit_small's two identical ORT graphs came out 1.12x apart with 5 rounds)."""
CNNS = ("resnet50", "resnet_small")
"""docs/performance.md's "best target >= 2x faster than eager" bar applies to the zoo's CNNs."""


def bench_model(name: str, batch: int, threads: int, rounds: int) -> dict[str, Any]:
    from fxdeploy.bench import run_benchmark

    entry = ZOO[name]
    model, inputs = entry.factory()
    return run_benchmark(
        model, inputs, batch=batch, threads=threads, rounds=rounds, model_name=name,
        model_spec=f"{ROOT / 'examples' / 'zoo.py'}:{entry.factory.__name__}",
        substitutions=entry.substitutions, progress=False,
    )


def detections_at(name: str, batch: int) -> int:
    """How many detections eager finds on the benchmark's input: detector parity is vacuous at 0."""
    import torch

    from fxdeploy.bench import rebatch

    model, inputs = ZOO[name].factory()
    with torch.no_grad():
        return sum(len(d["scores"]) for d in model(*rebatch(inputs, batch)))


def _median(row: dict[str, Any] | None) -> float | None:
    return row["latency_ms"]["median"] if row and row["latency_ms"] else None


def _usable(row: dict[str, Any]) -> bool:
    """Ran, was timed, and matches eager: only such rows can be "best"."""
    return row["status"] == "ok" and row["latency_ms"] is not None and row.get("parity_ok") is True


def best_row(document: dict[str, Any], kind: str) -> dict[str, Any] | None:
    rows = [r for r in document["rows"] if r["kind"] == kind and _usable(r)]
    return min(rows, key=_median, default=None)


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "-"


def _parity(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return row["status"]
    error = "" if row["max_abs_error"] is None else f" ({row['max_abs_error']:.1g})"
    return {True: "ok", False: "FAIL", None: "-"}[row.get("parity_ok")] + error


def model_table(document: dict[str, Any]) -> list[str]:
    eager = _median(next(r for r in document["rows"] if r["kind"] == "eager"))
    peer = _median(best_row(document, "peer"))
    lines = []
    for row in document["rows"]:
        median = _median(row)
        lines.append(
            f"| {document['model']} | {row['name']} | {_parity(row)} | "
            f"{'-' if median is None else f'{median:.2f}'} | {_ratio(median, eager)} | {_ratio(median, peer)} |"
        )
    return lines


def round_ratios(ours: dict[str, Any], peer: dict[str, Any]) -> list[float]:
    """Per interleaved round, ours' median over the peer's: the two ran side by side in each."""
    mine, theirs = ours.get("round_medians_ms") or [], peer.get("round_medians_ms") or []
    return [a / b for a, b in zip(mine, theirs, strict=False) if b > 0]


def ratio_spread(ratios: list[float]) -> str:
    """The median and the 10th-90th percentile of the per-round ratios ("-" without them)."""
    if len(ratios) < 3:
        return "-"
    low, middle, high = np.percentile(ratios, [10, 50, 90])
    return f"{middle:.2f} ({low:.2f}-{high:.2f})"


def bars_line(document: dict[str, Any]) -> str:
    name = document["model"]
    eager = _median(next(r for r in document["rows"] if r["kind"] == "eager"))
    ours, peer = best_row(document, "fxdeploy"), best_row(document, "peer")
    if ours is None:
        return f"| {name} | {eager:.2f} | none matched eager | - | {peer['name'] if peer else '-'} | - | - | no | no |"
    vs_eager = _median(ours) / eager
    vs_peer = _median(ours) / _median(peer) if peer else None
    fast = ("yes" if vs_eager <= 0.5 else "**no**") if name in CNNS else "n/a"
    no_slower = "-" if vs_peer is None else ("yes" if vs_peer <= 1.0 else "**no**")
    spread = ratio_spread(round_ratios(ours, peer)) if peer else "-"
    return (
        f"| {name} | {eager:.2f} | {ours['name']} {_median(ours):.2f} | {vs_eager:.2f}x | "
        f"{peer['name'] + f' {_median(peer):.2f}' if peer else 'none matched eager'} | "
        f"{'-' if vs_peer is None else f'{vs_peer:.2f}x'} | {spread} | {fast} | {no_slower} |"
    )


def failure_lines(documents: list[dict[str, Any]]) -> list[str]:
    lines = []
    for document in documents:
        for row in document["rows"]:
            if row["status"] != "ok" and row["reason"]:
                lines.append(f"- {document['model']} / {row['name']}: {_one_line(row['reason'])}")
            elif row.get("parity_ok") is False:
                lines.append(f"- {document['model']} / {row['name']}: differs from eager: "
                             f"{_one_line(row['parity_detail'] or '')}")
    return lines


def _one_line(text: str, limit: int = 300) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def readme_section(documents: list[dict[str, Any]], command: str, detections: dict[str, int]) -> str:
    machine = documents[0]["machine"]
    noisy = sorted({d["model"] for d in documents for r in d["rows"] if r["cv_warning"]})
    lines = [
        HEADING, "",
        "Every zoo model (`examples/zoo.py`: transformers models built from configs, random weights) on "
        "every available target, against eager PyTorch, inductor and the peers, side by side in one run "
        f"per model. Single machine, {machine['cores']}-core CPU ({machine['cpu']}), {machine['threads']} "
        f"threads for every row, batch {documents[0]['batch']}; ratios are only meaningful within one model's "
        "rows. Every row is timed from the model's torch tensors to the model's own output structure (the ORT "
        "and ncnn peers' times include rebuilding it from their arrays; OpenVINO's torch.compile and fxdeploy "
        "return it themselves). Parity is against eager (atol 1e-4 + rtol 1e-3; detections paired by label and "
        "IoU >= 0.99, score atol 1e-4), max abs error in brackets. Regenerate with:", "",
        f"    {command}", "",
        "| model | row | parity | median ms | x eager | x best peer |",
        "|---|---|---|---:|---:|---:|",
    ]
    for document in documents:
        lines += model_table(document)
    if detections:
        lines += ["", "Detector parity covers " + ", ".join(f"{n}: {k} detections" for n, k in detections.items())
                  + " (eager, on the benchmark input)."]
    if noisy:
        lines += ["", f"Latency CV above 5% (a shared, busy machine) for {', '.join(noisy)}: compare ratios, "
                  "not absolute times; the JSON documents in benchmarks/results/zoo/ hold min, p90 and CV."]
    lines += [
        "", "Bars (docs/performance.md): the best fxdeploy target at least 2x faster than eager on the CNNs, and no "
        "slower than the best peer (fastest peer row that matches eager) on every model.", "",
        "The per-round column is the ratio taken round by round, its median and its spread (10th-90th "
        "percentile): in each interleaved round the two rows ran side by side, so it pairs calls made in "
        "the same machine state, and a spread that straddles 1.00 is a gap this machine's drift can "
        "produce or hide. The verdicts use the medians over all calls (the x best peer column).", "",
        "| model | eager ms | best fxdeploy ms | x eager | best peer ms | x best peer | per-round x peer "
        "| >= 2x vs eager | <= 1.0x peer |",
        "|---|---:|---|---:|---|---:|---:|---|---|",
        *[bars_line(d) for d in documents],
        "", "### Failures in this run (benchmark rows)", "",
        *(failure_lines(documents) or ["- none"]),
        "", "### Known failures of the zoo test suite (`make zoo`, tests/zoo/known_failures.py)", "",
        *(known_failure_lines() or ["- none"]),
    ]
    return "\n".join(lines) + "\n"


def replace_section(text: str, section: str) -> str:
    """Replace the "## Model zoo" section (up to the next "## " heading) or append it."""
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        return pattern.sub(lambda _: section + "\n", text, count=1).rstrip("\n") + "\n"
    prefix = text.rstrip("\n") + "\n\n" if text.strip() else "# Benchmarks\n\n"
    return prefix + section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS,
        help="interleaved measurement rounds (the same total time, split finer)",
    )
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite benchmarks/README.md")
    parser.add_argument("--from-json", action="store_true", help="re-report benchmarks/results/zoo/*.json")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(ZOO))
    if unknown:
        parser.error(f"unknown zoo model(s) {unknown}; known: {sorted(ZOO)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    documents = []
    for name in names:
        path = RESULTS / f"{name}.json"
        if args.from_json:
            documents.append(json.loads(path.read_text()))
            continue
        print(f"== {name}", flush=True)
        documents.append(bench_model(name, args.batch, args.threads, args.rounds))
        path.write_text(json.dumps(documents[-1], indent=2))
    options = [f"--models {args.models}"] if names != list(ZOO) else []
    options += [f"--batch {args.batch}"] if args.batch != 1 else []
    options += [f"--threads {args.threads}"] if args.threads != 2 else []
    options += [f"--rounds {args.rounds}"] if args.rounds != ROUNDS else []
    detections = {n: detections_at(n, args.batch) for n in names if ZOO[n].kind == "detector"}
    section = readme_section(documents, " ".join([".venv/bin/python benchmarks/zoo.py", *options]), detections)
    print(section)
    if not args.no_readme:
        README.write_text(replace_section(README.read_text() if README.exists() else "", section))
        print(f"wrote {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
