"""Fixed-size row blocks of a store split: the unit of data the engine computes on.

Block ``b`` of a split holds rows ``[b·R, (b+1)·R)`` (``R = block_rows``), read from the Zarr arrays as
verified chunks (:mod:`pep_gp.pipeline.data.chunks`), standardised with the *training* split's statistics
and padded to ``R`` rows with a mask, so every block has the same static shape and a worker compiles its
chunk function once. Padded rows carry ``x = 0``, ``y = 0`` and ``mask = False``; the energy contract
makes them contribute exactly zero. Class labels are checked to lie in ``0..C−1`` as they are read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import numpy as np

from ..errors import InputError
from .chunks import StoreChunks


class Block(NamedTuple):
    x: np.ndarray  # [R, D] float64, standardised
    y: np.ndarray  # [R] float64 targets (model units), [R, P] for P targets per row
    mask: np.ndarray  # [R] bool, False on padding


@dataclass(frozen=True)
class TargetScaling:
    """Targets in model units: ``(y − shift) / scale`` as float64 (labels use shift 0, scale 1); for ``P``
    targets per row (``y`` ``[N, P]``) ``shift`` and ``scale`` are tuples of ``P``, one per column."""

    shift: float | tuple[float, ...] = 0.0
    scale: float | tuple[float, ...] = 1.0

    def __post_init__(self):
        for name in ("shift", "scale"):  # a manifest's lists as tuples: the scaling stays hashable
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(map(float, getattr(self, name))))

    def __call__(self, y: np.ndarray) -> np.ndarray:
        return (np.asarray(y, dtype=np.float64) - np.asarray(self.shift)) / np.asarray(self.scale)

    def log_scale(self) -> float:
        """``Σ_p log scale_p`` (``log scale`` for one target, to the bit): what a row's log density of the
        targets in their own units is less than in model units."""
        return sum(math.log(scale) for scale in np.atleast_1d(self.scale))


# A pytree too, so that a compiled predictive takes the scaling as an argument (folds share one compilation).
jax.tree_util.register_dataclass(TargetScaling, data_fields=["shift", "scale"], meta_fields=[])


def input_statistics(attrs, standardize: bool = True) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(x_mean, x_std)`` the inputs are standardised with: the training split's (a store's or in-memory
    data's ``attrs``), or mean 0 and scale 1 when ``standardize`` is False (inputs fed as stored)."""
    mean, std = np.asarray(attrs["x_mean"], float), np.asarray(attrs["x_std"], float)
    if not standardize:
        mean, std = np.zeros_like(mean), np.ones_like(std)
    return tuple(map(float, mean)), tuple(map(float, std))


class FixedBlocks:
    """Rows cut into fixed-size blocks, standardised and padded (what every block source shares);
    a subclass has ``n_rows``, ``block_rows``, ``x_mean``, ``x_std``, ``targets`` and ``rows(start, stop)``,
    and ``n_classes`` where its labels must be checked."""

    n_classes: int | None = None

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.n_rows / self.block_rows)

    def rows_in(self, block: int) -> int:
        """Real (unpadded) rows of ``block``."""
        return min(self.block_rows, self.n_rows - block * self.block_rows)

    def read(self, block: int) -> Block:
        """Read, standardise and pad ``block``."""
        if not 0 <= block < self.n_blocks:
            raise IndexError(f"{self.describe()} has {self.n_blocks} blocks, no block {block}")
        start, rows = block * self.block_rows, self.rows_in(block)
        x_rows, y_rows = self.rows(start, start + rows)
        if self.n_classes is not None:
            self._check_labels(y_rows, start)
        x = np.zeros((self.block_rows, x_rows.shape[1]))
        y = np.zeros((self.block_rows, *y_rows.shape[1:]))
        x[:rows] = (x_rows.astype(np.float64) - self.x_mean) / self.x_std
        y[:rows] = self.targets(y_rows)
        return Block(x, y, np.arange(self.block_rows) < rows)

    def _check_labels(self, labels: np.ndarray, start: int) -> None:
        """InputError at the first label that is not a class ``0..C−1`` (rows numbered within the split)."""
        bad = np.flatnonzero((labels < 0) | (labels >= self.n_classes) | (labels != np.round(labels)))
        if len(bad):
            raise InputError(f"{self.describe()}: row {start + int(bad[0])}: expected a class label in "
                             f"0..{self.n_classes - 1}, found {labels[bad[0]]:g}")


@dataclass(frozen=True)
class BlockSource(FixedBlocks):
    """The blocks of one split of a store; small, hashable and picklable (shipped to workers).

    Attributes:
        chunks: the store's verified chunk reads.
        split: ``"train"`` or ``"test"``.
        n_rows: rows in the split.
        block_rows: rows per block R.
        x_mean, x_std: per-feature training statistics used to standardise ``X``.
        targets: maps stored ``y`` to the model's targets.
        n_classes: C of a classification store (labels checked to lie in ``0..C−1``), else None.
        columns: where each of the model's features is among the store's columns (a run's features in
            another store, :func:`~pep_gp.pipeline.data.stores.feature_order`); None: as stored.
    """

    chunks: StoreChunks
    split: str
    n_rows: int
    block_rows: int
    x_mean: tuple[float, ...]
    x_std: tuple[float, ...]
    targets: TargetScaling
    n_classes: int | None = None
    columns: tuple[int, ...] | None = None

    @classmethod
    def of(cls, store: Any, split: str, block_rows: int, targets: TargetScaling, standardize: bool = True,
           statistics: Any = None, columns: tuple[int, ...] | None = None) -> "BlockSource":
        """The blocks of ``split`` of ``store`` (a :class:`~pep_gp.pipeline.data.stores.Store`), standardised
        with the training statistics (``statistics``' ``x_mean``/``x_std`` when given, e.g. a trained run's;
        else the store's) unless ``standardize`` is False (then ``x`` is fed as stored: mean 0, scale 1),
        its columns read in the order ``columns`` gives (default: as stored)."""
        mean, std = input_statistics(store.attrs if statistics is None else statistics, standardize)
        return cls(store.chunks, split, store.n_rows(split), block_rows, mean, std, targets, store.n_classes,
                   columns)

    def describe(self) -> str:
        return f"{self.chunks.path}: {self.split}"

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[start, stop)`` of the split, from chunks checked against their digests (features in the
        order of :attr:`columns`)."""
        x, y = self.chunks.rows(self.split, start, stop)
        return (x if self.columns is None else x[:, list(self.columns)]), y
