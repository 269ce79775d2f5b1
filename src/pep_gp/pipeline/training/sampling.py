"""Deterministic minibatches of blocks (docs/concepts/architecture.md): which blocks step ``s`` uses.

An epoch visits every block once, in the order of a permutation drawn from
``fold_in(key, epoch)``; step ``s`` is position ``s mod S`` of epoch ``s div S`` (``S`` steps per
epoch) and takes the next ``blocks_per_step`` blocks of that permutation (the last step of an epoch
may take fewer). The step number and the key therefore fix the sampling position, so a resumed run
draws exactly the minibatches an uninterrupted one would. With ``blocks_per_step ≥ n_blocks`` every
step is a full batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import jax
import numpy as np


@dataclass(frozen=True)
class MinibatchSchedule:
    """Attributes: ``n_blocks`` in the training split, ``blocks_per_step``, and ``key_data``, the raw
    (uint32) data of the JAX key the permutations are drawn from."""

    n_blocks: int
    blocks_per_step: int
    key_data: tuple[int, ...]

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.n_blocks / self.blocks_per_step)

    @property
    def full_batch(self) -> bool:
        return self.blocks_per_step >= self.n_blocks

    def epoch_of(self, step: int) -> int:
        """The epoch (from 0) that ``step`` (from 0) belongs to."""
        return step // self.steps_per_epoch

    def ends_epoch(self, step: int) -> bool:
        """True when ``step`` is the last step of its epoch."""
        return (step + 1) % self.steps_per_epoch == 0

    def blocks(self, step: int) -> list[int]:
        """The blocks of ``step``, sorted (the order in which their results are summed)."""
        if self.full_batch:
            return list(range(self.n_blocks))
        epoch, position = divmod(step, self.steps_per_epoch)
        order = self._permutation(epoch)
        return sorted(order[position * self.blocks_per_step:(position + 1) * self.blocks_per_step])

    @lru_cache(maxsize=2)
    def _permutation(self, epoch: int) -> list[int]:
        key = jax.random.wrap_key_data(np.asarray(self.key_data, dtype=np.uint32))
        return np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), self.n_blocks)).tolist()
