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
from .moments import Moments


@dataclass(frozen=True, eq=False)
class ArrayBlocks(FixedBlocks):
    """The blocks of an in-memory split, cut as a store's (:class:`~pep_gp.pipeline.data.blocks.BlockSource`)."""

    x: np.ndarray = field(repr=False)  # [N, D] float64
    y: np.ndarray = field(repr=False)  # [N]
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
    """A training split held in memory, seen as a store with an empty test split.

    Args:
        x: inputs [N, D] (validated by the caller).
        y: class labels ``0..C−1`` (classification) or targets (regression), [N].
        task: ``"classification"`` or ``"regression"``.
        n_classes: C for classification.
        target_statistics: regression: record the targets' mean and deviation (the trainer then
            standardises them, as for a store); False keeps them as they are (mean 0, scale 1).
    """

    path = "the in-memory training data"

    def __init__(self, x: np.ndarray, y: np.ndarray, task: str, n_classes: int | None = None,
                 target_statistics: bool = True):
        from .ingest import default_chunk_rows

        self.x, self.y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.task, self.n_classes = task, n_classes
        chunk_rows = default_chunk_rows(self.x.shape[1])  # statistics merged as pep ingest merges a store's
        x_moments = Moments.of_chunks(self.x, chunk_rows)
        attrs: dict[str, Any] = {"x_mean": x_moments.mean.tolist(), "x_std": x_moments.std().tolist(),
                                 "y_mean": 0.0, "y_std": 1.0, "class_counts": {"train": [], "test": []}}
        if task == "regression" and target_statistics:
            y_moments = Moments.of_chunks(self.y, chunk_rows)
            attrs.update(y_mean=float(y_moments.mean[0]), y_std=float(y_moments.std()[0]))
        elif task == "classification":
            counts = np.bincount(self.y.astype(np.int64), minlength=n_classes)
            attrs["class_counts"] = {"train": counts.tolist(), "test": [0] * len(counts)}
        self.attrs = attrs
        digest = hashlib.sha256(self.x.tobytes())
        digest.update(self.y.tobytes())
        self.checksum = f"sha256:{digest.hexdigest()}"

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f"x{i}" for i in range(self.x.shape[1]))

    def n_rows(self, split: str) -> int:
        return self.x.shape[0] if split == "train" else 0

    def blocks(self, split: str, block_rows: int, targets: TargetScaling, standardize: bool = True,
               statistics: Any = None) -> ArrayBlocks:
        """The blocks of the training split (``split`` must be ``"train"``), standardised with ``statistics``'
        ``x_mean``/``x_std`` when given (an estimator's from its first ``partial_fit``), else the arrays' own."""
        if split != "train":
            raise ValueError(f"in-memory data has only a training split, not {split!r}")
        frame = self.attrs if statistics is None else statistics
        return ArrayBlocks(self.x, self.y, block_rows, *input_statistics(frame, standardize), targets)
