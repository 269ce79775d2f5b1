"""Runs trained by the ``pep`` command line on a messy CSV (``;``, ids, a text column, a missing value, labels
``yes``/``no`` or a numeric target): what a new user does, shared by the predict tests."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests import datafiles

BIN = Path(sys.executable).parent
MODELS = {"classification": "sparse-gp-classifier", "regression": "sparse-gp-regressor"}
SMALL_CONFIG = "epochs = 2\nbatch_size = 100\nlearning_rate = 0.05\n[model]\nnum_inducing = 8\n"


def pep(*args: str, check: bool = True, prefect_api: str | None = None) -> subprocess.CompletedProcess:
    """Run the installed ``pep`` command (without a Prefect API unless ``prefect_api`` is given)."""
    environment = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    if prefect_api:
        environment["PREFECT_API_URL"] = prefect_api
    done = subprocess.run([str(BIN / "pep"), *map(str, args)], capture_output=True, text=True, env=environment,
                          timeout=600)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@dataclass(frozen=True)
class MessyRun:
    """A trained run and its files: the training CSV, its store, and an unlabelled CSV of new rows."""

    task: str
    directory: Path
    train_csv: Path
    store: Path
    run_dir: Path
    new_csv: Path
    new_ids: list[str]


def messy_run(directory: Path, task: str) -> MessyRun:
    """``pep ingest`` (``--sep ';' --id id --na mean``) and ``pep train`` (small settings) on a messy CSV in
    ``directory``; a directory where this has run to the end already is taken as it is."""
    train_csv, store, run_dir = directory / "train.csv", directory / "s.zarr", directory / "run"
    new_csv = directory / "new.csv"
    if (directory / "done").exists():
        with new_csv.open(newline="") as table:
            ids = [row["id"] for row in csv.DictReader(table, delimiter=";")]
        return MessyRun(task, directory, train_csv, store, run_dir, new_csv, ids)
    shutil.rmtree(directory, ignore_errors=True)  # what a run cut short left
    directory.mkdir(parents=True)
    datafiles.write_messy_csv(train_csv, n_rows=240, task=task)
    target = "bought" if task == "classification" else "spend"
    pep("ingest", "csv", "--input", train_csv, "--target", target, "--sep", ";", "--id", "id", "--na", "mean",
        "--out", store, "--quiet")
    (directory / "small.toml").write_text(SMALL_CONFIG)
    pep("train", "--model", MODELS[task], "--data", store, "--run-dir", run_dir, "--config", directory / "small.toml",
        "--quiet")
    ids = datafiles.write_messy_csv(new_csv, n_rows=50, task=task, labelled=False, seed=7)
    (directory / "done").touch()
    return MessyRun(task, directory, train_csv, store, run_dir, new_csv, ids)
