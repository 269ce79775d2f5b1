"""The Prefect flow ``train`` and the ``pep train`` command that runs it (DESIGN §6, §7).

The flow opens the store, connects the Dask backend (in-process, a ``LocalCluster`` it starts, or an
existing scheduler) and runs training as coarse ``train-segment`` tasks of ``segment_epochs`` epochs
each; the per-chunk work inside a segment is Dask's. Every segment starts from the newest checkpoint,
so a retried segment (transient errors only: I/O, lost workers) resumes where the last checkpoint
left it and ends with the same parameters as an uninterrupted run. At the end the flow writes
``learning_curve.png`` and ``metrics.json`` into the run directory and publishes them as artifacts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from prefect.runtime import task_run
from rich.console import Console

from .ingest import TELEMETRY_OFF, _mute_prefect_console
from .reports import plot_learning_curve, publish_training, write_metrics
from ..pipeline.training.config import TrainConfig, load_config, parse_settings
from ..pipeline.training.display import progress_display
from ..pipeline.training.runs import resumed_config
from ..pipeline.training.trainer import Progress as ProgressCallback
from ..pipeline.training.trainer import Trainer, TrainJob, TrainResult, no_progress
from ..pipeline.engine import CLUSTER_HELP, connect, parse_cluster
from ..pipeline.engine.clusters import TLS_CONFIG, client_security
from ..pipeline.errors import InputError, TrainingFailed
from ..pipeline.jsonio import dumps
from ..pipeline.training.lock import hold_run_dir
from ..pipeline.models import MODELS, get_model, model_settings
from ..pipeline.data.stores import open_store

progress_reporter: ContextVar[ProgressCallback] = ContextVar("train_progress", default=no_progress)
"""Where the running flow reports training progress; the command line sets it to its display."""

PREFECT_ENV = {**TELEMETRY_OFF, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}


def is_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition: I/O errors and lost Dask workers; never bad input or a bug."""
    from distributed import KilledWorker

    error = state.result(raise_on_failure=False)
    return isinstance(error, (OSError, TimeoutError, KilledWorker)) and not isinstance(error, InputError)


@task(name="train-segment", retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=is_transient,
      cache_policy=NO_CACHE)
def train_segment(trainer: Trainer, resume: bool, segment_steps: int, progress: ProgressCallback) -> TrainResult:
    """Train to the next segment boundary: the first segment from the start (or the newest checkpoint
    when ``resume``), later ones from where the last stopped; a retry resumes from the newest checkpoint."""
    return trainer.run(resume=resume or task_run.run_count > 1, segment_steps=segment_steps,
                       progress=progress)


def summarise(job: TrainJob, cluster: str, result: TrainResult) -> dict[str, Any]:
    """The flow's result and ``pep train --json`` object."""
    last = result.history[-1] if result.history else {}
    return {"model": job.model, "data": job.store.path, "run_dir": str(job.run_dir), "cluster": cluster,
            **result.metrics, "energy": last.get("energy"), "steps": result.steps,
            "epochs": result.epochs, "converged": result.converged, "seconds": round(result.seconds, 3),
            "rejected_steps": result.rejected_steps, "rejected_site_updates": result.rejected_site_updates,
            "notes": list(result.notes), "checkpoint": str(result.checkpoint)}


@flow(name="pep-train")
def train_flow(model: str, data: str, run_dir: str, config: dict[str, Any] | None = None,
               cluster: str = "none", resume: bool = False, segment_epochs: int = 1) -> dict[str, Any]:
    """Train ``model`` on the store ``data`` into ``run_dir``.

    Args:
        model: a registered model name (``pep_gp.pipeline.models.MODELS``).
        data: path of the store.
        run_dir: run directory (checkpoints, plot, metrics).
        config: :class:`~pep_gp.pipeline.training.config.TrainConfig` fields; defaults for the rest.
        cluster: ``none``, ``local:N`` or ``tcp://HOST:PORT``.
        resume: continue from the newest checkpoint of ``run_dir``.
        segment_epochs: epochs per ``train-segment`` task.

    Returns:
        The summary (see :func:`summarise`).
    """
    logger = get_run_logger()
    job = TrainJob(model, open_store(data), TrainConfig(**(config or {})), Path(run_dir))
    reporter = progress_reporter.get()

    def progress(event: str, **info: Any) -> None:
        if event == "start" and info["resumed_from"]:
            logger.info("resumed from %s at step %d of %d", info["resumed_from"], info["step"], info["total_steps"])
        if event == "epoch":
            logger.info("epoch %(epoch)d: energy %(energy).6g, %(held_out)s", {
                **info["record"], "held_out": {k: v for k, v in info["record"].items() if k.startswith(("test", "rmse"))}})
        reporter(event, **info)

    backend = connect(cluster)
    try:
        trainer = Trainer(job, backend)
        with hold_run_dir(job.run_dir):  # one writer from the first segment to the plot
            segment = trainer.schedule.steps_per_epoch * segment_epochs
            result = train_segment(trainer, resume, segment, progress)
            while not result.finished:
                result = train_segment(trainer, False, segment, progress)
            summary = summarise(job, cluster, result)
            write_metrics(job.run_dir, summary)
            plot = plot_learning_curve(job.run_dir, result.history)
    finally:
        backend.close()
    publish_training(summary, result.history, plot)
    return summary


# --------------------------------------------------------------------------------------------------
TlsCaFile = Annotated[Path | None, typer.Option(help="CA certificate of a tls:// cluster (default: Dask's "
                                                     "distributed.comm.tls.ca-file).")]
TlsCert = Annotated[Path | None, typer.Option(help="Client certificate for a tls:// cluster (default: "
                                                   "Dask's distributed.comm.tls.client.cert).")]
TlsKey = Annotated[Path | None, typer.Option(help="Its private key (default: Dask's "
                                                  "distributed.comm.tls.client.key).")]


def use_cluster(cluster: str, tls_ca_file: Path | None, tls_cert: Path | None, tls_key: Path | None) -> None:
    """Check ``--cluster`` and make the ``--tls-*`` files Dask's client TLS configuration of this
    process (over ``DASK_DISTRIBUTED__COMM__TLS__*`` and Dask's config files), so that the flow's
    :func:`~pep_gp.pipeline.engine.connect` uses them; refuse a tls:// cluster without them."""
    import dask

    parse_cluster(cluster)
    given = {TLS_CONFIG[name]: str(path) for name, path in (("ca", tls_ca_file), ("cert", tls_cert),
                                                             ("key", tls_key)) if path is not None}
    if given and not cluster.startswith("tls://"):
        raise InputError(f"--tls-ca-file/--tls-cert/--tls-key: only for a tls:// --cluster, found {cluster!r}")
    dask.config.set(given)
    client_security(cluster)


def train_command(
    model: Annotated[str, typer.Option(help=f"One of: {', '.join(MODELS)}.")],
    data: Annotated[Path, typer.Option(help="The store to train on (made by `pep ingest`).")],
    run_dir: Annotated[Path, typer.Option(help="Directory for checkpoints, plot and metrics.")],
    config: Annotated[Path | None, typer.Option(help="TOML file of training settings "
                                                     "(see pipeline/training/config.py).")] = None,
    cluster: Annotated[str, typer.Option(help=CLUSTER_HELP + ".")] = "none",
    epochs: Annotated[int | None, typer.Option(help="Run this many epochs (default: until converged or "
                                                    "--max-steps).")] = None,
    max_steps: Annotated[int | None, typer.Option(help="The most steps (default 2000 without --epochs).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per step (default 10000).")] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Adam's step size (default 0.01).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the initialisation and minibatch order.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="A config setting KEY=VALUE, e.g. model.alpha=0.5 "
                                                              "(repeatable; validated like the config file).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest complete checkpoint of "
                                              "--run-dir (its config unless --config is given).")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON summary object.")] = False,
    quiet: Annotated[bool, typer.Option(help="No progress display or summary.")] = False,
    tls_ca_file: TlsCaFile = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
) -> None:
    """Train a model on a store, with checkpoints; resumable with --resume."""
    prefect_quietly()
    with user_errors("pep train"):
        store = open_store(data)  # fail fast on bad options, before Prefect starts its server
        spec = get_model(model)
        use_cluster(cluster, tls_ca_file, tls_cert, tls_key)
        base = resumed_config(run_dir) if resume and config is None else None
        settings = load_config(config, base, parse_settings(set_ or []), epochs=epochs, max_steps=max_steps,
                               batch_size=batch_size, learning_rate=learning_rate, seed=seed)
        model_settings(spec, settings.model, str(config or "defaults"))
        with training_display(enabled=not (quiet or json_output)):
            summary = train_flow(model, store.path, str(run_dir), settings.model_dump(), cluster, resume)
    if json_output:
        typer.echo(dumps(summary))
    elif not quiet:
        shown = {k: v for k, v in summary.items() if v is not None and k != "notes"}
        Console().print("\n".join(f"{key:>15}  {value}" for key, value in shown.items()), markup=False)
    if not summary["converged"] and not quiet:
        typer.echo(f"pep train: warning: not converged after {summary['steps']} steps (the energy still rose by "
                   "more than the tolerance); train longer with --resume --max-steps N (or --epochs N)", err=True)


def prefect_quietly() -> None:
    """Telemetry off and a patient ephemeral server (unless the user set these), and Prefect's
    console logs muted, so the terminal shows only progress, the summary or the error line."""
    for variable, value in PREFECT_ENV.items():
        os.environ.setdefault(variable, value)
    _mute_prefect_console()
    logging.getLogger("distributed").setLevel(logging.ERROR)  # cluster start/stop chatter


@contextmanager
def user_errors(command: str) -> Iterator[None]:
    """Turn bad input (exit code 2), and I/O errors and failed training (exit code 1), into one line on
    stderr."""
    try:
        yield
    except (InputError, OSError, TrainingFailed) as error:
        typer.echo(f"{command}: error: {error}", err=True)
        raise typer.Exit(2 if isinstance(error, InputError) else 1) from None


@contextmanager
def training_display(enabled: bool) -> Iterator[None]:
    """The progress display on stderr (:func:`~pep_gp.pipeline.training.display.progress_display`) while
    the flow runs (when ``enabled``)."""
    with progress_display(enabled) as report:
        token = progress_reporter.set(report)
        try:
            yield
        finally:
            progress_reporter.reset(token)
