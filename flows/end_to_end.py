"""The Prefect flow ``pipeline``: ingest → train → evaluate as three sub-flows (DESIGN §6).

The module is not called ``pipeline.py``: a Prefect worker loads a deployment's entrypoint as a script
with its folder (``flows/``) first on ``sys.path``, where a ``flows/pipeline.py`` would shadow the
``pipeline`` package that every flow imports (issue 12; ``tests/flows/test_deployments.py`` checks
that no module in ``flows/`` is named like an importable package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.evaluate import evaluate_flow
from flows.ingest import ingest_flow
from flows.train import train_flow


@flow(name="pipeline")
def pipeline_flow(source: str, store: str, model: str, run_dir: str, inputs: list[str] | None = None,
                  target: str | None = None, config: dict[str, Any] | None = None, cluster: str = "none", reingest: bool = False,
                  resume: bool = True) -> dict[str, Any]:
    """Ingest ``source`` into ``store`` (skipped when the store exists, unless ``reingest``), train
    ``model`` into ``run_dir`` and evaluate it.

    Args:
        source, inputs, target: as ``pep ingest SOURCE --input … --target TARGET``.
        store: path of the store.
        model, run_dir, config, cluster: as :func:`flows.train.train_flow`.
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
