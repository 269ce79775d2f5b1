"""The in-process backend (:class:`InProcess`: every block computed in this process, as in a notebook, an
estimator's fit or a test), the protocol every backend serves (:class:`Backend`), and objects placed in this
process (:class:`InThreads`, the in-process :class:`Placement`).

Nothing here imports Dask: a fit in this process loads neither ``dask`` nor ``distributed`` (with Zarr, imported
where a store is opened, 0.7 s of the 7.4 s of CPU a second process's fit of Boston took: issue 63). The Dask backend and
its worker plugins are in :mod:`pep_gp.pipeline.engine.backends` and :mod:`pep_gp.pipeline.engine.residents`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Protocol

import jax

from ...core import float64
from ..data.blocks import BlockSource
from .cache import Keeping, Kept, sum_blocks


class Placement(Protocol):
    """Objects resident where blocks are computed (a backend's ``place(objects)``), in order."""

    def each(self, method: str, args: list[tuple]) -> list:
        """``objects[i].method(*args[i])`` for every object ``i`` at once, the results in order."""

    def release(self) -> None:
        """Let the objects go (their threads, or their memory on the workers)."""


class InThreads:
    """Objects placed in this process: called one after the other, or with ``threads``, each object's calls on
    a thread of its own, all at once (the same programs, so the same bits; XLA runs them outside Python's lock,
    so the objects can share the cores of one process)."""

    def __init__(self, objects: list[Any], threads: bool = False):
        self.objects = objects
        self.threads = ThreadPoolExecutor(len(objects), thread_name_prefix="pep-resident") if threads else None

    def each(self, method: str, args: list[tuple]) -> list:
        calls = [partial(_in_float64, getattr(thing, method), arguments)
                 for thing, arguments in zip(self.objects, args)]
        if self.threads is None:
            return [call() for call in calls]
        return list(self.threads.map(lambda call: jax.block_until_ready(call()), calls))

    def release(self) -> None:
        """Stop the objects' threads."""
        if self.threads is not None:
            self.threads.shutdown()


def _in_float64(method: Callable, arguments: tuple) -> Any:
    """``method(*arguments)`` in float64 (JAX's precision setting is per thread)."""
    with float64():
        return method(*arguments)


class Backend(Protocol):
    """Where blocks are computed. Sums follow the fixed tree of :mod:`pep_gp.pipeline.engine.summation`."""

    description: str

    @property
    def n_workers(self) -> int:
        """Processes that compute (1 in-process)."""

    def sum(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], keep: Keeping | None = None,
            of: Keeping | None = None) -> Any:
        """A pass: ``Σ_b fn(inputs, *block_b)`` (:func:`~pep_gp.pipeline.engine.cache.sum_blocks`). With
        ``keep``, a keeping pass's handle, each block's kept part stays where the block was computed, and the
        backend records in ``keep`` where that is; with ``of``, the pass sums
        ``fn(inputs, shared, part_b, y_b, mask_b)`` from the parts the keeping pass ``of`` left (``blocks``
        are its blocks)."""

    def release(self, keeping: Keeping) -> None:
        """Drop the parts the keeping pass ``keeping`` left where its blocks were computed."""

    @property
    def slots(self) -> int:
        """Objects :meth:`place` runs side by side: the workers, or this process's cores."""

    def place(self, objects: list[Any]) -> Placement:
        """``objects`` resident where blocks are computed, their calls side by side
        (:mod:`pep_gp.pipeline.engine.residents`)."""

    def map_ordered(self, fn: Callable, items: Iterable, window: int) -> Iterator:
        """``fn(item)`` for each item, yielded in the items' order, with at most ``window`` items taken
        from ``items`` and not yet yielded (memory stays bounded whatever their number)."""

    def close(self) -> None:
        """Release what the backend started."""


class InProcess:
    """Computes every block in this process."""

    description = "in-process"
    n_workers = 1

    def __init__(self) -> None:
        self.kept = Kept()

    def sum(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], keep: Keeping | None = None,
            of: Keeping | None = None) -> Any:
        return sum_blocks(fn, inputs, source, blocks, self.kept, None if keep is None else keep.token,
                          None if of is None else of.token, None if of is None else (of.fn, of.inputs),
                          to_host=False)

    def release(self, keeping: Keeping) -> None:
        self.kept.release(keeping.token)

    @property
    def slots(self) -> int:
        return len(os.sched_getaffinity(0))

    def place(self, objects: list[Any]) -> Placement:
        """``objects`` in this process, each on a thread of its own when there are several."""
        return InThreads(objects, threads=len(objects) > 1)

    def map_ordered(self, fn: Callable, items: Iterable, window: int = 1) -> Iterator:
        return map(fn, items)

    def close(self) -> None:
        pass
