"""The distributed engine (DESIGN §4): sums of a per-block function over blocks, in a fixed order.

``Engine.map_sum(fn, params, blocks)`` evaluates ``fn(params, x, y, mask)`` on each listed block of a
:class:`~pep_gp.pipeline.data.blocks.BlockSource` and returns the sum of the results. It knows nothing about
models: ``fn`` is any hashable, picklable function returning a pytree (the coordinator passes
``value_and_grad`` of a model's data term, or a held-out metric function).

Backends:

* :class:`InProcess` — no Dask; blocks are computed in this process (notebooks, estimators, tests).
* :class:`DaskBackend` — a ``LocalCluster`` of worker *processes* (``local:N``; ``local:N:pinned``
  gives worker ``i`` core ``i mod cores`` alone: no oversubscription, but results then match other
  pinned clusters, not the in-process backend, see below) or an existing
  scheduler (``tcp://HOST:PORT``). Each step the params are scattered to every worker (one copy
  each); each worker gets one task with the blocks assigned to it (block ``b`` goes to
  worker ``b mod W``, so a worker keeps seeing the same blocks); tasks may move to another worker if
  theirs dies, and a failed step is re-run.

Memory: every process that computes blocks keeps the blocks it read in a :class:`BlockCache` of at most
``PEP_BLOCK_CACHE_MB`` megabytes (default 16; 0 turns it off), least recently used first out, plus the
blocks of its latest call when they total at most :data:`LATEST_CALL_MB` (one step's share of the
minibatch; not an evaluation pass over a large test split), which a step's second pass over the same
blocks (the data term after the site statistics) finds whatever the budget. Cached blocks live on JAX's
default device (a GPU's memory where there is one), so a block is copied there once, not per call. A
block evicted from it is read from Zarr again when next needed, which the operating system's page cache
and the ≤ 1 MiB chunks of ``pep ingest`` make cheap (0.75 ms per 1,000-row airline block, measured). A
worker's memory is therefore bounded by the budget plus :data:`LATEST_CALL_MB` whatever the number of
rows N: a store that fits in the budget is read once, a larger one costs a re-read per block per epoch.

Determinism: every block's result is computed by the same compiled function on the same inputs,
whatever process computes it, and the per-block results are summed on the coordinator in a fixed
binary tree over the block order (:func:`tree_sum`). The result is therefore bit-for-bit the same for
any number of workers, for any task timing and after a worker is lost — provided every process
computes with the same thread settings. Three settings change the last bits (all measured here):

* JAX's CPU Cholesky and triangular solves call the OpenBLAS/LAPACK that scipy loads, whose blocking
  follows its thread count: every backend computes under :func:`compute_threads` (one BLAS thread,
  applied per call with threadpoolctl, so it also holds in a notebook or test process);
* ``--xla_cpu_multi_thread_eigen`` changes some small dot products. XLA reads its flags once, when a
  process's backend starts, so a process that already ran JAX (a notebook, the test runner) cannot be
  pinned afterwards: pep therefore leaves XLA's flags at their defaults in every backend;
* XLA:CPU partitions some reductions by its thread-pool size, which follows the process's CPU
  affinity (a column sum of a (100, 2000) array differs between 1 and 2 visible cores), so every
  process must see the same number of cores: true on one machine; for remote workers use machines
  of the same type, or accept last-bit differences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ..data.blocks import BlockSource
from .backends import Backend, DaskBackend, InProcess
from ..cluster_address import CLUSTER_HELP, parse_cluster
from .clusters import connect, connected

__all__ = ["CLUSTER_HELP", "Backend", "DaskBackend", "Engine", "InProcess", "connect", "connected", "parse_cluster",
           "tree_sum"]


def tree_sum(parts: Sequence[Any]) -> Any:
    """Sum of pytrees in a fixed, balanced binary tree over their order (deterministic rounding)."""
    if not parts:
        raise ValueError("tree_sum of no parts")
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return jax.tree_util.tree_map(np.add, tree_sum(parts[:middle]), tree_sum(parts[middle:]))



class Engine:
    """Fixed-order sums over the blocks of one source, computed by a backend."""

    def __init__(self, backend: Backend, source: BlockSource):
        self.backend, self.source = backend, source

    def map_sum(self, fn: Callable, params: Any, blocks: Sequence[int]) -> Any:
        """``Σ_{b in blocks} fn(params, *block_b)``, summed by :func:`tree_sum` in ``blocks`` order."""
        return tree_sum(self.backend.evaluate(fn, params, self.source, list(blocks)))

    def rows(self, blocks: Sequence[int]) -> int:
        """Real rows in ``blocks`` (the minibatch size |B|)."""
        return sum(self.source.rows_in(b) for b in blocks)
