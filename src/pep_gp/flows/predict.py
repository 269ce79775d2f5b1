"""The flow ``pep-predict`` and the ``pep predict`` command: a trained run's predictions for the rows of a
CSV or Parquet table (or a store), streamed chunk by chunk through the same ``--cluster`` backends as
``pep train`` into a ``.csv``, ``.parquet`` or ``.zarr`` file (:func:`pep_gp.pipeline.runs.predict.predict`).

As the Prefect flow ``predict_flow`` (:mod:`pep_gp.flows.runtime`) the prediction is a ``predict``
task, retried on transient errors (the output is written atomically, so a retry starts clean), and the
flow publishes the summary as the markdown artifact ``predict-<run>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from .options import (ClusterOption, JsonFlag, PrefectFlag, QuietFlag, RunDirOption,
                      TlsCaFile, TlsCert, TlsKey, print_summary, use_cluster, user_errors)
from ..pipeline.data.predictions import SPLIT_CHOICES, output_kind
from ..pipeline.errors import InputError
from ..pipeline.jsonio import dumps
from .reports import artifact_key
from .runtime import in_prefect_run, lazy_prefect, prefect_flow, prefect_quietly, prefect_requested, prefect_task
from .train import is_transient

progress_reporter: ContextVar[Callable[[int], None]] = ContextVar("predict_progress", default=lambda rows: None)
"""Where the running flow reports the rows predicted so far; the command line sets it to its display."""


def predict_on(run_dir: str, input: str, out: str, sep: str | None, intervals: list[float] | None, split: str,
               cluster: str, overwrite: bool, latent: bool = False, quantiles: list[float] | None = None,
               samples: int = 0, seed: int = 0, na: str | None = None) -> dict[str, Any]:
    """The prediction checked (:func:`~pep_gp.pipeline.runs.predict.prepared`: the run, the outputs, the input),
    then written on the backend of ``cluster``, which starts only once those checks passed; the summary as a dict."""
    from ..pipeline.engine import connect
    from ..pipeline.runs.predict import prepared

    job = prepared(run_dir, input, sep=sep, intervals=intervals or (), split=split, latent=latent,
                   quantiles=quantiles or (), samples=samples, seed=seed, na=na)
    backend = connect(cluster)
    try:
        return asdict(job.write(out, overwrite=overwrite, backend=backend, progress=progress_reporter.get()))
    finally:
        backend.close()


def predict_run(run_dir: str, input: str, out: str, sep: str | None = None, intervals: list[float] | None = None,
                split: str = "all", cluster: str = "none", overwrite: bool = False, latent: bool = False,
                quantiles: list[float] | None = None, samples: int = 0, seed: int = 0,
                na: str | None = None) -> dict[str, Any]:
    """Predict every row of ``input`` with the newest checkpoint of ``run_dir`` into ``out``.

    Args:
        run_dir: a run directory written by ``pep train``.
        input: a CSV or Parquet file with the run's feature and id columns (matched by name; no target
            needed), or a pep store of the same features.
        out: the output file: ``.csv``, ``.parquet`` or ``.zarr``.
        sep: the CSV input's field separator (default ``,``).
        intervals: regression: levels of the central predictive intervals to add (e.g. ``[0.9]``).
        split: a store input's rows: ``all`` (train then test), ``train`` or ``test``.
        cluster: ``none``, ``local:N`` or ``tcp://HOST:PORT`` (as ``pep train``).
        overwrite: replace an existing output.
        latent: add the latent function's mean and variance (``f_mean``, ``f_var``).
        quantiles: regression: levels of the predictive quantiles to add (``q_<p>``).
        samples: draws of ``y`` per row to add (``sample_<i>``), from ``seed``.
        seed: the draws' seed.
        na: a row with a missing value: ``fail``, ``drop`` or ``mean`` (the training mean); None: ``mean``
            for data ingested with ``--na mean``, else ``fail``.

    Returns:
        The summary (:class:`pep_gp.pipeline.runs.predict.PredictSummary`) as a dict.
    """
    compute = prefect_objects("predict_task") if in_prefect_run() else predict_on
    summary = compute(run_dir, input, out, sep, intervals, split, cluster, overwrite, latent, quantiles, samples, seed,
                      na)
    if in_prefect_run():
        from prefect.artifacts import create_markdown_artifact

        rows = "\n".join(f"| {key} | {value} |" for key, value in summary.items())
        create_markdown_artifact(key=artifact_key("predict", run_dir), markdown=f"| | |\n|---|---|\n{rows}",
                                 description=f"pep predict {input} → {out}")
    return summary


def _prefect() -> dict[str, Any]:
    """The flow ``pep-predict`` over :func:`predict_run`, and its task."""
    return {"predict_flow": prefect_flow(predict_run, "pep-predict"),
            "predict_task": prefect_task(predict_on, "predict", is_transient)}


prefect_objects = lazy_prefect(__name__, ("predict_flow", "predict_task"), _prefect)
__getattr__ = prefect_objects


def predict_command(
    run_dir: RunDirOption,
    input: Annotated[Path, typer.Option(
        "--input", help="The rows to predict: a .csv or .parquet file with the run's feature columns (matched "
                        "by name; no target needed) and its --id columns, or a pep store.")],
    out: Annotated[Path, typer.Option(help="Output file: .csv, .parquet or .zarr.")],
    sep: Annotated[str | None, typer.Option(help="The CSV input's field separator (default ',').")] = None,
    interval: Annotated[list[float] | None, typer.Option(
        help="Regression: add lower_P and upper_P, the central predictive interval of level P (the predictive's own quantiles) (repeat "
             "for several, e.g. --interval 0.9).")] = None,
    latent: Annotated[bool, typer.Option(
        "--latent", help="Add the latent function's posterior mean and variance: f_mean and f_var (a multi-class "
                         "run: f_mean_LABEL and f_var_LABEL per class; a regressor: in the target's units).")] = False,
    quantiles: Annotated[str | None, typer.Option(
        help="Regression: add q_P, the predictive quantile of level P, for each of the comma-separated levels "
             "(e.g. 0.05,0.5,0.95); a deep GP's are those of its mixture predictive, not Gaussian.")] = None,
    samples: Annotated[int, typer.Option(
        help="Add sample_0 … sample_{N-1}: N draws of y per row from its predictive (labels, or values), "
             "independent across rows.")] = 0,
    seed: Annotated[int, typer.Option(help="The seed of --samples (row r's draws depend on the seed and r "
                                           "only).")] = 0,
    split: Annotated[str, typer.Option(help=f"A store's rows to predict: {', '.join(SPLIT_CHOICES)}.")] = "all",
    na: Annotated[str | None, typer.Option(
        help="A row with a missing value: fail (refuse it), drop (leave it out of the output) or mean (fill in "
             "the training mean of the feature). Default: mean if the data were ingested with --na mean, else "
             "fail.")] = None,
    cluster: ClusterOption = "none",
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output (atomically). Without it an "
                                                 "output that exists, or that another run writes first, is "
                                                 "refused.")] = False,
    json_output: JsonFlag = False,
    quiet: QuietFlag = False,
    tls_ca_file: TlsCaFile = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    prefect: PrefectFlag = False,
) -> None:
    """Predict the rows of a table with a trained run (labels and probabilities, or mean, std, intervals)."""
    with user_errors("pep predict"):
        output_kind(out, overwrite)
        use_cluster(cluster, tls_ca_file, tls_cert, tls_key)
        levels = parse_levels(quantiles)
        run = predict_run
        if prefect_requested(prefect):
            prefect_quietly()
            run = prefect_objects("predict_flow")
        with _progress_display(enabled=not (quiet or json_output)):
            summary = run(str(run_dir), str(input), str(out), sep, interval, split, cluster, overwrite, latent,
                          list(levels), samples, seed, na)
    from ..pipeline.runs.predict import unseen_warning

    warning = unseen_warning(summary["unseen"])
    if warning:
        typer.echo(f"pep predict: warning: {warning}", err=True)
    if summary["dropped"]:
        typer.echo(f"pep predict: warning: {summary['dropped']:,} rows with a missing value left out (--na drop)",
                   err=True)
    if json_output:
        typer.echo(dumps(summary))
    elif not quiet:
        print_summary(f"predicted {summary['rows']:,} rows of {summary['input']} into {summary['out']} "
                      f"({', '.join(summary['columns'])}) in {summary['seconds']:.1f} s")


def parse_levels(text: str | None) -> tuple[float, ...]:
    """``--quantiles 0.05,0.5,0.95`` as numbers (checked later against the run).

    Raises:
        InputError: a part that is not a number.
    """
    if text is None:
        return ()
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"--quantiles: expected comma-separated levels such as 0.05,0.5,0.95, found {text!r}") from None


@contextmanager
def _progress_display(enabled: bool) -> Iterator[None]:
    """Rows predicted so far, on stderr, while the flow runs (when ``enabled`` and stderr is a terminal)."""
    console = Console(stderr=True)
    if not (enabled and console.is_terminal):
        yield
        return
    columns = (SpinnerColumn(), TextColumn("rows predicted"), TextColumn("{task.completed:,.0f}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as display:
        bar = display.add_task("predict")
        token = progress_reporter.set(lambda rows: display.update(bar, completed=rows))
        try:
            yield
        finally:
            progress_reporter.reset(token)
