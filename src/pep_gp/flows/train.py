"""The flow ``pep-train`` and the ``pep train`` command that runs it.

:func:`train_run` opens the store, connects the Dask backend (in-process, a ``LocalCluster`` it starts,
or an existing scheduler) and runs training in segments of ``segment_epochs`` epochs each; the per-chunk
work inside a segment is Dask's. As the Prefect flow ``train_flow`` (:mod:`pep_gp.flows.runtime`) each
segment is a ``train-segment`` task that starts from the newest checkpoint when retried (transient
errors only: I/O, lost workers), so it ends with the same parameters as an uninterrupted run. At the end
the run writes ``learning_curve.png`` and ``metrics.json`` into the run directory (and under Prefect
publishes them as artifacts).

The command checks its options before anything heavy loads: the store and the config first, then the
model (which imports JAX), and only then does a cluster start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer

from .options import (ClusterOption, JsonFlag, PrefectFlag, QuietFlag, TlsCaFile,
                      TlsCert, TlsKey, print_summary, use_cluster, user_errors)
from .reports import plot_learning_curve, publish_training, write_metrics
from .runtime import (in_prefect_run, lazy_prefect, prefect_flow, prefect_quietly, prefect_requested, prefect_task,
                      task_retried)
from ..pipeline.data.stores import open_store
from ..pipeline.errors import InputError
from ..pipeline.jsonio import dumps
from ..pipeline.runs.config import TrainConfig, load_config, parse_settings
from ..pipeline.runs.lock import hold_run_dir
from ..pipeline.training.callbacks import Callback, callback_progress
from ..pipeline.training.display import both, progress_display
from ..pipeline.training.tracking import LOG_TO_HELP, loggers


progress_reporter: ContextVar[Callable[..., None]] = ContextVar("train_progress", default=lambda event, **info: None)
"""Where the running flow reports training progress; the command line sets it to its display."""


def is_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition: I/O errors and lost Dask workers; never bad input or a bug."""
    from distributed import KilledWorker

    error = state.result(raise_on_failure=False)
    return isinstance(error, (OSError, TimeoutError, KilledWorker)) and not isinstance(error, InputError)


def train_segment(trainer: Any, resume: bool, segment_steps: int, progress: Callable[..., None]) -> Any:
    """Train to the next segment boundary: the first segment from the start (or the newest checkpoint
    when ``resume``), later ones from where the last stopped; a retried task resumes from the newest
    checkpoint."""
    return trainer.run(resume=resume or task_retried(), segment_steps=segment_steps, progress=progress)


def summarise(job: Any, cluster: str, result: Any) -> dict[str, Any]:
    """The flow's result and ``pep train --json`` object."""
    last = result.history[-1] if result.history else {}
    return {"model": job.model, "data": job.store.path, "run_dir": str(job.run_dir), "cluster": cluster,
            **result.metrics, "energy": last.get("energy"), "steps": result.steps,
            "epochs": result.epochs, "converged": result.reported_converged, "collapse": result.collapse,
            "seconds": round(result.seconds, 3),
            "rejected_steps": result.rejected_steps, "rejected_site_updates": result.rejected_site_updates,
            "notes": list(result.notes), "checkpoint": str(result.checkpoint)}


def train_run(model: str, data: str, run_dir: str, config: dict[str, Any] | None = None,
              cluster: str = "none", resume: bool = False, segment_epochs: int = 1,
              new_rows_only: bool = False) -> dict[str, Any]:
    """Train ``model`` on the store ``data`` into ``run_dir``.

    Args:
        model: a registered model name (``pep_gp.pipeline.models.MODELS``).
        data: path of the store.
        run_dir: run directory (checkpoints, plot, metrics).
        config: :class:`~pep_gp.pipeline.runs.config.TrainConfig` fields; defaults for the rest.
        cluster: ``none``, ``local:N`` or ``tcp://HOST:PORT``.
        resume: continue from the newest checkpoint of ``run_dir`` (also one trained on an earlier version
            of a store grown by ``pep ingest --append``: :mod:`pep_gp.pipeline.runs.growth`).
        segment_epochs: epochs per ``train-segment`` task, and at least ``checkpoint_every`` steps (on a
            store smaller than a batch every step is an epoch: a segment per step wrote a checkpoint per step).
        new_rows_only: resumed on a grown store, take the epochs over the rows added since the checkpoint only.

    Returns:
        The summary (see :func:`summarise`).
    """
    from ..pipeline.engine import connect
    from ..pipeline.training.trainer import Trainer, TrainJob

    job = TrainJob(model, open_store(data), TrainConfig(**(config or {})), Path(run_dir), new_rows_only)
    reporter, log = progress_reporter.get(), run_logger()
    segment_fn = prefect_objects("train_segment_task") if in_prefect_run() else train_segment

    def progress(event: str, **info: Any) -> None:
        if event == "start" and info["resumed_from"]:
            log.info("resumed from %s at step %d of %d", info["resumed_from"], info["step"], info["total_steps"])
        if event == "epoch":
            log.info("epoch %(epoch)d: energy %(energy).6g, %(held_out)s", {
                **info["record"], "held_out": {k: v for k, v in info["record"].items() if k.startswith(("test", "rmse"))}})
        reporter(event, **info)

    backend = connect(cluster)
    try:
        trainer = Trainer(job, backend)
        with hold_run_dir(job.run_dir):  # one writer from the first segment to the plot
            segment = max(trainer.schedule.steps_per_epoch * segment_epochs, job.config.checkpoint_every)
            result = segment_fn(trainer, resume, segment, progress)
            while not result.finished:
                result = segment_fn(trainer, False, segment, progress)
            summary = summarise(job, cluster, result)
            write_metrics(job.run_dir, summary)
            plot = plot_learning_curve(job.run_dir, result.history)
    finally:
        backend.close()
    if in_prefect_run():
        publish_training(summary, result.history, plot)
    return summary


def run_logger() -> logging.Logger | Any:
    """The flow run's logger under Prefect, else this module's."""
    if in_prefect_run():
        from prefect.logging import get_run_logger

        return get_run_logger()
    return logging.getLogger(__name__)


def _prefect() -> dict[str, Any]:
    """The flow ``pep-train`` over :func:`train_run`, and its segment task."""
    return {"train_flow": prefect_flow(train_run, "pep-train"),
            "train_segment_task": prefect_task(train_segment, "train-segment", is_transient)}


prefect_objects = lazy_prefect(__name__, ("train_flow", "train_segment_task"), _prefect)
__getattr__ = prefect_objects


# --------------------------------------------------------------------------------------------------
def train_command(
    model: Annotated[str, typer.Option(help="A registered model, e.g. sparse-gp-classifier, multiclass-sep or "
                                            "sparse-gp-regressor (an unknown name lists them all).")],
    data: Annotated[Path, typer.Option(help="The store to train on (made by `pep ingest`).")],
    run_dir: Annotated[Path, typer.Option(help="Directory for checkpoints, plot and metrics.")],
    config: Annotated[Path | None, typer.Option(help="TOML file of training settings "
                                                     "(see pipeline/training/config.py).")] = None,
    cluster: ClusterOption = "none",
    epochs: Annotated[int | None, typer.Option(help="Run this many epochs (default: until converged or "
                                                    "--max-steps).")] = None,
    max_steps: Annotated[int | None, typer.Option(help="The most steps (default 2000 without --epochs; deep GPs 1000).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per step (default 10000).")] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Adam's step size (default 0.05; deep GPs 0.01).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the initialisation and minibatch order.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="A config setting KEY=VALUE, e.g. model.alpha=0.5 "
                                                              "(repeatable; validated like the config file).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest complete checkpoint of "
                                              "--run-dir (its config unless --config is given); on a store "
                                              "grown by `pep ingest --append` since, over the old and new rows, "
                                              "--epochs/--max-steps counted from there.")] = False,
    new_rows_only: Annotated[bool, typer.Option(
        help="With --resume on a grown store: take the epochs over the rows added since the checkpoint only "
             "(their energy scaled to all rows).")] = False,
    log_to: Annotated[list[str] | None, typer.Option("--log-to", help=LOG_TO_HELP)] = None,
    json_output: JsonFlag = False,
    quiet: QuietFlag = False,
    tls_ca_file: TlsCaFile = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    prefect: PrefectFlag = False,
    allow_degenerate: Annotated[bool, typer.Option(help="Exit 0 when the fit collapsed far below its best energy "
                                                        "(it then ends at its best parameters; without this "
                                                        "option such a run exits 1).")] = False,
) -> None:
    """Train a model on a store, with checkpoints; resumable with --resume."""
    with user_errors("pep train"):
        if new_rows_only and not resume:
            raise InputError("--new-rows-only: continues a run on a grown store; pass --resume too")
        store = open_store(data)
        overrides = {"epochs": epochs, "max_steps": max_steps, "batch_size": batch_size,
                     "learning_rate": learning_rate, "seed": seed}
        sets = parse_settings(set_ or [])
        settings = load_config(config, None, sets, **overrides) if config or not resume else None
        trackers = loggers(log_to)
        use_cluster(cluster, tls_ca_file, tls_cert, tls_key)
        from ..pipeline.models import get_model, model_settings  # JAX: after the cheap checks
        from ..pipeline.runs.run import resumed_config

        spec = get_model(model)
        if settings is None:  # resuming with the run's own config
            settings = load_config(None, resumed_config(run_dir), sets, **overrides)
        settings = settings.with_defaults(spec.train_defaults)
        model_settings(spec, settings.model, str(config or "defaults"))
        run = train_run
        if prefect_requested(prefect):
            prefect_quietly()
            run = prefect_objects("train_flow")
        with training_display(enabled=not (quiet or json_output), callbacks=trackers) as tell:
            summary = run(model, store.path, str(run_dir), settings.model_dump(), cluster, resume,
                          new_rows_only=new_rows_only)
            tell("end", summary=summary)
    if json_output:
        typer.echo(dumps(summary))
    elif not quiet:
        shown = {k: v for k, v in summary.items() if v is not None and k != "notes"}
        print_summary("\n".join(f"{key:>15}  {value}" for key, value in shown.items()))
    if summary["collapse"]:
        typer.echo(f"pep train: {'warning' if allow_degenerate else 'error'}: the fit collapsed: {summary['collapse']} "
                   "(written to --run-dir); try another --seed or a lower --learning-rate"
                   + ("" if allow_degenerate else ", or pass --allow-degenerate to accept it"), err=True)
        if not allow_degenerate:
            raise typer.Exit(1)
    elif settings.tol > 0 and not summary["converged"] and not quiet:
        typer.echo(f"pep train: warning: not converged after {summary['steps']} steps (the energy still rose by "
                   "more than the tolerance); train longer with --resume --max-steps N (or --epochs N)", err=True)


@contextmanager
def training_display(enabled: bool, callbacks: list[Callback] | None = None) -> Iterator[Callable[..., None]]:
    """The progress display on stderr (:func:`~pep_gp.pipeline.training.display.progress_display`, when
    ``enabled``) and the ``callbacks`` (``--log-to``'s loggers) while the flow runs; yields the callbacks'
    progress, to send them the run's ``end`` (an ``end`` without a summary is sent for them when the block
    raises)."""
    tell = callback_progress(callbacks)
    with progress_display(enabled) as report:
        token = progress_reporter.set(both(report, tell))
        try:
            yield tell
        except BaseException:
            tell("end", summary=None)
            raise
        finally:
            progress_reporter.reset(token)
