"""In-memory training data with the interface the trainer reads from a store, so that the estimators
train through the same trainer and step as ``pep train``.

:class:`ArrayData` holds a training split only; its attributes are computed as ``pep ingest`` computes a
store's (per-feature mean and deviation merged chunk by chunk in the same order, class counts, a checksum
of the arrays), and its blocks are cut, standardised and padded exactly as a store's
(:class:`~pep_gp.pipeline.data.blocks.BlockSource`): the same rows give the same training run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .blocks import FixedBlocks, TargetScaling, input_statistics
from .moments import Moments, target_statistics as statistics_of_targets
from .stores import default_chunk_rows


@dataclass(frozen=True, eq=False)
class ArrayBlocks(FixedBlocks):
    """The blocks of an in-memory split, cut as a store's (:class:`~pep_gp.pipeline.data.blocks.BlockSource`)."""

    x: np.ndarray = field(repr=False)  # [N, D] float64
    y: np.ndarray = field(repr=False)  # [N], or [N, P] for several targets
    block_rows: int
    x_mean: tuple[float, ...]
    x_std: tuple[float, ...]
    targets: TargetScaling

    @property
    def n_rows(self) -> int:
        return self.x.shape[0]

    def describe(self) -> str:
        return "the in-memory arrays"

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        return self.x[start:stop], self.y[start:stop]


class ArrayData:
    """A training split held in memory, seen as a store whose test split is empty or ``held_out``.

    Args:
        x: inputs [N, D] (validated by the caller).
        y: class labels ``0..C−1`` (classification) or targets (regression), [N], or [N, P] for ``P``
            regression targets per row (named ``y0 … y<P-1>``, as ``pep ingest`` names an npz's columns).
        task: ``"classification"`` or ``"regression"``.
        n_classes: C for classification.
        target_statistics: regression: record the targets' mean and deviation (the trainer then
            standardises them, as for a store); False keeps them as they are (mean 0, scale 1).
        held_out: ``(x, y)`` of rows seen as the test split (an estimator's validation rows, for
            ``early_stopping``): the trainer scores them at every epoch; None for none. They take no part
            in the statistics or the checksum.
    """

    path = "the in-memory training data"

    def __init__(self, x: np.ndarray, y: np.ndarray, task: str, n_classes: int | None = None,
                 target_statistics: bool = True, held_out: tuple[np.ndarray, np.ndarray] | None = None):
        self.x, self.y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.held_out = None if held_out is None else tuple(np.asarray(a, dtype=np.float64) for a in held_out)
        self.task, self.n_classes = task, n_classes
        chunk_rows = default_chunk_rows(self.x.shape[1])  # statistics merged as pep ingest merges a store's
        x_moments = Moments.of_chunks(self.x, chunk_rows)
        attrs: dict[str, Any] = {"x_mean": x_moments.mean.tolist(), "x_std": x_moments.std().tolist(),
                                 "y_mean": 0.0, "y_std": 1.0, "class_counts": {"train": [], "test": []}}
        if task == "regression" and target_statistics:
            attrs.update(statistics_of_targets(Moments.of_chunks(self.y, chunk_rows), self.n_targets))
        elif task == "classification":
            counts = np.bincount(self.y.astype(np.int64), minlength=n_classes)
            held_out = np.zeros(0) if self.held_out is None else self.held_out[1]
            attrs["class_counts"] = {"train": counts.tolist(),
                                     "test": np.bincount(held_out.astype(np.int64), minlength=n_classes).tolist()}
        self.attrs = attrs
        digest = hashlib.sha256(self.x.tobytes())
        digest.update(self.y.tobytes())
        self.checksum = f"sha256:{digest.hexdigest()}"

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f"x{i}" for i in range(self.x.shape[1]))

    @property
    def n_targets(self) -> int:
        """Targets per row: 1 for ``y`` ``[N]``, ``P`` for ``[N, P]``."""
        return 1 if self.y.ndim == 1 else self.y.shape[1]

    @property
    def target_names(self) -> tuple[str, ...]:
        return ("y",) if self.y.ndim == 1 else tuple(f"y{p}" for p in range(self.n_targets))

    def n_rows(self, split: str) -> int:
        if split == "train":
            return self.x.shape[0]
        return 0 if self.held_out is None else self.held_out[0].shape[0]

    def blocks(self, split: str, block_rows: int, targets: TargetScaling, standardize: bool = True,
               statistics: Any = None) -> ArrayBlocks:
        """The blocks of the training split or of the ``held_out`` rows (``"test"``), both standardised with
        ``statistics``' ``x_mean``/``x_std`` when given (an estimator's from its first ``partial_fit``), else the
        training rows' own."""
        if split not in ("train", "test") or (split == "test" and self.held_out is None):
            raise ValueError(f"this in-memory data has no {split!r} split")
        frame = self.attrs if statistics is None else statistics
        x, y = (self.x, self.y) if split == "train" else self.held_out
        return ArrayBlocks(x, y, block_rows, *input_statistics(frame, standardize), targets)
