"""The Prefect flow ``evaluate`` and the ``pep evaluate`` command: held-out metrics of a run's newest
checkpoint, on the store it was trained on or another one with the same features."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from rich.console import Console

from .reports import publish_evaluation, write_metrics
from .train import TlsCaFile, TlsCert, TlsKey, is_transient, prefect_quietly, use_cluster, user_errors
from ..pipeline.jsonio import dumps
from ..pipeline.training.lock import hold_run_dir
from ..pipeline.training.runs import evaluate, load_run
from ..pipeline.engine import CLUSTER_HELP, connect


@task(name="evaluate", retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=is_transient,
      cache_policy=NO_CACHE)
def evaluate_task(run_dir: str, data: str | None, cluster: str) -> dict[str, Any]:
    backend = connect(cluster)
    try:
        return evaluate(Path(run_dir), data, backend)
    finally:
        backend.close()


@flow(name="pep-evaluate")
def evaluate_flow(run_dir: str, data: str | None = None, cluster: str = "none") -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` on the test split of ``data`` (default:
    the training store); written to ``run_dir/metrics.json`` (holding the run directory's lock: not while
    a training writes it) and published as ``evaluate-<run>``."""
    with hold_run_dir(Path(run_dir), "pep evaluate", create=False):
        metrics = {"run_dir": run_dir, **evaluate_task(run_dir, data, cluster)}
        write_metrics(Path(run_dir), metrics)
    publish_evaluation(metrics, run_dir)
    return metrics


def evaluate_command(
    run_dir: Annotated[Path, typer.Option(help="A run directory written by `pep train`.")],
    data: Annotated[str | None, typer.Option(help="Store to evaluate on: a path or fsspec URL (default: "
                                                  "the training store, if the run names a local path).")] = None,
    cluster: Annotated[str, typer.Option(help=CLUSTER_HELP + ".")] = "none",
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    tls_ca_file: TlsCaFile = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
) -> None:
    """Held-out metrics (test error / RMSE, NLL) of a trained run's newest checkpoint."""
    prefect_quietly()
    with user_errors("pep evaluate"):
        use_cluster(cluster, tls_ca_file, tls_cert, tls_key)
        load_run(run_dir)  # fail fast, before Prefect starts its server
        metrics = evaluate_flow(str(run_dir), None if data is None else str(data), cluster)
    if json_output:
        typer.echo(dumps(metrics))
    else:
        Console().print("\n".join(f"{key:>12}  {value}" for key, value in metrics.items()), markup=False)
    broken = [name for name in ("test_error", "test_nll", "rmse") if not math.isfinite(metrics.get(name, 0.0))]
    if broken:  # reported above (null in JSON); a model that predicts nothing finite is no success
        typer.echo(f"pep evaluate: error: non-finite {', '.join(broken)} at step {metrics['step']} of "
                   f"{run_dir}: the model does not fit this data", err=True)
        raise typer.Exit(1)
