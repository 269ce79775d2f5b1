"""Fixed-size row blocks of a store split: the unit of data the engine computes on (DESIGN §4).

Block ``b`` of a split holds rows ``[b·R, (b+1)·R)`` (``R = block_rows``), read from the Zarr arrays,
standardised with the *training* split's statistics (DESIGN §3) and padded to ``R`` rows with a mask,
so every block has the same static shape and a worker compiles its chunk function once. Padded rows
carry ``x = 0``, ``y = 0`` and ``mask = False``; the energy contract makes them contribute exactly zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import numpy as np
import zarr



class Block(NamedTuple):
    x: np.ndarray  # [R, D] float64, standardised
    y: np.ndarray  # [R] float64 targets (model units)
    mask: np.ndarray  # [R] bool, False on padding


@dataclass(frozen=True)
class TargetScaling:
    """Targets in model units: ``(y − shift) / scale`` as float64 (labels use shift 0, scale 1)."""

    shift: float = 0.0
    scale: float = 1.0

    def __call__(self, y: np.ndarray) -> np.ndarray:
        return (np.asarray(y, dtype=np.float64) - self.shift) / self.scale


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
    a subclass has ``n_rows``, ``block_rows``, ``x_mean``, ``x_std``, ``targets`` and ``rows(start, stop)``."""

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
        x = np.zeros((self.block_rows, x_rows.shape[1]))
        y = np.zeros(self.block_rows)
        x[:rows] = (x_rows.astype(np.float64) - self.x_mean) / self.x_std
        y[:rows] = self.targets(y_rows)
        return Block(x, y, np.arange(self.block_rows) < rows)


@dataclass(frozen=True)
class BlockSource(FixedBlocks):
    """The blocks of one split of a store; small, hashable and picklable (shipped to workers).

    Attributes:
        store_path: the store's path or URL.
        split: ``"train"`` or ``"test"``.
        n_rows: rows in the split.
        block_rows: rows per block R.
        x_mean, x_std: per-feature training statistics used to standardise ``X``.
        targets: maps stored ``y`` to the model's targets.
    """

    store_path: str
    split: str
    n_rows: int
    block_rows: int
    x_mean: tuple[float, ...]
    x_std: tuple[float, ...]
    targets: TargetScaling

    @classmethod
    def of(cls, store: Any, split: str, block_rows: int, targets: TargetScaling,
           standardize: bool = True) -> "BlockSource":
        """The blocks of ``split`` of ``store`` (a :class:`~pep_gp.pipeline.data.stores.Store`), standardised
        with the training statistics unless ``standardize`` is False (then ``x`` is fed as stored: mean 0,
        scale 1)."""
        return cls(store.path, split, store.n_rows(split), block_rows, *input_statistics(store.attrs, standardize),
                   targets)

    def describe(self) -> str:
        return self.split

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[start, stop)`` of the split as stored."""
        x_array, y_array = _arrays(self.store_path, self.split)
        return x_array[start:stop], y_array[start:stop]


@lru_cache(maxsize=8)
def _arrays(path: str, split: str) -> tuple[zarr.Array, zarr.Array]:
    group = zarr.open_group(path, mode="r")[split]
    return group["X"], group["y"]
