"""The flow ``pep-refresh``: a model that keeps learning as files arrive (the ``refresh`` deployment of
prefect.yaml runs it on a schedule).

Each run takes the files of the ``incoming`` directory it has not ingested yet, ingests them into the store
(the first run creates it; later runs append, :mod:`pep_gp.pipeline.data.append`), continues training on the
grown store (``pep train --resume``, :mod:`pep_gp.pipeline.runs.growth`), evaluates the newest checkpoint
and the live version on the same test rows, publishes the checkpoint as the next numbered version and makes
it live unless it is worse (:mod:`pep_gp.pipeline.runs.versions`), and predicts ``predict_input`` with the
live version. A run that finds no new file and whose store's newest version is published does nothing.

Which files were ingested is recorded in ``MODEL/incoming.json``, by name: a file is new when its name is.
Before an ingest the record names the files as pending with the store's checksum; once the ingest returns
they are recorded as ingested. A run that finds files pending (the last one stopped during its ingest)
counts them as ingested if the store's checksum changed (the ingest swapped its store in: an ingest and an
append are atomic), and ingests them again otherwise, so a crash neither loses nor duplicates rows. Files
whose names start with a dot are skipped: copy a file in under a dot-name and rename it when it is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..pipeline.data.predictions import output_kind
from ..pipeline.errors import InputError
from ..pipeline.files import absolute
from ..pipeline.jsonio import dumps
from ..pipeline.runs.lock import hold_run_dir
from ..pipeline.runs.versions import check_tolerance, live_version, publish, published, train_dir
from . import evaluate, ingest, predict, train
from .reports import artifact_key
from .runtime import in_prefect_run, lazy_prefect, prefect_flow
from .train import run_logger

LEDGER = "incoming.json"


def read_ledger(model_dir: Path, store_checksum: str | None) -> list[str]:
    """The names of the files ingested so far, pending ones settled by the store's checksum now (see the
    module docstring)."""
    path = Path(model_dir) / LEDGER
    if not path.exists():
        return []
    ledger = json.loads(path.read_text())
    pending = ledger.get("pending")
    landed = pending is not None and pending["store_checksum"] != store_checksum
    return list(ledger["ingested"]) + (list(pending["files"]) if landed else [])


def write_ledger(model_dir: Path, ingested: list[str], pending: list[str] | None = None,
                 store_checksum: str | None = None) -> None:
    """Record the ingested files (and those an ingest is about to read), atomically."""
    path = Path(model_dir) / LEDGER
    ledger = {"ingested": ingested,
              "pending": None if pending is None else {"files": pending, "store_checksum": store_checksum}}
    temporary = path.with_name(f".{LEDGER}.tmp")
    temporary.write_text(dumps(ledger, indent=2) + "\n")
    os.replace(temporary, path)


def new_files(incoming: Path, ingested: list[str]) -> list[Path]:
    """The files of ``incoming`` not yet ingested, by name (dot-names skipped).

    Raises:
        InputError: ``incoming`` is not a directory.
    """
    if not incoming.is_dir():
        raise InputError(f"incoming {incoming}: no such directory (the flow ingests the new files placed there)")
    seen = set(ingested)
    return sorted(path for path in incoming.iterdir()
                  if path.is_file() and not path.name.startswith(".") and path.name not in seen)


def store_checksum(store: Path) -> str | None:
    """The checksum of the store (None when there is none yet)."""
    if not store.exists():
        return None
    from ..pipeline.data.stores import open_store

    return open_store(store).checksum


def refresh_run(source: str, incoming: str, store: str, model: str, model_dir: str, target: str | None = None,
                config: dict[str, Any] | None = None, cluster: str = "none", tolerance: float = 0.01,
                seed: int = 0, predict_input: str | None = None, predict_out: str | None = None) -> dict[str, Any]:
    """Ingest the new files of ``incoming`` into ``store``, continue training, evaluate, publish the next
    version of ``model_dir`` and predict with the live one (see the module docstring).

    Args:
        source: the files' kind, as ``pep ingest SOURCE``: ``csv``, ``parquet``, ``npz``, ``airline``.
        incoming: the directory new files arrive in.
        store: path of the store (created by the first run, appended to by later ones).
        model: a registered model name.
        model_dir: the model directory (``train/``, ``versions/N/``, ``live``).
        target: the target column (tables) or kind (airline), as ``pep ingest --target``.
        config: training settings, as :func:`pep_gp.flows.train.train_run`; on a grown store ``epochs`` and
            ``max_steps`` count from the step the run resumes at.
        cluster: ``none``, ``local:N`` or ``tcp://HOST:PORT``.
        tolerance: a new version stays out of ``live`` when its held-out NLL exceeds the live version's by
            more than this (mean nats per test row, both on the store's test split as it is now).
        seed: seed of each ingest's shuffle and train/test split.
        predict_input: a table or store to predict with the live version after each publish (optional).
        predict_out: where: a ``.csv``, ``.parquet`` or ``.zarr`` file, replaced each time.

    Returns:
        ``{"new_files", "ingest", "train", "evaluate", "live_evaluate", "version", "live", "predict"}``: the
        names of the files ingested, each step's summary (None for a step not taken), the published version's
        record and the live version's number.
    """
    if (predict_input is None) != (predict_out is None):
        raise InputError("predict_input/predict_out: give both (predict with the live version) or neither")
    if predict_out is not None:
        output_kind(Path(absolute(predict_out)), overwrite=True)  # a bad output fails now, not after training
    check_tolerance(tolerance)
    store_path, model_path, inbox = Path(absolute(store)), Path(absolute(model_dir)), Path(absolute(incoming))
    prefect = in_prefect_run()
    run_ingest = ingest.prefect_objects("ingest_flow") if prefect else ingest.ingest_run
    run_train = train.prefect_objects("train_flow") if prefect else train.train_run
    run_evaluate = evaluate.prefect_objects("evaluate_flow") if prefect else evaluate.evaluate_run
    score_live = evaluate.prefect_objects("evaluate_task") if prefect else evaluate.evaluate_metrics
    run_predict = predict.prefect_objects("predict_flow") if prefect else predict.predict_run
    done: dict[str, Any] = dict.fromkeys(("ingest", "train", "evaluate", "live_evaluate", "version", "predict"))
    log = run_logger()
    with hold_run_dir(model_path, "pep refresh"):
        checksum = store_checksum(store_path)
        ingested = read_ledger(model_path, checksum)
        arrived = new_files(inbox, ingested)
        if arrived:
            names = [path.name for path in arrived]
            log.info("%s %d new files into %s: %s", "appending" if checksum else "ingesting", len(names), store_path,
                     ", ".join(names))
            write_ledger(model_path, ingested, names, checksum)
            done["ingest"] = run_ingest(source, str(store_path), [str(path) for path in arrived], target=target,
                                        seed=seed, append=checksum is not None)
            write_ledger(model_path, ingested + names)
            checksum = store_checksum(store_path)
        versions = published(model_path)
        if checksum is None or (versions and versions[-1]["data"]["checksum"] == checksum):
            live = live_version(model_path)
            log.info("no new file in %s and %s: nothing to do", inbox,
                     f"version {versions[-1]['version']} is of the store as it is" if versions else "no store yet")
            return {"new_files": [], **done, "live": None if live is None else int(live.name)}
        training = str(train_dir(model_path))
        done["train"] = run_train(model, str(store_path), training, config, cluster, True)
        done["evaluate"] = run_evaluate(training, str(store_path), cluster)
        live = live_version(model_path)
        if live is not None:
            done["live_evaluate"] = score_live(str(live), str(store_path), cluster)
        done["version"] = publish(model_path, Path(done["evaluate"]["checkpoint"]), done["evaluate"],
                                  done["live_evaluate"], tolerance, {"store": str(store_path), "checksum": checksum})
        live = live_version(model_path)
        log.info("%s", decision(done["version"]))
        if predict_input is not None and live is not None:  # none live: the first version's NLL was not finite
            done["predict"] = run_predict(str(live), absolute(predict_input), absolute(predict_out), cluster=cluster,
                                          overwrite=True)
    if prefect:
        _publish_artifact(model_path, done["version"])
    return {"new_files": [path.name for path in arrived], **done, "live": None if live is None else int(live.name)}


def decision(record: dict[str, Any]) -> str:
    """One line saying which version was published and whether it is live, and why."""
    published_as = f"published version {record['version']} (test NLL {record['metrics'].get('test_nll')})"
    if record["live"]:
        return f"{published_as}; it is live"
    if record["previous_live"] is None:
        return f"{published_as}; not live, its test NLL is not finite, and no version is live"
    live_nll = (record["previous_live_metrics"] or {}).get("test_nll")
    return (f"{published_as}; version {record['previous_live']} stays live (test NLL {live_nll} on the same rows, "
            f"tolerance {record['tolerance']})")


def _publish_artifact(model_dir: Path, record: dict[str, Any]) -> None:
    """The version's record as the markdown artifact ``refresh-<model>`` (its key's history: every version)."""
    from prefect.artifacts import create_markdown_artifact

    nll, live_nll = record["metrics"].get("test_nll"), (record["previous_live_metrics"] or {}).get("test_nll")
    rows = [("version", record["version"]), ("live", "yes" if record["live"] else f"no, {record['previous_live']} stays"),
            ("test NLL", nll), ("live version's test NLL, same rows", live_nll), ("tolerance", record["tolerance"]),
            ("checkpoint", record["checkpoint"]), ("store checksum", record["data"]["checksum"])]
    create_markdown_artifact(key=artifact_key("refresh", model_dir),
                             markdown="| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows),
                             description=f"pep refresh {model_dir}: version {record['version']}")


def _prefect() -> dict[str, Any]:
    """The flow ``pep-refresh`` over :func:`refresh_run`."""
    return {"refresh_flow": prefect_flow(refresh_run, "pep-refresh")}


prefect_objects = lazy_prefect(__name__, ("refresh_flow",), _prefect)
__getattr__ = prefect_objects
