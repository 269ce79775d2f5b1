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

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .options import (ClusterOption, JsonFlag, PrefectFlag, QuietFlag, TlsCaFile,
                      TlsCert, TlsKey, use_cluster, user_errors)
from .reports import plot_learning_curve, publish_training, write_metrics
from .runtime import (in_prefect_run, lazy_prefect, prefect_flow, prefect_quietly, prefect_requested, prefect_task,
                      task_retried)
from ..pipeline.data.stores import open_store
from ..pipeline.errors import InputError
from ..pipeline.training.config import TrainConfig, load_config


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
            "epochs": result.epochs, "seconds": round(result.seconds, 3),
            "rejected_steps": result.rejected_steps, "rejected_site_updates": result.rejected_site_updates,
            "checkpoint": str(result.checkpoint)}


def train_run(model: str, data: str, run_dir: str, config: dict[str, Any] | None = None,
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
    from ..pipeline.engine import connect
    from ..pipeline.training.trainer import Trainer, TrainJob

    job = TrainJob(model, open_store(data), TrainConfig(**(config or {})), Path(run_dir))
    reporter, log = progress_reporter.get(), _logger()
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
        segment = trainer.schedule.steps_per_epoch * segment_epochs
        result = segment_fn(trainer, resume, segment, progress)
        while not result.finished:
            result = segment_fn(trainer, False, segment, progress)
    finally:
        backend.close()
    summary = summarise(job, cluster, result)
    write_metrics(job.run_dir, summary)
    plot = plot_learning_curve(job.run_dir, result.history)
    if in_prefect_run():
        publish_training(summary, result.history, plot)
    return summary


def _logger() -> logging.Logger | Any:
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
    epochs: Annotated[int | None, typer.Option(help="Override the config's epochs.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Override the config's rows per step.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest complete checkpoint of "
                                              "--run-dir (its config unless --config is given).")] = False,
    json_output: JsonFlag = False,
    quiet: QuietFlag = False,
    tls_ca_file: TlsCaFile = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    prefect: PrefectFlag = False,
) -> None:
    """Train a model on a store, with checkpoints; resumable with --resume."""
    with user_errors("pep train"):
        store = open_store(data)
        settings = load_config(config, epochs=epochs, batch_size=batch_size) if config or not resume else None
        use_cluster(cluster, tls_ca_file, tls_cert, tls_key)
        from ..pipeline.models import get_model, model_settings  # JAX: after the cheap checks
        from ..pipeline.training.checkpoint import newest_manifest

        spec = get_model(model)
        if settings is None:  # resuming with the run's own config
            settings = load_config(None, (newest_manifest(run_dir) or {}).get("config"), epochs=epochs,
                                   batch_size=batch_size)
        model_settings(spec, settings.model, str(config or "defaults"))
        run = train_run
        if prefect_requested(prefect):
            prefect_quietly()
            run = prefect_objects("train_flow")
        with training_display(enabled=not (quiet or json_output)):
            summary = run(model, store.path, str(run_dir), settings.model_dump(), cluster, resume)
    if json_output:
        typer.echo(json.dumps(summary))
    elif not quiet:
        shown = {k: v for k, v in summary.items() if v is not None}
        Console().print("\n".join(f"{key:>15}  {value}" for key, value in shown.items()), markup=False)


@contextmanager
def training_display(enabled: bool) -> Iterator[None]:
    """A step bar and one line per epoch on stderr while the flow runs (when ``enabled``)."""
    if not enabled:
        yield
        return
    console = Console(stderr=True)
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
               TextColumn("{task.fields[energy]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as display:
        bar = display.add_task("train", total=None, energy="")

        def report(event: str, **info: Any) -> None:
            if event == "start":
                display.update(bar, total=info["total_steps"], completed=info["step"])
                if info["resumed_from"]:
                    console.print(f"resumed from {info['resumed_from']}")
            elif event == "step":
                display.update(bar, completed=info["step"], energy=f"energy {info['energy']:.6g}")
            elif event == "epoch":
                record = info["record"]
                held_out = ", ".join(f"{k} {record[k]:.4f}" for k in ("test_error", "rmse", "test_nll") if k in record)
                console.print(f"epoch {record['epoch']:>3}  step {record['step']:>6}  energy/row "
                              f"{record['energy_per_row']:.5f}  {held_out}  ({record['seconds']:.1f} s)")

        token = progress_reporter.set(report)
        try:
            yield
        finally:
            progress_reporter.reset(token)
