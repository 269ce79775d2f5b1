"""Deterministic minibatches of blocks (docs/concepts/architecture.md): which blocks step ``s`` uses.

An epoch visits every block once, in the order of a permutation drawn from
``fold_in(key, epoch)``; step ``s`` is position ``s mod S`` of epoch ``s div S`` (``S`` steps per
epoch) and takes the next ``blocks_per_step`` blocks of that permutation (the last step of an epoch
may take fewer). The step number and the key therefore fix the sampling position, so a resumed run
draws exactly the minibatches an uninterrupted one would. With ``blocks_per_step ≥ n_blocks`` every
step is a full batch.

A run that continues on a grown store (:mod:`pep_gp.pipeline.data.append`) starts a new schedule at the
step ``g`` it resumed from (``start_step``): step ``s ≥ g`` is position ``(s − g) mod S'`` of epoch
``(s − g) div S'`` over the grown store's blocks (``S'`` its steps per epoch), each epoch's permutation drawn
from ``fold_in(fold_in(key, g), epoch)``; with ``--new-rows-only`` the epochs cover only the blocks from
``first_block`` on (those holding the rows added since the checkpoint). The checkpoints record every such
``(g, first_block)``, so a grown run resumed again, or run again from the same checkpoint on the same
store, draws the same minibatches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import jax
import numpy as np


def key_data(seed: int) -> tuple[int, ...]:
    """The raw data of ``jax.random.key(seed)``: for JAX's default key (threefry2x32) and a seed below 2**32, the
    seed's high and low 32 bits, ``(0, seed)`` (JAX's ``threefry_seed``), without the program that seeding compiles
    in every new process (20 ms); another key type from JAX itself."""
    if jax.config.jax_default_prng_impl == "threefry2x32" and 0 <= seed < 2**32:
        return (0, int(seed))
    return tuple(int(k) for k in np.asarray(jax.random.key_data(jax.random.key(seed))))


@dataclass(frozen=True)
class MinibatchSchedule:
    """Attributes: ``n_blocks`` in the training split, ``blocks_per_step``, ``key_data``, the raw (uint32)
    data of the JAX key the permutations are drawn from, and for a run continued on a grown store
    ``start_step`` and ``first_block`` (see the module docstring; 0 and 0 otherwise)."""

    n_blocks: int
    blocks_per_step: int
    key_data: tuple[int, ...]
    start_step: int = 0
    first_block: int = 0

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.epoch_blocks / self.blocks_per_step)

    @property
    def epoch_blocks(self) -> int:
        """The blocks an epoch visits (from ``first_block`` on)."""
        return self.n_blocks - self.first_block

    @property
    def full_batch(self) -> bool:
        return self.blocks_per_step >= self.epoch_blocks

    def epoch_of(self, step: int) -> int:
        """The epoch (from 0, counted from ``start_step``) that ``step`` (from 0) belongs to."""
        return (step - self.start_step) // self.steps_per_epoch

    def ends_epoch(self, step: int) -> bool:
        """True when ``step`` is the last step of its epoch."""
        return (step - self.start_step + 1) % self.steps_per_epoch == 0

    def blocks(self, step: int) -> list[int]:
        """The blocks of ``step``, sorted (the order in which their results are summed)."""
        if self.full_batch:
            return list(range(self.first_block, self.n_blocks))
        epoch, position = divmod(step - self.start_step, self.steps_per_epoch)
        order = self._permutation(epoch)
        return sorted(self.first_block + b for b in order[position * self.blocks_per_step:(position + 1) * self.blocks_per_step])

    @lru_cache(maxsize=2)
    def _permutation(self, epoch: int) -> list[int]:
        key = jax.random.wrap_key_data(np.asarray(self.key_data, dtype=np.uint32))
        if self.start_step:
            key = jax.random.fold_in(key, self.start_step)
        return np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), self.epoch_blocks)).tolist()
