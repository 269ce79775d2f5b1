"""``pep demo``: the main job on the bundled data, end to end (issue 4 item 6).

The airline task of Villacampa-Calvo & Hernández-Lobato 2017 (§4.4; issue 5 item 4): the ``pipeline`` flow (under Prefect with ``--prefect``
or a configured Prefect API; its plain function otherwise, without a temporary Prefect server) ingests the bundled 2013 NYC airline data with the 3-class target (arrival more than
5 minutes early / on time / more than 5 minutes late), trains ``multiclass-sep`` (stochastic EP, one
tied factor per class) on a local cluster of two Dask worker processes, and evaluates it; the demo then
prints its held-out metrics next to logistic regression and the class-frequency baseline. The run
directory keeps the checkpoints, ``learning_curve.png`` and ``metrics.json``.

The workers are pinned to one core each (``local:N:pinned``): with both cores visible, XLA:CPU was
seen to wedge on the first step of this model here (every Eigen pool thread waiting for work, the
caller waiting for the result; reproduced in-process and on unpinned workers, see docs/results/benchmarks.md).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..pipeline.data.stores import open_store
from ..pipeline.jsonio import dumps
from ..pipeline.runs.checkpoint import checkpoint_dir
from ..pipeline.runs.config import TrainConfig
from ..pipeline.training.baselines import classification_baselines
from . import end_to_end
from .options import JsonFlag, PrefectFlag, print_summary, quiet_cluster_logs, user_errors
from .runtime import prefect_quietly, prefect_requested
from .train import training_display

MODEL = "multiclass-sep"
# M = 100 inducing points per class, 6 epochs of 10,000-row steps (27 steps each: an undamped tied-factor
# update, as the paper's minibatch runs, then a cosine-decayed Adam step on hyper-parameters and inducing
# inputs): about a minute of training.
DEMO_CONFIG = TrainConfig(model={"num_inducing": 100, "damping_decay": 1.0}, learning_rate=0.05, lr_schedule="cosine", epochs=6,
                          batch_size=10_000, block_rows=2_500, checkpoint_every=25)


def demo_command(
    out: Annotated[Path, typer.Option(help="Directory for the store and the run.")] = Path("pep-demo"),
    workers: Annotated[int, typer.Option(min=1, help="Dask worker processes.")] = 2,
    epochs: Annotated[int | None, typer.Option(min=1, help=f"Epochs (default {DEMO_CONFIG.epochs}).")] = None,
    json_output: JsonFlag = False,
    prefect: PrefectFlag = False,
) -> None:
    """Ingest the bundled airline data, train on a local 2-worker cluster, compare with baselines."""
    quiet_cluster_logs()
    pipeline = end_to_end.pipeline_run
    if prefect_requested(prefect):
        prefect_quietly()
        pipeline = end_to_end.prefect_objects("pipeline_flow")
    console = Console(stderr=True, quiet=json_output)
    started = time.perf_counter()
    store, run_dir = out / "airline-classes.zarr", out / "run"
    out.mkdir(parents=True, exist_ok=True)
    if checkpoint_dir(run_dir).exists():  # the demo's own previous run: train afresh
        shutil.rmtree(run_dir)
        console.print(f"removed the previous demo run in {run_dir}")
    console.print("ingesting the bundled airline data…" if not store.exists() else f"using {store}")
    config = DEMO_CONFIG.model_copy(update={"epochs": epochs or DEMO_CONFIG.epochs})
    with user_errors("pep demo"), training_display(enabled=not json_output):
        result = pipeline("airline", str(store), MODEL, str(run_dir), target="classes",
                               config=config.model_dump(), cluster=f"local:{workers}:pinned", resume=False)
        baselines = classification_baselines(open_store(store))
    trained = result["train"]
    rows = [{"model": f"pep {MODEL} (M={config.model['num_inducing']} per class, {workers} workers)",
             "test_error": result["evaluate"]["test_error"], "test_nll": result["evaluate"]["test_nll"],
             "seconds": trained["seconds"]}, *baselines]
    report = {"store": str(store), "run_dir": str(run_dir), "n_test": result["evaluate"]["n_test"],
              "results": rows, "steps": trained["steps"], "epochs": trained["epochs"],
              "total_seconds": round(time.perf_counter() - started, 1)}
    if json_output:
        typer.echo(dumps(report))
        return
    table = Table(title=f"airline 2013, early / on time / late by > 5 min: {report['n_test']:,} held-out flights")
    for column in ("model", "test error", "test NLL", "train seconds"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        table.add_row(row["model"], f"{row['test_error']:.4f}", f"{row['test_nll']:.4f}", f"{row['seconds']:.1f}")
    Console().print(table)
    print_summary(f"run directory {run_dir}: checkpoints/, learning_curve.png, metrics.json "
                  f"({report['total_seconds']} s in all)")
