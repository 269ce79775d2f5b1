"""What a training or evaluation run leaves behind: files in the run directory and Prefect artifacts.

Files (written atomically, so a reader never sees half a file): ``learning_curve.png`` (energy per
row and held-out metrics per epoch), ``reliability.png`` (a classifier's reliability diagram, written by
``pep evaluate``) and ``metrics.json`` (the training record, strict JSON: a non-finite number is
``null``, :mod:`pep_gp.pipeline.jsonio`; ``pep evaluate`` of the training data refreshes its held-out
metrics and keeps its other fields). An evaluation of other data is its own record, never over the
training record: ``evaluations/<data name>-<checksum>.json`` and its ``.png`` diagram
(:func:`evaluation_record`). Artifacts (published when the flow
runs under Prefect) carry keys derived from the run directory's name, so every run keeps a version history
in the Prefect UI: ``train-<run>`` (markdown summary with the plot), ``train-<run>-epochs`` (table of the
per-epoch records) and ``evaluate-<run>`` (table of metrics).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the non-interactive backend)

from ..pipeline.jsonio import dumps, finite_or_none  # noqa: E402

PLOT = "learning_curve.png"
RELIABILITY = "reliability.png"
METRICS = "metrics.json"
EVALUATIONS = "evaluations"
METRIC_NAMES = ("test_error", "rmse", "test_nll")


def artifact_key(kind: str, run_dir: str | Path) -> str:
    """``<kind>-<run directory name>`` in lower case with dashes (Prefect's key alphabet)."""
    return f"{kind}-" + (re.sub(r"[^a-z0-9]+", "-", Path(run_dir).resolve().name.lower()).strip("-") or "run")


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def write_metrics(run_dir: Path, summary: Mapping[str, Any]) -> Path:
    """``run_dir/metrics.json``."""
    path = Path(run_dir) / METRICS
    _write_atomically(path, dumps(dict(summary), indent=2).encode())
    return path


def evaluation_record(run_dir: Path, metrics: Mapping[str, Any]) -> Path:
    """Where ``pep evaluate`` records ``metrics``: ``run_dir/metrics.json`` when it scored the data the run
    trained on (``training_data``), else ``run_dir/evaluations/<name>-<checksum>.json``, named by the scored
    data's file name and the first 16 hex digits of its checksum (``scored_data``, ``scored_checksum``);
    ``evaluations/`` is made when needed."""
    if metrics["training_data"]:
        return Path(run_dir) / METRICS
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", PurePosixPath(str(metrics["scored_data"]).rstrip("/")).name) or "data"
    digest = str(metrics["scored_checksum"]).removeprefix("sha256:")[:16]
    (Path(run_dir) / EVALUATIONS).mkdir(exist_ok=True)
    return Path(run_dir) / EVALUATIONS / f"{name}-{digest}.json"


def write_evaluation(path: Path, metrics: Mapping[str, Any]) -> Path:
    """``metrics`` at ``path`` (:func:`evaluation_record`); at ``metrics.json`` over the training record's
    fields, which it keeps (a record that is not a JSON object is replaced)."""
    kept: Any = {}
    if path.name == METRICS and path.exists():
        try:
            kept = json.loads(path.read_text())
        except ValueError:
            kept = {}
    _write_atomically(path, dumps({**(kept if isinstance(kept, dict) else {}), **metrics}, indent=2).encode())
    return path


def plot_learning_curve(run_dir: Path, history: Sequence[Mapping[str, Any]]) -> Path | None:
    """``run_dir/learning_curve.png`` from the per-epoch records; None when there are none."""
    if not history:
        return None
    epochs = [r["epoch"] for r in history]
    metrics = [name for name in METRIC_NAMES if name in history[0]]
    figure, axes = plt.subplots(1, 1 + len(metrics), figsize=(4 * (1 + len(metrics)), 3.2))
    axes[0].plot(epochs, [r["energy_per_row"] for r in history], marker="o")
    axes[0].set(title="energy per training row (↑)", xlabel="epoch")
    for axis, name in zip(axes[1:], metrics):
        axis.plot(epochs, [r[name] for r in history], marker="o", color="tab:orange")
        axis.set(title=f"held-out {name} (↓)", xlabel="epoch")
    figure.tight_layout()
    return _save_figure(figure, Path(run_dir) / PLOT)


def plot_reliability(path: Path, metrics: Mapping[str, Any]) -> Path:
    """``path`` (a run's ``reliability.png``, or beside an evaluation's record): accuracy against mean top-class probability per bin of ``metrics``'
    ``reliability`` (:func:`~pep_gp.pipeline.metrics.finish`), the diagonal for perfect calibration, and
    the rows per bin below."""
    bins = metrics["reliability"]
    count = np.asarray(bins["count"])
    edges = np.linspace(0.0, 1.0, len(count) + 1)
    centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
    accuracy = np.asarray(bins["accuracy"], dtype=float)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(4.5, 5.5), sharex=True, height_ratios=(3, 1))
    top.bar(centres, np.nan_to_num(accuracy), width=width, edgecolor="black", label="accuracy")
    top.plot(bins["confidence"], accuracy, "o", color="tab:orange", label="(mean confidence, accuracy) per bin")
    top.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    top.set(ylabel="accuracy", xlim=(0, 1), ylim=(0, 1),
            title=f"ECE {metrics['ece']:.4f}, Brier {metrics['brier']:.4f} ({metrics['n_test']} rows)")
    top.legend(loc="upper left", fontsize="small")
    bottom.bar(centres, count, width=width, edgecolor="black", color="tab:gray")
    bottom.set(xlabel=f"top-class probability ({len(count)} equal-width bins)", ylabel="rows")
    figure.tight_layout()
    return _save_figure(figure, Path(path))


def _save_figure(figure, path: Path) -> Path:
    temporary = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(temporary, dpi=100)
    plt.close(figure)
    os.replace(temporary, path)
    return path


def _table(rows: Mapping[str, Any]) -> str:
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in rows.items())


def publish_training(summary: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
                     plot: Path | None) -> None:
    """The ``train-<run>`` markdown (summary and plot) and ``train-<run>-epochs`` table artifacts."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact  # inside a Prefect run only

    run_dir = summary["run_dir"]
    markdown = f"### pep train {summary['model']} → `{run_dir}`\n\n{_table(summary)}\n"
    if plot is not None:
        encoded = base64.b64encode(plot.read_bytes()).decode()
        markdown += f"\n![learning curve](data:image/png;base64,{encoded})\n\n(`{plot}`)\n"
    create_markdown_artifact(key=artifact_key("train", run_dir), markdown=markdown,
                             description=f"pep train {summary['model']} on {summary['data']}")
    if history:
        create_table_artifact(key=artifact_key("train", run_dir) + "-epochs", table=finite_or_none(list(history)),
                              description="per-epoch energy and held-out metrics")


def publish_evaluation(metrics: Mapping[str, Any], run_dir: str | Path) -> None:
    """The ``evaluate-<run>`` table artifact."""
    from prefect.artifacts import create_table_artifact  # inside a Prefect run only

    scalars = {key: value for key, value in metrics.items() if not isinstance(value, Mapping)}  # not the bins
    create_table_artifact(key=artifact_key("evaluate", run_dir), table=[finite_or_none(scalars)],
                          description=f"held-out metrics of {run_dir}")
