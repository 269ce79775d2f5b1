"""The flow ``pep-evaluate`` and the ``pep evaluate`` command: held-out metrics of a run's newest
checkpoint, on the store it was trained on, another one with the same features (matched by name), or a
labelled CSV or Parquet table read with the run's transformation (``--input … --target COLUMN``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from .options import (ClusterOption, JsonFlag, PrefectFlag, RunDirOption, TlsCaFile,
                      TlsCert, TlsKey, print_summary, use_cluster, user_errors)
from ..pipeline.errors import InputError
from ..pipeline.jsonio import dumps
from ..pipeline.runs.lock import hold_run_dir
from .reports import RELIABILITY, evaluation_record, plot_reliability, publish_evaluation, write_evaluation
from .runtime import in_prefect_run, lazy_prefect, prefect_flow, prefect_quietly, prefect_requested, prefect_task
from .train import is_transient


def evaluate_metrics(run_dir: str, data: str | None, cluster: str, table: str | None = None,
                     target: str | None = None, sep: str | None = None) -> dict[str, Any]:
    """The held-out metrics of :func:`~pep_gp.pipeline.runs.run.evaluate` (or with ``table``,
    :func:`~pep_gp.pipeline.runs.run.evaluate_table`) of the run, opened and checked (:meth:`Run.open`) before the
    backend of ``cluster`` starts."""
    from ..pipeline.engine import connect
    from ..pipeline.runs.run import Run, evaluate, evaluate_table

    run = Run.open(Path(run_dir))
    backend = connect(cluster)
    try:
        if table is not None:
            return evaluate_table(run, table, target, sep, backend)
        return evaluate(run, data, backend)
    finally:
        backend.close()


def evaluate_run(run_dir: str, data: str | None = None, cluster: str = "none", table: str | None = None,
                 target: str | None = None, sep: str | None = None) -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` on the test split of ``data`` (default:
    the training store), or on the labelled ``table`` (its ``target`` column, default the run's); recorded
    where :func:`~pep_gp.flows.reports.evaluation_record` says (the training data's in ``metrics.json``,
    keeping the training record's fields; other data's in ``evaluations/<name>-<checksum>.json``, never
    over the training record), with a classifier's reliability diagram (``reliability.png``, or beside the
    record), holding the run directory's lock (not while a training writes them); under Prefect published
    as ``evaluate-<run>``."""
    compute = prefect_objects("evaluate_task") if in_prefect_run() else evaluate_metrics
    with hold_run_dir(Path(run_dir), "pep evaluate", create=False):
        metrics = {"run_dir": run_dir, **compute(run_dir, data, cluster, table, target, sep)}
        record = evaluation_record(Path(run_dir), metrics)
        metrics["record"] = str(record)
        if "reliability" in metrics:
            plot = Path(run_dir) / RELIABILITY if metrics["training_data"] else record.with_suffix(".png")
            metrics["reliability_plot"] = str(plot_reliability(plot, metrics))
        write_evaluation(record, metrics)
    if in_prefect_run():
        publish_evaluation(metrics, run_dir)
    return metrics


def _prefect() -> dict[str, Any]:
    """The flow ``pep-evaluate`` over :func:`evaluate_run`, and its task."""
    return {"evaluate_flow": prefect_flow(evaluate_run, "pep-evaluate"),
            "evaluate_task": prefect_task(evaluate_metrics, "evaluate", is_transient)}


prefect_objects = lazy_prefect(__name__, ("evaluate_flow", "evaluate_task"), _prefect)
__getattr__ = prefect_objects


def evaluate_command(
    run_dir: RunDirOption,
    data: Annotated[str | None, typer.Option(help="Store to evaluate on: a path or fsspec URL (default: "
                                                  "the training store, if the run names a local path); its "
                                                  "features are matched to the run's by name. Other data than "
                                                  "the run's is recorded in evaluations/<name>-<checksum>.json, "
                                                  "not metrics.json.")] = None,
    table: Annotated[Path | None, typer.Option(
        "--input", help="A labelled CSV or Parquet table to evaluate on instead of a store: read with the run's "
                        "transformation, its columns checked as `pep predict --input` checks them.")] = None,
    target: Annotated[str | None, typer.Option(
        help="With --input: the column of labels or targets (default: the run's target column).")] = None,
    sep: Annotated[str | None, typer.Option(help="With --input: the CSV field separator (default ',').")] = None,
    cluster: ClusterOption = "none",
    json_output: JsonFlag = False,
    tls_ca_file: TlsCaFile = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    prefect: PrefectFlag = False,
) -> None:
    """Held-out metrics and calibration of a trained run's newest checkpoint.

    Test error / RMSE and NLL, with the Brier score, the expected calibration error and a reliability diagram
    (classifiers) or the CRPS and the coverage of central intervals (regressors)."""
    with user_errors("pep evaluate"):
        if table is not None and data is not None:
            raise InputError("--input/--data: expected one of them (a labelled table, or a store)")
        if table is None and (target is not None or sep is not None):
            raise InputError(f"{'--target' if target is not None else '--sep'}: reads a table: pass --input too")
        use_cluster(cluster, tls_ca_file, tls_cert, tls_key)
        run = evaluate_run
        if prefect_requested(prefect):
            prefect_quietly()
            run = prefect_objects("evaluate_flow")
        metrics = run(str(run_dir), None if data is None else str(data), cluster,
                      None if table is None else str(table), target, sep)
    if json_output:
        typer.echo(dumps(metrics))
    else:
        shown = {key: value for key, value in metrics.items() if not isinstance(value, dict)}  # bins: JSON, PNG
        print_summary("\n".join(f"{key:>16}  {value}" for key, value in shown.items()))
        if metrics.get("unseen"):
            from ..pipeline.runs.predict import unseen_warning

            typer.echo(f"pep evaluate: warning: {unseen_warning(metrics['unseen'])}", err=True)
    broken = [name for name in ("test_error", "test_nll", "rmse") if not math.isfinite(metrics.get(name, 0.0))]
    if broken:  # reported above (null in JSON); a model that predicts nothing finite is no success
        typer.echo(f"pep evaluate: error: non-finite {', '.join(broken)} at step {metrics['step']} of "
                   f"{run_dir}: the model does not fit this data", err=True)
        raise typer.Exit(1)
