"""Reports made from the JSON document alone: a markdown table and a PNG bar plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def markdown(document: dict[str, Any]) -> str:
    """Latency columns in ms; ratio is median over eager's median (< 1 is faster than eager)."""
    machine = document["machine"]
    eager = _eager_median(document)
    lines = [
        f"### {document['model']}, batch {document['batch']}, {machine['threads']} threads, "
        f"{machine['cpu']} ({machine['cores']} cores)",
        "",
        "| row | median ms | p90 | p99 | ratio to eager | max err | lower s | status |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in document["rows"]:
        latency = row["latency_ms"] or {}
        ratio = latency["median"] / eager if latency and eager else None
        lines.append(
            f"| {row['name']} | {_num(latency.get('median'))} | {_num(latency.get('p90'))} | "
            f"{_num(latency.get('p99'))} | {_num(ratio, 'x')} | {_err(row['max_abs_error'])} | "
            f"{_num(row['lower_s'], digits=2)} | {_status(row)} |"
        )
    notes = [f"- {row['name']}: {_one_line(row['reason'])}" for row in document["rows"] if row["reason"]]
    notes += [f"- {row['name']}: differs from eager: {_one_line(row['parity_detail'])}"
              for row in document["rows"] if row.get("parity_detail")]
    notes += [f"- {row['name']}: CV {100 * row['latency_ms']['cv']:.1f}% > 5%, noisy"
              for row in document["rows"] if row["cv_warning"]]
    return "\n".join(lines + ([""] + notes if notes else []))


def plot(document: dict[str, Any], path: str | Path) -> Path:
    """Median latency per row that ran, with a whisker up to p90."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [row for row in document["rows"] if row["latency_ms"]]
    names = [row["name"] for row in ran]
    medians = [row["latency_ms"]["median"] for row in ran]
    upper = [row["latency_ms"]["p90"] - row["latency_ms"]["median"] for row in ran]
    colors = {"eager": "#888888", "inductor": "#5b8bd0", "peer": "#e0a040", "fxdeploy": "#3a9a5b"}
    figure, axes = plt.subplots(figsize=(max(6.0, 0.9 * len(ran) + 2), 4.5))
    axes.bar(range(len(ran)), medians, yerr=[[0] * len(ran), upper], capsize=4,
             color=[colors.get(row["kind"], "#999999") for row in ran])
    axes.set_xticks(range(len(ran)), names, rotation=30, ha="right", fontsize=8)
    axes.set_ylabel("latency ms (median, whisker to p90)")
    machine = document["machine"]
    axes.set_title(f"{document['model']}, batch {document['batch']}, {machine['threads']} threads", fontsize=10)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)
    return path


def _one_line(text: str, limit: int = 240) -> str:
    """Runtime errors span pages; the table's notes keep the gist, the JSON keeps the rest."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _eager_median(document: dict[str, Any]) -> float | None:
    for row in document["rows"]:
        if row["kind"] == "eager" and row["latency_ms"]:
            return row["latency_ms"]["median"]
    return None


def _status(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return row["status"]
    return "ok" if row.get("parity_ok") is not False else "ok, parity FAIL"


def _num(value: float | None, suffix: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}{suffix}" if value < 1000 else f"{value:.0f}{suffix}"


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"
