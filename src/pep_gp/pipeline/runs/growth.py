"""A run continued on a grown store (``pep train --resume`` after ``pep ingest … --append``), and its record.

A run's frame is fixed when it starts: the inputs' standardisation (``x_mean``, ``x_std``), the targets'
scaling, the model's settings (M capped by the rows) and its binding (class frequencies) are those of the
store version it first trained on, kept in every checkpoint. The parameters mean something only in that
frame, so a run continued on a grown store keeps it, although the grown store's own statistics differ.
What grows is the data: the energy's data term is scaled to the grown store's rows ``N``, and the
minibatch schedule (:mod:`pep_gp.pipeline.training.sampling`) starts a new epoch at the step the run resumed
from, over every block or, with ``--new-rows-only``, over the blocks holding the rows added since (their
energy still scaled to all ``N`` rows: SEP's tied factor stands for every row, Li, Hernández-Lobato & Turner
2015, eq. 4). ``--epochs``/``--max-steps`` then count from that step. The stopping rule's window and the best
energy so far start again there (energies of ``N`` rows are not comparable with those of fewer).

Every checkpoint records the growths in ``data_log``: one entry per store version the run trained on, with
the step it started at, its first block, its checksum and the epochs completed before it. The cosine
learning-rate schedule decays over a run's planned steps and cannot be extended, so a grown run refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from .manifest import RunManifest


def earlier_versions(store: Any) -> dict[str, int]:
    """``checksum → training rows`` of every earlier version of ``store`` (none for in-memory data)."""
    rows, earlier = 0, {}
    recorded = getattr(store, "attrs", {}).get("versions") or []
    for version in recorded[:-1]:
        rows += int(version["rows_added"]["train"])
        earlier[version["checksum"]] = rows
    return earlier


def data_log(manifest: RunManifest) -> list[dict[str, Any]]:
    """The checkpoint's ``data_log`` (a checkpoint written before it: one entry, its data from step 0)."""
    if manifest.data_log:
        return [dict(entry) for entry in manifest.data_log]
    return [{"step": 0, "first_block": 0, "checksum": manifest.dataset_checksum, "epoch": 0}]


def grown_frame(run_dir: Any, store: Any) -> RunManifest | None:
    """The newest checkpoint's manifest when its run trained on an earlier version of ``store`` (or grew
    before): the frame a resumed run keeps; None for a run of this store only, or no checkpoint."""
    if run_dir is None:
        return None
    from . import checkpoint  # zarr; the trainer imports this module anyway

    raw = checkpoint.newest_manifest(run_dir, RunManifest.of)
    if raw is None:
        return None
    manifest = RunManifest.of(raw)
    grown = len(data_log(manifest)) > 1 or manifest.dataset_checksum in earlier_versions(store)
    return manifest if grown else None


def check_growable(config: Any) -> None:
    """InputError for a config a grown run cannot continue with (the cosine schedule)."""
    if config.lr_schedule == "cosine":
        raise InputError("lr_schedule 'cosine' decays over the run's planned steps and cannot continue on a grown "
                         "store; train a new run (--run-dir) on it, or use a constant or exponential schedule")


def grown_entry(log: list[dict[str, Any]], step: int, store: Any, checksum: str, block_rows: int,
                new_rows_only: bool, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``data_log`` entry of a run resumed at ``step`` on ``store``, grown from the version ``checksum``."""
    rows_before = earlier_versions(store)[checksum]
    return {"step": step, "first_block": rows_before // block_rows if new_rows_only else 0,
            "checksum": store.checksum, "epoch": int(history[-1]["epoch"]) if history else 0}


@dataclass(frozen=True)
class Frame:
    """A run's frame as an estimator keeps it between ``partial_fit`` calls (and for ``warm_start``): the
    fields of a :class:`~pep_gp.pipeline.runs.manifest.RunManifest` the trainer keeps from it."""

    x_mean: list[float]
    x_std: list[float]
    targets: Any  # shift, scale
    model_binding: dict[str, Any]
    model_settings: dict[str, Any]
