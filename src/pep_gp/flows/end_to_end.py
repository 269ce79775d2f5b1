"""The flow ``pep-pipeline``: ingest → train → evaluate (as three sub-flows under Prefect)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import evaluate, ingest, train
from ..pipeline.files import absolute
from .runtime import in_prefect_run, lazy_prefect, prefect_flow


def pipeline_run(source: str, store: str, model: str, run_dir: str, inputs: list[str] | None = None,
                 target: str | None = None, config: dict[str, Any] | None = None, cluster: str = "none",
                 reingest: bool = False, resume: bool = True) -> dict[str, Any]:
    """Ingest ``source`` into ``store`` (skipped when the store exists, unless ``reingest``), train
    ``model`` into ``run_dir`` and evaluate it.

    Args:
        source, inputs, target: as ``pep ingest SOURCE --input … --target TARGET``.
        store: path of the store.
        model, run_dir, config, cluster: as :func:`pep_gp.flows.train.train_run`.
        reingest: ingest again, replacing the store (a new store means a new run directory).
        resume: continue an interrupted run in ``run_dir`` (the default: re-running the pipeline
            picks up where it stopped).

    Returns:
        ``{"ingest": summary or None, "train": summary, "evaluate": metrics}``.

    Relative paths are made absolute here, from the flow run's working directory (a deployment's
    ``PEP_HOME``), before anything else sees them: the Dask workers get the store's absolute path, and
    an error names the file it looked for where it looked.
    """
    store, run_dir, inputs = absolute(store), absolute(run_dir), inputs and [absolute(path) for path in inputs]
    prefect = in_prefect_run()
    run_ingest = ingest.prefect_objects("ingest_flow") if prefect else ingest.ingest_run
    run_train = train.prefect_objects("train_flow") if prefect else train.train_run
    run_evaluate = evaluate.prefect_objects("evaluate_flow") if prefect else evaluate.evaluate_run
    ingested = None
    if reingest or not Path(store).exists():
        ingested = run_ingest(source, store, inputs, target=target, overwrite=reingest)
    trained = run_train(model, store, run_dir, config, cluster, resume)
    return {"ingest": ingested, "train": trained, "evaluate": run_evaluate(run_dir, store, cluster)}


def _prefect() -> dict[str, Any]:
    """The flow ``pep-pipeline`` over :func:`pipeline_run`."""
    return {"pipeline_flow": prefect_flow(pipeline_run, "pep-pipeline")}


prefect_objects = lazy_prefect(__name__, ("pipeline_flow",), _prefect)
__getattr__ = prefect_objects
