"""A seeded shuffle of a stream of row blocks in bounded memory (a shuffle buffer).

Training samples minibatches as whole blocks of consecutive stored rows, so a store kept in source
order (the airline files are sorted by date) would give every minibatch one short stretch of the data.
Ingest therefore passes its rows through :class:`ShuffleBuffer`: rows are held until ``2 · capacity``
have gathered, then a random half is emitted. Memory stays bounded whatever the input size; an input
that fits in the buffer comes out as a uniform random permutation, a longer one with every row moved
within windows of about ``capacity`` rows. The output depends only on the rows and the seed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

BUFFER_BYTES = 16 * 2**20
"""Target size of the buffer's ``capacity`` rows. It holds up to twice that, and an emission briefly
needs the held blocks and their concatenation, so the peak is about four times this (64 MB)."""


def capacity_for(row_bytes: int, budget: int = BUFFER_BYTES) -> int:
    """Rows of ``row_bytes`` bytes that fit in ``budget`` (at least one)."""
    return max(1, budget // max(1, row_bytes))


class ShuffleBuffer:
    """Shuffles the rows (first axis) of the arrays streamed through it.

    Args:
        capacity: rows kept back between emissions; memory holds at most ``2 · capacity`` rows.
        seed: seed of the permutation.

    Example:
        >>> buffer = ShuffleBuffer(capacity=4, seed=0)
        >>> out = [rows for block in (np.arange(5), np.arange(5, 10)) for rows in buffer.push(block)]
        >>> out += list(buffer.drain())
        >>> sorted(np.concatenate(out).tolist()) == list(range(10))
        True
    """

    def __init__(self, capacity: int, seed: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be a positive number of rows; got {capacity}")
        self.capacity = capacity
        self._rng = np.random.default_rng(seed)
        self._parts: list[np.ndarray] = []
        self.size = 0  # rows held

    def push(self, rows: np.ndarray) -> Iterator[np.ndarray]:
        """Add rows; yield a random ``size − capacity`` of the held rows once ``2 · capacity`` are held."""
        self._parts.append(rows)
        self.size += len(rows)
        if self.size >= 2 * self.capacity:
            yield self._emit(self.size - self.capacity)

    def drain(self) -> Iterator[np.ndarray]:
        """Yield every held row, in random order."""
        if self.size:
            yield self._emit(self.size)

    def _emit(self, count: int) -> np.ndarray:
        held = np.concatenate(self._parts)
        self._parts = []
        held = held[self._rng.permutation(len(held))]  # a copy, as large as the concatenation's peak
        self.size -= count
        if self.size:
            self._parts = [held[count:]]
        return held[:count]
