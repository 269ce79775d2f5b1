"""Numbered versions of a model that keeps learning as data arrives (the ``pep-refresh`` flow,
:mod:`pep_gp.flows.refresh`), and the one that is live.

A model directory ``MODEL`` holds::

    MODEL/train/              the training run, continued with ``--resume`` on each refresh
    MODEL/versions/N/         version N: a run directory holding the one checkpoint evaluated for it and
                              version.json (its held-out metrics, the live version's on the same rows, the decision)
    MODEL/live -> versions/N  the version to predict with: ``pep predict --run-dir MODEL/live``

Every evaluated checkpoint is published as the next version; it becomes live unless it is worse than the live
version by the rule of :func:`becomes_live`: its held-out NLL exceeds the live version's by more than
``tolerance`` (mean nats per test row), both scored on the same rows, the test split of the store as it is
now. The test split grows with every append (:mod:`pep_gp.pipeline.data.append` gives the new rows' share to
it), so the live version is scored again on the grown split rather than compared with the score it had when
it was published. Training itself is never rolled back: ``MODEL/train`` goes on from its newest checkpoint.

A version is published whole or not at all: it is copied into ``versions/.N.partial`` and renamed to
``versions/N`` in one rename, and ``live`` is a symbolic link replaced by a rename after that. A crash at any
point leaves ``live`` naming the previous version (a version renamed in before the crash, but never made live,
stays published and not live); the next publish removes a ``.partial`` directory a crash left.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import fsync, fsync_tree
from ..jsonio import dumps
from .lock import hold_run_dir

TRAIN, VERSIONS, LIVE, RECORD = "train", "versions", "live", "version.json"


def train_dir(model_dir: Path) -> Path:
    """The training run of a model directory."""
    return Path(model_dir) / TRAIN


def live_version(model_dir: Path) -> Path | None:
    """``MODEL/versions/N`` of the live version, or None before the first publish."""
    link = Path(model_dir) / LIVE
    return link.resolve() if link.is_symlink() else None


def published(model_dir: Path) -> list[dict[str, Any]]:
    """The records (``version.json``) of every published version, oldest first."""
    root = Path(model_dir) / VERSIONS
    numbers = sorted(int(path.name) for path in root.iterdir() if path.name.isdigit()) if root.is_dir() else []
    return [json.loads((root / str(number) / RECORD).read_text()) for number in numbers]


def check_tolerance(tolerance: float) -> None:
    """InputError for a tolerance that is negative or not finite."""
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise InputError(f"tolerance: expected a finite number >= 0 (mean nats per test row), found {tolerance!r}")


def becomes_live(candidate: dict[str, Any], live: dict[str, Any] | None, tolerance: float) -> bool:
    """Whether a candidate replaces the live version: never with a non-finite held-out NLL; else always when
    there is none, and otherwise unless ``candidate["test_nll"] > live["test_nll"] + tolerance``, the two
    metrics computed on the same test rows.

    Raises:
        InputError: a negative or non-finite ``tolerance``.
    """
    check_tolerance(tolerance)
    nll = candidate.get("test_nll")
    if nll is None or not math.isfinite(nll):
        return False
    return live is None or live.get("test_nll") is None or nll <= live["test_nll"] + tolerance


def publish(model_dir: Path, checkpoint: Path, metrics: dict[str, Any], live_metrics: dict[str, Any] | None,
            tolerance: float, data: dict[str, Any]) -> dict[str, Any]:
    """Publish ``checkpoint`` as the next version of ``model_dir`` and make it live if :func:`becomes_live`
    says so (see the module docstring for the layout and why nothing is half-written).

    Args:
        model_dir: the model directory.
        checkpoint: the checkpoint directory evaluated (``MODEL/train/checkpoints/step-…``).
        metrics: its held-out metrics on the store's test split.
        live_metrics: the live version's on the same rows (None when no version is live).
        tolerance: the rule's tolerance, mean nats per test row.
        data: what the metrics were computed on (the store's path and checksum), recorded with them.

    Returns:
        The version's record (also ``MODEL/versions/N/version.json``).
    """
    model_dir = Path(model_dir)
    root = model_dir / VERSIONS
    with hold_run_dir(model_dir, "pep refresh"):
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(".*.partial"):
            shutil.rmtree(leftover)
        previous = live_version(model_dir)
        number = max((int(path.name) for path in root.iterdir() if path.name.isdigit()), default=0) + 1
        record = {"version": number, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "checkpoint": checkpoint.name, "data": data, "metrics": _scalars(metrics),
                  "previous_live": None if previous is None else int(previous.name),
                  "previous_live_metrics": None if live_metrics is None else _scalars(live_metrics),
                  "tolerance": tolerance, "live": becomes_live(metrics, live_metrics, tolerance)}
        staging = root / f".{number}.partial"
        shutil.copytree(checkpoint, staging / "checkpoints" / checkpoint.name)
        (staging / RECORD).write_text(dumps(record, indent=2) + "\n")
        fsync_tree(staging)
        os.rename(staging, root / str(number))
        fsync(root)
        if record["live"]:
            link = model_dir / f".{LIVE}.new"
            link.unlink(missing_ok=True)
            link.symlink_to(Path(VERSIONS) / str(number))
            os.replace(link, model_dir / LIVE)
            fsync(model_dir)
    return record


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """The numbers and names of a metrics dict (not its reliability bins or plot paths)."""
    return {key: value for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "run_dir"}
