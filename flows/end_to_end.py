"""The Prefect flow ``pep-pipeline``: ingest → train → evaluate as three sub-flows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from .evaluate import evaluate_flow
from .ingest import ingest_flow
from .train import train_flow


@flow(name="pep-pipeline")
def pipeline_flow(source: str, store: str, model: str, run_dir: str, inputs: list[str] | None = None,
                  target: str | None = None, config: dict[str, Any] | None = None, cluster: str = "none", reingest: bool = False,
                  resume: bool = True) -> dict[str, Any]:
    """Ingest ``source`` into ``store`` (skipped when the store exists, unless ``reingest``), train
    ``model`` into ``run_dir`` and evaluate it.

    Args:
        source, inputs, target: as ``pep ingest SOURCE --input … --target TARGET``.
        store: path of the store.
        model, run_dir, config, cluster: as :func:`pep_gp.flows.train.train_flow`.
        reingest: ingest again, replacing the store (a new store means a new run directory).
        resume: continue an interrupted run in ``run_dir`` (the default: re-running the pipeline
            picks up where it stopped).

    Returns:
        ``{"ingest": summary or None, "train": summary, "evaluate": metrics}``.
    """
    ingested = None
    if reingest or not Path(store).exists():
        ingested = ingest_flow(source, store, inputs, target=target, overwrite=reingest)
    trained = train_flow(model, store, run_dir, config, cluster, resume)
    return {"ingest": ingested, "train": trained, "evaluate": evaluate_flow(run_dir, store, cluster)}
